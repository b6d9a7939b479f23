"""Summaries of a canonical job table: size, time span, missing shares, status mix."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from training.ingest.schema import COLUMN_NAMES


@dataclass(frozen=True)
class TableSummary:
    rows: int
    jobs: int
    first_submit_s: float | None
    last_submit_s: float | None
    missing_share: dict[str, float]
    status_counts: dict[str, int]

    @property
    def span_s(self) -> float | None:
        if self.first_submit_s is None or self.last_submit_s is None:
            return None
        return self.last_submit_s - self.first_submit_s

    def as_dict(self) -> dict[str, object]:
        return {"rows": self.rows, "jobs": self.jobs, "first_submit_s": self.first_submit_s,
                "last_submit_s": self.last_submit_s, "span_s": self.span_s,
                "missing_share": self.missing_share, "status_counts": self.status_counts}


def summarise(table: pd.DataFrame) -> TableSummary:
    """Describe a canonical table (every column's share of missing values, in schema order)."""
    submit = table["submit_time_s"].dropna()
    n = len(table)
    missing = {c: (float(table[c].isna().sum()) / n if n else 0.0) for c in COLUMN_NAMES}
    statuses = {str(k): int(v) for k, v in table["status"].value_counts().items() if v}
    return TableSummary(
        rows=n,
        jobs=int(table["job_id"].nunique()),
        first_submit_s=float(submit.min()) if len(submit) else None,
        last_submit_s=float(submit.max()) if len(submit) else None,
        missing_share=missing,
        status_counts=statuses,
    )


def human_duration(seconds: float | None) -> str:
    """``1036800`` -> ``'12.0 days'``; short spans in hours or minutes."""
    if seconds is None:
        return "-"
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
