"""Reading source CSV files with errors that name file, line, column and value.

Every column is read as text first and converted here, so that a cell that is not a number is
reported with its line instead of surfacing as a NaN three steps later.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from placement.model.text_files import not_utf8_error, refuse_non_text
from training.ingest.errors import DataError


def read_header_file(path: Path) -> list[str]:
    """Column names from a one-line ``.header`` file (the PAI v2020 convention)."""
    if not path.is_file():
        raise DataError(path, "header file not found")
    refuse_non_text(path, DataError)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # binary data, or text saved as UTF-16
        raise not_utf8_error(path, DataError, exc) from exc
    names = [n.strip() for n in text.strip().split(",")]
    if not names or any(not n for n in names):
        raise DataError(path, "header line has an empty column name", 1)
    return names


def read_text_csv(path: Path, required: Sequence[str], names: Sequence[str] | None = None) -> pd.DataFrame:
    """Read ``path`` with every cell as text (empty cells as NA).

    With ``names`` the file has no header line and these are its columns; otherwise the first line
    is the header. Raises :class:`DataError` for a missing file, one that is not UTF-8 text, one
    without data rows, or a missing required column.
    The result carries ``attrs['first_line']``: the file line of row 0.
    """
    if not path.is_file():
        raise DataError(path, "file not found")
    refuse_non_text(path, DataError)
    try:
        frame = pd.read_csv(
            path,
            dtype="string",
            keep_default_na=False,
            na_values=[""],
            header=None if names is not None else 0,
            names=list(names) if names is not None else None,
            engine="c",
        )
    except pd.errors.ParserError as exc:
        raise DataError(path, f"not a well-formed CSV file: {exc}") from exc
    except pd.errors.EmptyDataError as exc:
        raise DataError(path, "file is empty") from exc
    except UnicodeDecodeError as exc:  # binary data, or text saved as UTF-16
        raise not_utf8_error(path, DataError, exc) from exc
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise DataError(path, f"missing column(s) {', '.join(missing)}; found {', '.join(map(str, frame.columns))}",
                        column=missing[0])
    if frame.empty:  # a table of nothing would pass every check and train or describe nothing
        raise DataError(path, "no data rows" + ("" if names is not None else ": the file has only its header line"))
    frame.attrs["first_line"] = 1 if names is not None else 2
    return frame


def line_numbers(frame: pd.DataFrame) -> np.ndarray:
    """File line of each row of a frame from :func:`read_text_csv`."""
    first = int(frame.attrs.get("first_line", 2))
    return np.arange(first, first + len(frame), dtype=np.int64)


def numeric(
    frame: pd.DataFrame,
    column: str,
    path: Path,
    *,
    allow_missing: bool = True,
    non_negative: bool = False,
) -> pd.Series:
    """Column ``column`` converted to float64, or a :class:`DataError` at the first bad cell."""
    text = frame[column]
    values = pd.to_numeric(text, errors="coerce").astype("float64")
    lines = line_numbers(frame)
    unparsable = values.isna().to_numpy() & text.notna().to_numpy()
    _raise_first(unparsable, text, lines, path, column, "is not a number")
    if not allow_missing:
        _raise_first(text.isna().to_numpy(), text, lines, path, column, "is missing")
    arr = values.to_numpy()
    _raise_first(np.isinf(arr), text, lines, path, column, "must be finite")
    if non_negative:
        _raise_first(arr < 0, text, lines, path, column, "must not be negative")
    return values


def check_vocabulary(
    frame: pd.DataFrame, column: str, path: Path, allowed: Iterable[str], *, separator: str | None = None
) -> None:
    """Raise :class:`DataError` at the first cell of ``column`` whose value is not in ``allowed``."""
    allowed_set = set(allowed)
    text = frame[column]
    present = text.dropna()
    if separator is None:
        bad_mask = ~present.isin(allowed_set).to_numpy(dtype=bool)
    else:
        bad_mask = np.array([any(p not in allowed_set for p in str(v).split(separator)) for v in present],
                            dtype=bool)
    if bad_mask.any():
        pos = int(np.flatnonzero(bad_mask)[0])
        idx = present.index[pos]
        row = int(line_numbers(frame)[frame.index.get_loc(idx)])
        raise DataError(path, f"unknown value; expected one of {', '.join(sorted(allowed_set))}", row, column,
                        text.loc[idx])


def _raise_first(
    mask: np.ndarray, text: pd.Series, lines: np.ndarray, path: Path, column: str, problem: str
) -> None:
    bad = np.flatnonzero(mask)
    if bad.size:
        i = int(bad[0])
        value = text.iloc[i]
        raise DataError(path, f"{column} {problem}", int(lines[i]), column, None if pd.isna(value) else value)


def text_cells(raw: pd.DataFrame, column: str, path: Path) -> pd.Series:
    """``column`` as text; a missing or blank cell is a :class:`DataError` naming its line."""
    text = raw[column]
    blank = text.isna().to_numpy(dtype=bool) | (text.fillna("").astype(str).str.strip() == "").to_numpy(dtype=bool)
    raise_first(raw, column, path, blank, "is missing")
    return text.astype(str)


def integer_cells(raw: pd.DataFrame, column: str, path: Path, *, minimum: int) -> pd.Series:
    """``column`` as whole numbers of at least ``minimum``."""
    values = numeric(raw, column, path, allow_missing=False).to_numpy()
    raise_first(raw, column, path, values != np.floor(values), "must be a whole number")
    raise_first(raw, column, path, values < minimum, f"must be at least {minimum}")
    return pd.Series(values.astype(np.int64), index=raw.index)


def positive_cells(raw: pd.DataFrame, column: str, path: Path) -> pd.Series:
    """``column`` as numbers greater than 0."""
    values = numeric(raw, column, path, allow_missing=False, non_negative=True)
    raise_first(raw, column, path, values.to_numpy() == 0, "must be greater than 0")
    return values


def raise_first(raw: pd.DataFrame, column: str, path: Path, mask: np.ndarray, problem: str) -> None:
    """A :class:`DataError` for the first row of ``raw`` where ``mask`` holds (if any)."""
    bad = np.flatnonzero(mask)
    if bad.size:
        i = int(bad[0])
        value = raw[column].iloc[i]
        raise DataError(path, f"{column} {problem}", int(line_numbers(raw)[i]), column,
                        None if pd.isna(value) else value)
