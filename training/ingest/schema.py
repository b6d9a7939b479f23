"""The canonical job table: one row per task (a group of identical instances) of a job.

Every trace adapter maps its source into exactly these columns, with these dtypes and units.
Missing means missing: a value a source does not record is NA/NaN, never 0.
``docs/canonical-schema.md`` is the prose version of ``COLUMNS``; a test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from training.ingest.errors import DataError

STRING = "string[pyarrow]"
FLOAT = "float64"
INT = "Int64"
BOOL = "boolean"
CATEGORY = "category"

STATUSES = ("succeeded", "failed", "killed", "ended", "running", "pending", "unknown")
"""``ended``: the task finished but the source does not record how."""
ROLES = ("ps", "worker", "evaluator", "chief", "job", "serving", "other")
"""``job``: the row describes a whole job whose tasks the source does not separate."""


@dataclass(frozen=True)
class Column:
    """One column of the canonical table."""

    name: str
    dtype: str
    description: str
    required: bool = False
    non_negative: bool = False


COLUMNS: tuple[Column, ...] = (
    # identity
    Column("source", STRING, "adapter that produced the row (e.g. pai2020-jobs, openb2023)", required=True),
    Column("job_id", STRING, "job identity, unique within the source", required=True),
    Column("task_id", STRING, "task identity within the job (the trace's task name, or '0')", required=True),
    Column("role", CATEGORY, f"normalised task role, one of {', '.join(ROLES)}", required=True),
    Column("instances", INT, "number of identical instances of the task", required=True, non_negative=True),
    # time, seconds on the source's own clock
    Column("submit_time_s", FLOAT, "submission time, seconds on the source's clock; NA if before the trace"),
    Column("start_time_s", FLOAT, "time the first instance started, seconds"),
    Column("end_time_s", FLOAT, "time the last instance ended, seconds"),
    Column("duration_s", FLOAT, "run time from start to end, seconds", non_negative=True),
    Column("status", CATEGORY, f"final state, one of {', '.join(STATUSES)}", required=True),
    Column("censored", BOOL, "true if still running when the trace ended: duration_s is a lower bound",
           required=True),
    # who and what
    Column("user", STRING, "submitting user"),
    Column("group", STRING, "recurrence tag: jobs with the same group repeat the same work"),
    Column("workload", STRING, "workload kind as tagged by the source (bert, ctr, ...)"),
    Column("app", STRING, "application / service the task belongs to"),
    Column("cluster", STRING, "virtual cluster or tenant the job ran in"),
    Column("qos", STRING, "quality-of-service class as the source names it (LS, BE, ...)"),
    # requested, per instance
    Column("req_gpu", FLOAT, "GPUs per instance: a count, or a share of one GPU (0.5 = half)", non_negative=True),
    Column("req_gpu_mem_gib", FLOAT, "GPU memory per instance, GiB", non_negative=True),
    Column("req_cpu_cores", FLOAT, "CPU cores per instance", non_negative=True),
    Column("req_mem_gib", FLOAT, "host memory per instance, GiB", non_negative=True),
    Column("req_disk_gib", FLOAT, "local disk per instance, GiB", non_negative=True),
    Column("req_net_gbps", FLOAT, "network bandwidth per instance, Gbit/s", non_negative=True),
    Column("req_gpu_type", STRING, "allowed GPU types, '|'-separated any-of; NA = any type"),
    Column("max_instances_per_node", INT, "at most this many instances of the app per machine; NA = no limit",
           non_negative=True),
    # observed, per instance
    Column("assigned_gpu_type", STRING, "GPU type the task actually ran on"),
    Column("obs_gpu_util_share", FLOAT, "mean GPU utilisation per instance, share of one GPU", non_negative=True),
    Column("obs_gpu_mem_max_gib", FLOAT, "peak GPU memory per instance, GiB", non_negative=True),
    Column("obs_cpu_cores", FLOAT, "mean CPU cores used per instance", non_negative=True),
    Column("obs_mem_max_gib", FLOAT, "peak host memory per instance, GiB", non_negative=True),
    Column("obs_net_gbps", FLOAT, "mean network bandwidth (in + out) per instance, Gbit/s", non_negative=True),
    # free-form
    Column("hyperparams", STRING, "hyperparameters as a JSON object text; NA when the job states none"),
    # the source's own published estimates (reference only: they may include the job itself)
    Column("ref_user_dur_s", FLOAT, "source-published duration estimate by user, seconds", non_negative=True),
    Column("ref_group_dur_s", FLOAT, "source-published estimate by group+user, seconds", non_negative=True),
    Column("ref_group_gpu_dur_s", FLOAT, "source-published estimate by group+user+GPU type, seconds",
           non_negative=True),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
_BY_NAME = {c.name: c for c in COLUMNS}


def empty_table() -> pd.DataFrame:
    """A canonical table with no rows (every column present, typed)."""
    return conform(pd.DataFrame(), origin="<empty>")


def conform(
    frame: pd.DataFrame, origin: Path | str, lines: Sequence[int] | np.ndarray | None = None
) -> pd.DataFrame:
    """Return ``frame`` as a canonical table: all columns, in order, with their dtypes.

    Columns the frame lacks are added as all-missing. Unknown columns are an error (a typo in an
    adapter must not silently vanish). ``lines`` maps each row to its line in ``origin`` so that a
    violation can be reported where a person can find it.
    """
    unknown = sorted(set(frame.columns) - set(COLUMN_NAMES))
    if unknown:
        raise ValueError(f"not canonical columns: {unknown}")
    n = len(frame)
    out: dict[str, pd.Series] = {}
    for col in COLUMNS:
        if col.name in frame.columns:
            values = frame[col.name]
        else:
            values = pd.Series([pd.NA] * n, index=frame.index, dtype="object")
        try:
            out[col.name] = _cast(values, col)
        except (ValueError, TypeError) as exc:  # pandas' message names neither the column nor the row
            raise _cast_error(values, col, origin, lines, exc) from exc
    table = pd.DataFrame(out, index=pd.RangeIndex(n))
    _check(table, origin, lines)
    return table


_DTYPES: dict[str, Any] = {STRING: pd.StringDtype("pyarrow"), INT: pd.Int64Dtype(), BOOL: pd.BooleanDtype()}


def _cast(values: pd.Series, col: Column) -> pd.Series:
    values = values.reset_index(drop=True)
    if col.dtype == CATEGORY:
        allowed = _categories(col.name)
        dtype: Any = pd.CategoricalDtype(list(allowed)) if allowed else CATEGORY
        categorical: pd.Series = values.astype("string").astype(dtype)
        return categorical
    if col.dtype == FLOAT:
        return pd.to_numeric(values, errors="raise").astype("float64")
    result: pd.Series = values.astype(_DTYPES[col.dtype])
    return result


def _cast_error(values: pd.Series, col: Column, origin: Path | str, lines: Sequence[int] | np.ndarray | None,
                exc: Exception) -> DataError:
    """The first value of ``values`` that is not a ``col.dtype``, named with its line and column."""
    values = values.reset_index(drop=True)
    for i, value in enumerate(values):
        if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
            continue
        try:
            _cast(pd.Series([value], dtype="object"), col)
        except (ValueError, TypeError):
            line = int(lines[i]) if lines is not None else i + 1
            return DataError(origin, f"{col.name} must be {_KINDS.get(col.dtype, col.dtype)}", line, col.name, value)
    return DataError(origin, f"{col.name} must be {_KINDS.get(col.dtype, col.dtype)}: {exc}", None, col.name)


_KINDS = {FLOAT: "a number", INT: "a whole number", BOOL: "true or false", STRING: "text", CATEGORY: "text"}


def _categories(name: str) -> tuple[str, ...] | None:
    return {"status": STATUSES, "role": ROLES}.get(name)


def _check(table: pd.DataFrame, origin: Path | str, lines: Sequence[int] | np.ndarray | None) -> None:
    def line_of(i: int) -> int | None:
        return int(lines[i]) if lines is not None else i + 1

    for col in COLUMNS:
        series = table[col.name]
        if col.required:
            bad = np.flatnonzero(series.isna().to_numpy())
            if bad.size:
                i = int(bad[0])
                raise DataError(origin, f"{col.name} is required but missing", line_of(i), col.name)
        if col.dtype == FLOAT:
            arr = series.to_numpy(dtype=float)
            bad = np.flatnonzero(np.isinf(arr) | (arr < 0 if col.non_negative else False))
            if bad.size:
                i = int(bad[0])
                what = "must be finite and non-negative" if col.non_negative else "must be finite"
                raise DataError(origin, f"{col.name} {what}", line_of(i), col.name, arr[i])
        elif col.non_negative and col.dtype == INT:
            neg = (series < 0).fillna(False).to_numpy(dtype=bool)
            bad = np.flatnonzero(neg)
            if bad.size:
                i = int(bad[0])
                raise DataError(origin, f"{col.name} must be non-negative", line_of(i), col.name,
                                series.iloc[i])


def describe_column(name: str) -> Column:
    """The definition of one canonical column."""
    return _BY_NAME[name]


def schema_markdown() -> str:
    """The column table of ``docs/canonical-schema.md`` (a test checks the doc contains it)."""
    lines = ["| column | dtype | required | meaning |", "|---|---|---|---|"]
    lines += [f"| `{c.name}` | {c.dtype} | {'yes' if c.required else ''} | {c.description} |" for c in COLUMNS]
    return "\n".join(lines) + "\n"
