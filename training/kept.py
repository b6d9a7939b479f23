"""Files kept on disk by what they are made from: what a run works out the same way every time (a trace's causal
features, the speed model of the shipped profiles) is kept under a name that holds a digest of its inputs, so
that the next run on the same inputs reads it instead.

A file is written whole or not at all (written aside, then renamed); one that cannot be read is made again; a
disk that cannot take it costs the next run the work, nothing else. At most ``keep`` files of one kind are kept,
the least recently used dropped first.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from hashlib import _Hash

log = logging.getLogger(__name__)
T = TypeVar("T")


def kept(path: Path, make: Callable[[], T], read: Callable[[Path], T], write: Callable[[T, Path], object],
         keep: int, unreadable: tuple[type[Exception], ...] = (OSError, ValueError)) -> T:
    """What ``make()`` makes, read from ``path`` where it was written before (``read``), else made and written
    there (``write(value, where)``). ``path``'s name is ``<kind>-<digest>.<suffix>``: of the files of its kind in
    its folder, the ``keep`` most recently used are kept. ``unreadable``: what ``read`` raises for a damaged
    file."""
    if path.exists():
        try:
            value = read(path)
            os.utime(path)  # recently used: kept longest
            return value
        except unreadable as exc:
            log.warning("kept file unreadable, made again", extra={"path": str(path), "error": str(exc)})
    value = make()
    aside = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.part")  # writers never share one
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(value, aside)
        os.replace(aside, path)
        _prune(path, keep)
    except OSError as exc:
        aside.unlink(missing_ok=True)
        log.warning("kept file not written", extra={"path": str(path), "error": str(exc)})
    return value


def _prune(path: Path, keep: int) -> None:
    kind = path.name.rsplit("-", 1)[0]
    files = sorted(path.parent.glob(f"{kind}-*{path.suffix}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[keep:]:
        old.unlink(missing_ok=True)


def add_files(digest: _Hash, files: Iterable[Path], root: Path) -> None:
    """Add each of ``files`` (in sorted order) to ``digest``: its path below ``root``, then its bytes; what a kept
    file is made from, data and the code that makes it."""
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
