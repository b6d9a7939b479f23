"""Adapter for Alibaba's disaggregated DLRM serving trace (v2025, NSDI'25).

One row is one serving instance of an app: ``role`` CN (CPU node) or HN (GPU node). Units: CPU in
vCPUs, memory and disk in GiB, GPUs as a count. ``rdma_request`` is a percentage of one RDMA NIC's
bandwidth; the trace does not publish the NIC's speed, so gpuplace converts with
``RNIC_GBPS`` = 100 Gbit/s (an assumption: ``req_net_gbps`` / 100 is the published share).
``max_instance_per_node`` = -1 means no limit. Times are seconds from the trace start; a missing
``creation_time`` means created before the trace, a missing ``deletion_time`` still running at its end
(``censored``). Duration is deletion - scheduling, known only when both are.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from training.ingest.readers import check_vocabulary, line_numbers, numeric, read_text_csv
from training.ingest.schema import conform

COLUMNS = ("instance_sn", "role", "app_name", "cpu_request", "cpu_limit", "gpu_request", "gpu_limit",
           "rdma_request", "rdma_limit", "memory_request", "memory_limit", "disk_request", "disk_limit",
           "max_instance_per_node", "creation_time", "scheduled_time", "deletion_time")
RNIC_GBPS = 100.0
"""Assumed bandwidth of one RDMA NIC, Gbit/s (not published by the trace)."""


def load(path: Path) -> pd.DataFrame:
    """Read the DLRM instance list at ``path`` into the canonical table."""
    raw = read_text_csv(path, COLUMNS)
    check_vocabulary(raw, "role", path, ("CN", "HN"))
    req = {c: numeric(raw, c, path, allow_missing=False, non_negative=True)
           for c in ("cpu_request", "gpu_request", "rdma_request", "memory_request", "disk_request")}
    per_node = numeric(raw, "max_instance_per_node", path, allow_missing=False)
    times = {c: numeric(raw, c, path, non_negative=True)
             for c in ("creation_time", "scheduled_time", "deletion_time")}
    still_running = times["deletion_time"].isna()
    table = pd.DataFrame({
        "source": "dlrm2025",
        "job_id": raw["instance_sn"],
        "task_id": raw["role"],
        "role": "serving",
        "instances": 1,
        "submit_time_s": times["creation_time"],
        "start_time_s": times["scheduled_time"],
        "end_time_s": times["deletion_time"],
        "duration_s": times["deletion_time"] - times["scheduled_time"],
        "status": still_running.map({True: "running", False: "ended"}),
        "censored": still_running,
        "app": raw["app_name"],
        "req_gpu": req["gpu_request"],
        "req_cpu_cores": req["cpu_request"],
        "req_mem_gib": req["memory_request"],
        "req_disk_gib": req["disk_request"],
        "req_net_gbps": req["rdma_request"] / 100.0 * RNIC_GBPS,
        "max_instances_per_node": per_node.where(per_node >= 0).astype("Int64"),
    })
    return conform(table, path, line_numbers(raw))
