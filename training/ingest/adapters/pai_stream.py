"""Reading header-less PAI CSV tables with pyarrow: whole (small tables) or streamed and reduced.

A malformed file makes pyarrow stop without a line number; the slow path :func:`locate_bad_row`
then scans the file with the ``csv`` module to name the first bad line, column and value.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from placement.model.text_files import not_utf8_error, refuse_non_text
from training.ingest.errors import DataError
from training.ingest.readers import read_header_file

BLOCK_BYTES = 16 << 20
"""Bytes per streamed block: bounds memory per step, large enough to keep pyarrow's threads busy."""

Aggregation = tuple[str, str]


def table_files(directory: Path, table: str, header_dirs: Sequence[Path]) -> tuple[Path, list[str]]:
    """The CSV path of ``table`` and its column names (from the first ``.header`` file found)."""
    path = directory / f"{table}.csv"
    if not path.is_file():
        raise DataError(path, f"file not found (the PAI table {table} is needed)")
    refuse_non_text(path, DataError)
    for head_dir in header_dirs:
        header = head_dir / f"{table}.header"
        if header.is_file():
            return path, read_header_file(header)
    raise DataError(directory / f"{table}.header", "header file not found", None)


def read_small_table(directory: Path, table: str, header_dirs: Sequence[Path],
                     types: dict[str, pa.DataType]) -> pa.Table:
    """Read the ``types`` columns of ``table`` whole, plus ``_line`` (its 1-based file line)."""
    path, names = table_files(directory, table, header_dirs)
    _require(path, names, types)
    try:
        result = pacsv.read_csv(path, read_options=_read_options(names), convert_options=_convert(types))
    except pa.ArrowInvalid as exc:
        raise locate_bad_row(path, names, types, exc) from exc
    lines = pa.array(range(1, result.num_rows + 1), pa.int64())
    return result.append_column("_line", lines)


def aggregate_stream(
    directory: Path,
    table: str,
    header_dirs: Sequence[Path],
    types: dict[str, pa.DataType],
    keys: list[str],
    aggregations: list[Aggregation],
    *,
    derive: Callable[[pa.Table], pa.Table] | None = None,
    progress: Callable[[int], None] | None = None,
) -> pa.Table:
    """Stream ``table`` in blocks, reduce each by ``keys``, then combine the partial results.

    Supported aggregations: ``min``, ``max``, ``count`` and ``mean`` (combined from sums and counts,
    so the result is the exact mean over all rows). Output columns are named ``<column>_<agg>``.
    """
    path, names = table_files(directory, table, header_dirs)
    _require(path, names, types)
    partial_specs = _partial_specs(aggregations)
    partials: list[pa.Table] = []
    try:
        reader = pacsv.open_csv(path, read_options=_read_options(names), convert_options=_convert(types))
        for batch in reader:
            block = pa.Table.from_batches([batch])
            if derive is not None:
                block = derive(block)
            partials.append(block.group_by(keys).aggregate(partial_specs))
            if progress is not None:
                progress(batch.nbytes)
    except pa.ArrowInvalid as exc:
        raise locate_bad_row(path, names, types, exc) from exc
    return _combine(partials, keys, aggregations)


def _partial_specs(aggregations: list[Aggregation]) -> list[tuple[str, str]]:
    specs: list[tuple[str, str]] = []
    for column, how in aggregations:
        if how == "mean":
            specs += [(column, "sum"), (column, "count")]
        elif how in ("min", "max", "count"):
            specs.append((column, how))
        else:
            raise ValueError(f"unsupported aggregation {how!r}")
    return specs


def _combine(partials: list[pa.Table], keys: list[str], aggregations: list[Aggregation]) -> pa.Table:
    if not partials:
        return _empty_result(keys, aggregations)
    merged = pa.concat_tables(partials)
    specs: list[tuple[str, str]] = []
    for column, how in aggregations:
        if how == "mean":
            specs += [(f"{column}_sum", "sum"), (f"{column}_count", "sum")]
        elif how == "count":
            specs.append((f"{column}_count", "sum"))
        else:
            specs.append((f"{column}_{how}", how))
    total = merged.group_by(keys).aggregate(specs)
    columns = {k: total[k] for k in keys}
    for column, how in aggregations:
        if how == "mean":
            count = total[f"{column}_count_sum"]
            safe = pc.if_else(pc.equal(count, 0), pa.scalar(None, pa.int64()), count)
            columns[f"{column}_mean"] = pc.divide(pc.cast(total[f"{column}_sum_sum"], pa.float64()),
                                                  pc.cast(safe, pa.float64()))
        elif how == "count":
            columns[f"{column}_count"] = total[f"{column}_count_sum"]
        else:
            columns[f"{column}_{how}"] = total[f"{column}_{how}_{how}"]
    return pa.table(columns)


def _empty_result(keys: list[str], aggregations: list[Aggregation]) -> pa.Table:
    fields = [pa.field(k, pa.string()) for k in keys]
    fields += [pa.field(f"{c}_{h}", pa.int64() if h == "count" else pa.float64()) for c, h in aggregations]
    return pa.schema(fields).empty_table()


def _require(path: Path, names: list[str], types: dict[str, pa.DataType]) -> None:
    missing = [c for c in types if c not in names]
    if missing:
        raise DataError(path, f"its header lacks column(s) {', '.join(missing)}", column=missing[0])


def _read_options(names: list[str]) -> pacsv.ReadOptions:
    return pacsv.ReadOptions(column_names=names, block_size=BLOCK_BYTES)


def _convert(types: dict[str, pa.DataType]) -> pacsv.ConvertOptions:
    return pacsv.ConvertOptions(column_types=types, include_columns=list(types), strings_can_be_null=True)


def locate_bad_row(path: Path, names: list[str], types: dict[str, pa.DataType], cause: Exception) -> DataError:
    """Scan ``path`` to find the first line pyarrow could not read; a :class:`DataError` naming it."""
    numeric = {names.index(c): c for c, t in types.items() if pa.types.is_floating(t) or pa.types.is_integer(t)}
    with path.open(encoding="utf-8", newline="") as handle:
        try:
            found = _first_bad_row(csv.reader(handle), path, names, numeric)
        except UnicodeDecodeError as exc:  # pyarrow's "invalid UTF8": binary data, or text saved as UTF-16
            return not_utf8_error(path, DataError, exc)
        except csv.Error as exc:
            return DataError(path, f"not a well-formed CSV file: {exc}")
    return found or DataError(path, f"unreadable CSV: {cause}")


def _first_bad_row(rows: Iterator[list[str]], path: Path, names: list[str],
                   numeric: dict[int, str]) -> DataError | None:
    """A :class:`DataError` for the first row with the wrong field count or a non-number in ``numeric``."""
    for line, row in enumerate(rows, start=1):
        if len(row) != len(names):
            return DataError(path, f"expected {len(names)} fields (from the header file), found {len(row)}",
                             line, None, ",".join(row)[:120])
        for index, column in numeric.items():
            cell = row[index]
            if cell and not _is_number(cell):
                return DataError(path, f"{column} is not a number", line, column, cell)
    return None


def _is_number(text: str) -> bool:
    try:
        return not math.isinf(float(text))
    except ValueError:
        return False
