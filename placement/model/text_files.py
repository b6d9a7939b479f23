"""Refusing files that should be UTF-8 text but are not, with an error that says why and where.

Two checks, both cheap for a well-formed file:

* :func:`refuse_non_text`, before a reader starts, looks at the first block only: a UTF-16 or UTF-32
  byte-order mark, or a NUL byte (binary data, or UTF-16 text without the mark, which would
  otherwise decode as UTF-8 into columns of garbage);
* :func:`not_utf8_error`, after a reader met undecodable bytes (it learns only an offset into some
  internal buffer), rescans the file to name the line and the bytes at fault.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import BinaryIO, TypeVar

from placement.model.errors import InputError

E = TypeVar("E", bound=InputError)

SNIFF_BYTES = 8192
"""Bytes :func:`refuse_non_text` looks at: a binary file shows a NUL byte long before this."""

SCAN_BYTES = 1 << 20
"""Bytes read per step of the rescan: bounds its memory on a large binary file with no newlines."""

_WIDE_BOMS = (  # UTF-32 first: the UTF-32 LE mark begins with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)
_SAVE_AS_UTF8 = "save it as UTF-8 text"


def refuse_non_text(path: str | Path, error_type: type[E]) -> None:
    """Raise an ``error_type`` if the first block of ``path`` shows it is not UTF-8 text.

    A missing or unreadable file passes: the reader reports that in its own words.
    """
    try:
        with open(path, "rb") as handle:
            start = handle.read(SNIFF_BYTES)
    except OSError:
        return
    error = _start_error(path, error_type, start)
    if error is not None:
        raise error


def not_utf8_error(path: str | Path, error_type: type[E], cause: UnicodeDecodeError) -> E:
    """An ``error_type`` naming ``path``, the line and the bytes that are not UTF-8.

    ``cause`` is what the reader raised; its text is the fallback when the file reads cleanly now
    (it changed, or the reader decoded something else).
    """
    try:
        with open(path, "rb") as handle:
            error = _start_error(path, error_type, handle.read(SNIFF_BYTES))
            handle.seek(0)
            bad = None if error else _first_undecodable(handle)
    except OSError as exc:
        return error_type(str(path), f"cannot read the file: {exc}")
    if error is not None:
        return error
    if bad is None:
        return error_type(str(path), f"not UTF-8 text ({cause.reason}); {_SAVE_AS_UTF8}")
    line, data = bad
    return error_type(str(path), f"not UTF-8 text: binary data, or text in another encoding; {_SAVE_AS_UTF8}",
                      line, None, data)


def _start_error(path: str | Path, error_type: type[E], start: bytes) -> E | None:
    """The error for a file beginning with ``start`` when that alone shows it is not UTF-8 text."""
    encoding = next((name for bom, name in _WIDE_BOMS if start.startswith(bom)), None)
    if encoding is not None:
        return error_type(str(path), f"the file is {encoding} text, not UTF-8 "
                                     f"(it starts with a {encoding} byte-order mark); {_SAVE_AS_UTF8}")
    nul = start.find(b"\x00")
    if nul >= 0:
        return error_type(str(path), "not text: it holds a NUL byte (binary data, or UTF-16 text without a "
                                     f"byte-order mark); {_SAVE_AS_UTF8}", start.count(b"\n", 0, nul) + 1)
    return None


def _first_undecodable(handle: BinaryIO) -> tuple[int, bytes] | None:
    """``(line, bytes)`` of the first bytes of the binary ``handle`` that are not UTF-8, or ``None``."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    while chunk := handle.read(SCAN_BYTES):
        try:
            decoder.decode(chunk)
        except UnicodeDecodeError as exc:
            # exc.object is this chunk behind the bytes of a character the last chunk cut in two, which
            # hold no newline: the newlines before exc.start are the ones not counted yet
            return line + exc.object.count(b"\n", 0, exc.start), exc.object[exc.start:exc.end]
        line += chunk.count(b"\n")
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:  # the file ends inside a multi-byte character
        return line, exc.object[exc.start:exc.end]
    return None
