"""The catalogue of trace sources: name -> adapter, shipped file and attribution."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pandas as pd

from placement.model.cluster_io import data_dir
from training.ingest.adapters import dlrm, openb, pai_full, pai_jobs, philly
from training.ingest.errors import DataError
from training.kept import add_files, kept

KEPT_TABLES = 4
"""Tables kept in a cache folder (the traces a user replays)."""
_CODE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Source:
    """A trace format gpuplace can read, and where its shipped copy lives (if it ships)."""

    name: str
    description: str
    loader: Callable[[Path], pd.DataFrame]
    shipped: str | None
    attribution: str

    def default_path(self) -> Path | None:
        return data_dir() / self.shipped if self.shipped else None

    def load(self, path: Path | None = None, cache: Path | None = None) -> pd.DataFrame:
        """Load ``path`` (or the shipped copy) into the canonical table. ``cache``: where a table loaded from one
        file is kept as Parquet (which gives the same frame back) for the next run to read instead, named by a
        digest of the file's bytes and of the code that reads it (``training.kept``); parsing and checking the
        68,727 rows of the shipped PAI table takes three times as long as reading them back."""
        target = path if path is not None else self.default_path()
        if target is None:
            raise DataError(f"<{self.name}>", "this source is not shipped; give the path of its files")
        if cache is None or not target.is_file():
            return self.loader(target)
        return kept(cache / f"table-{self._digest(target)}.parquet", lambda: self.loader(target), pd.read_parquet,
                    lambda table, aside: table.to_parquet(aside), KEPT_TABLES)

    def _digest(self, target: Path) -> str:
        """The source's name, ``target``'s bytes and the source of ``training/ingest``, as 24 hex digits."""
        h = hashlib.sha256(self.name.encode())
        h.update(target.read_bytes())
        add_files(h, _CODE.rglob("*.py"), _CODE)
        return h.hexdigest()[:24]


def _pai_full(path: Path) -> pd.DataFrame:
    return pai_full.load(path, header_dir=data_dir() / "pai2020")


PAI = "Alibaba clusterdata cluster-trace-gpu-v2020, CC BY 4.0 (Weng et al., NSDI'22)"
OPENB = "Alibaba clusterdata cluster-trace-gpu-v2023 (Weng et al., ATC'23)"
SOURCES: MappingProxyType[str, Source] = MappingProxyType({s.name: s for s in (
    Source("pai2020-jobs", "PAI v2020 job table of the trace's simulator (first 68,727 rows, 8.4 days)",
           pai_jobs.load, "pai2020/pai_job_duration_estimate_100K_head.csv", PAI),
    Source("pai2020", "full PAI v2020 trace: job, task, instance, sensor, group-tag tables (folder)",
           _pai_full, None, PAI),
    Source("openb2023", "openb GPU-sharing cluster pods, default workload", openb.load,
           "openb2023/openb_pod_list_default.csv", OPENB),
    Source("openb2023-gpushare20", "openb pods, published variant with more GPU sharing", openb.load,
           "openb2023/openb_pod_list_gpushare20.csv", OPENB),
    Source("philly", "Microsoft Philly jobs, Sept-Dec 2017", philly.load, "philly/philly.csv",
           "Philly trace, CC BY 4.0 (Jeon et al., ATC'19), as packaged by the Pollux artifact (Apache-2.0)"),
    Source("dlrm2025", "Alibaba disaggregated DLRM serving instances, with RDMA bandwidth", dlrm.load,
           "dlrm2025/disaggregated_DLRM_trace.csv",
           "Alibaba clusterdata cluster-trace-gpu-v2025 (Yang et al., NSDI'25)"),
)})


def get_source(name: str) -> Source:
    """The source called ``name``; ``KeyError`` with the known names otherwise."""
    try:
        return SOURCES[name]
    except KeyError:
        raise KeyError(f"unknown source {name!r}; known: {', '.join(SOURCES)}") from None
