"""Errors for input a person must fix: each names the file, line, column and value at fault.

These are for bad input only; a policy's "does not fit" is a value, not an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(eq=False)
class InputError(ValueError):
    """Input that cannot be used as it is.

    ``line`` is the 1-based line in the file (a header, when the file has one, is line 1), so a
    person can open the file there; ``None`` means the problem is not tied to one line (a missing
    file or column).
    """

    path: Path | str
    problem: str
    line: int | None = None
    column: str | None = None
    value: object = None

    place_word = "column"
    """What ``column`` is called in the message: a column of a file, or a field of a document."""

    def __str__(self) -> str:
        where = str(self.path)
        if self.line is not None:
            where += f", line {self.line}"
        if self.column is not None:
            where += f", {self.place_word} '{self.column}'"
        text = f"{where}: {self.problem}"
        if self.value is not None:
            text += f" (got {self.value!r})"
        return text


class ClusterSpecError(InputError):
    """A machine list (cluster spec file) that cannot be used as it is."""


class TopologyError(InputError):
    """A topology (racks and domains) file that cannot be used as it is."""


class PodListError(InputError):
    """A pod list (the openb pod-list format) that cannot be used as it is."""
