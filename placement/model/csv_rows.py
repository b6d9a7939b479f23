"""Reading the rows of a small CSV input file (machine lists, pod lists) with errors that name the place.

Every row comes with its 1-based file line; a problem raises the caller's :class:`InputError` subclass
naming the file, the line, the column and the bad value. Checked here: the file exists and is UTF-8
text, the header is the expected one, each row has the right number of fields, and, on request, that
a field is a finite non-negative number or a whole one. Blank lines are skipped.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from placement.model.errors import InputError
from placement.model.text_files import not_utf8_error, refuse_non_text

if TYPE_CHECKING:  # the reader's type is named only in the stubs
    from _csv import Reader

SHOWN_CHARS = 120
"""At most this much of a malformed line goes into its error: enough to recognise it, not a screenful."""


@dataclass(frozen=True)
class Row:
    """One data row of a CSV file, with where it came from and the error type its problems raise."""

    path: str
    line: int
    fields: dict[str, str]
    error_type: type[InputError]

    def error(self, column: str | None, problem: str, value: str | None = None) -> InputError:
        return self.error_type(self.path, problem, self.line, column, value)

    def amount(self, column: str) -> float:
        """A finite, non-negative number."""
        text = self.fields[column]
        try:
            value = float(text)
        except ValueError:
            raise self.error(column, f"{column} is not a number", text) from None
        if not math.isfinite(value):
            raise self.error(column, f"{column} is not a finite number", text)
        if value < 0:
            raise self.error(column, f"{column} is negative", text)
        return value

    def count(self, column: str) -> int:
        """A whole, non-negative number."""
        value = self.amount(column)
        if not value.is_integer():
            raise self.error(column, f"{column} is not a whole number", self.fields[column])
        return int(value)


def open_text(path: str | Path, error_type: type[InputError]) -> TextIO:
    """``path`` opened as UTF-8 text (a leading byte-order mark skipped), or an ``error_type`` saying why not."""
    refuse_non_text(path, error_type)
    try:
        return open(path, encoding="utf-8-sig", newline="")
    except FileNotFoundError:
        raise error_type(str(path), "file not found") from None
    except OSError as exc:
        raise error_type(str(path), f"cannot read the file: {exc}") from None


def csv_rows(path: str | Path, columns: tuple[str, ...], has_header: bool,
             error_type: type[InputError]) -> Iterator[Row]:
    """The non-blank rows of the CSV file ``path``, whose fields are ``columns`` (its header line, if it has one)."""
    with open_text(path, error_type) as handle:
        reader = csv.reader(handle)
        try:
            yield from _checked_rows(reader, str(path), columns, has_header, error_type)
        except UnicodeDecodeError as exc:  # binary data, or text saved as UTF-16
            raise not_utf8_error(path, error_type, exc) from None
        except csv.Error as exc:
            raise error_type(str(path), f"not a well-formed CSV file: {exc}", reader.line_num) from None


def _checked_rows(reader: Reader, path: str, columns: tuple[str, ...], has_header: bool,
                  error_type: type[InputError]) -> Iterator[Row]:
    if has_header:
        header = next(reader, None)
        if header is None or [h.strip() for h in header] != list(columns):
            got = ",".join(header) if header is not None else "an empty file"
            raise error_type(path, f"expected the header {','.join(columns)}", 1, None, got)
    for fields in reader:
        if not fields or fields == [""]:
            continue
        if len(fields) != len(columns):
            problem = f"expected {len(columns)} fields ({','.join(columns)}), got {len(fields)}"
            raise error_type(path, problem, reader.line_num, None, ",".join(fields)[:SHOWN_CHARS])
        values = {column: text.strip() for column, text in zip(columns, fields, strict=True)}
        yield Row(path, reader.line_num, values, error_type)
