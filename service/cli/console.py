"""The rich console the command line prints to, and the progress of long commands.

On a terminal, progress is a rich bar that redraws in place. Elsewhere (a container log, a CI job, a
pipe) a bar prints nothing, so a training of several minutes would look hung: there progress is plain
lines on stderr, one per step and one every ``GPUPLACE_PROGRESS_S`` seconds (default 30) while a step runs.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TextIO

from rich.console import Console

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

PIPE_WIDTH = 160
"""Columns used when output goes to a file or pipe (rich would otherwise assume 80)."""
PROGRESS_ENV = "GPUPLACE_PROGRESS_S"
DEFAULT_EVERY_S = 30.0


def make_console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else PIPE_WIDTH)


class Steps(Protocol):
    """What a long command tells its progress: the step it is on, and units done (of ``total``)."""

    def update(self, description: str) -> None: ...

    def advance(self, units: int = 1) -> None: ...


class _Bar:
    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress, self._task = progress, task

    def update(self, description: str) -> None:
        self._progress.update(self._task, description=description)

    def advance(self, units: int = 1) -> None:
        self._progress.advance(self._task, units)


class LineProgress:
    """Progress as plain lines: the first description, every new one, and a heartbeat every ``every_s``
    seconds without a line, each with the time since the start and units done."""

    def __init__(self, description: str, total: int | None, stream: TextIO, every_s: float) -> None:
        self.description, self.total, self.done = description, total, 0
        self._stream, self._every_s = stream, every_s
        self._started = self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="progress-lines", daemon=True)

    def __enter__(self) -> LineProgress:
        self._emit()
        self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._beat.join()
        with self._lock:
            outcome = "stopped" if exc[0] is not None else "done"
            self._write(f"{self.description}: {outcome}")

    def update(self, description: str) -> None:
        with self._lock:
            if description != self.description:
                self.description = description
                self._write(self.description)

    def advance(self, units: int = 1) -> None:
        with self._lock:
            self.done += units

    def _heartbeat(self) -> None:
        while not self._stopped.wait(timeout=min(self._every_s, 1.0)):
            if time.monotonic() - self._last >= self._every_s:
                self._emit()

    def _emit(self) -> None:
        with self._lock:
            self._write(self.description)

    def _write(self, text: str) -> None:
        self._last = now = time.monotonic()
        count = ""
        if self.total:
            count = f" [{self.done:,}/{self.total:,}, {self.done / self.total:.0%}]"
        elif self.done:
            count = f" [{self.done:,}]"
        self._stream.write(f"progress {now - self._started:7.1f}s {text}{count}\n")
        self._stream.flush()


def every_s() -> float:
    """Seconds between heartbeat lines, from ``GPUPLACE_PROGRESS_S``."""
    text = os.environ.get(PROGRESS_ENV, "")
    try:
        value = float(text) if text else DEFAULT_EVERY_S
    except ValueError:
        value = DEFAULT_EVERY_S
    return value if value > 0 else DEFAULT_EVERY_S


@contextmanager
def progress(console: Console, description: str, total: int | None = None) -> Iterator[Steps]:
    """A rich bar on ``console`` if it is a terminal, else :class:`LineProgress` on stderr."""
    if console.is_terminal:
        from rich.progress import Progress

        with Progress(console=console, transient=True) as bar:
            yield _Bar(bar, bar.add_task(description, total=total))
        return
    with LineProgress(description, total, sys.stderr, every_s()) as lines:
        yield lines
