"""The database state store on SQLite and on a real PostgreSQL, with a SYNTHETIC 3-machine cluster."""

from __future__ import annotations

import gc
import shutil
import sqlite3
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.snapshot import MILLI, ClusterSnapshot
from placement.online.policies import online_policy
from service.cycle import run_cycle
from service.store import (
    COMPLETED,
    EVICTED,
    RELEASED,
    Completion,
    End,
    Ended,
    Moved,
    Place,
    Placed,
    Reason,
    Refused,
    Replace,
    Replaced,
    Result,
    SqlStore,
    Store,
    Written,
    make_engine,
)
from service.store.codec import Json
from service.store.sqlite import WalCheckpoints

MACHINES = [Machine("a", "T4", 4, 32, 128), Machine("b", "T4", 4, 32, 128), Machine("c", "V100", 8, 64, 256)]
CLUSTER = build_cluster("synthetic", MACHINES, rack_size=2)
PLACE = online_policy("liquid")


def job(job_id: str, gpu: float = 1.0, instances: int = 1) -> Job:
    return Job(job_id, (Task(Role.WORKER, instances, gpu=gpu, cpu_cores=2.0, mem_gib=4.0),))


def store_at(url: str, cluster: Cluster = CLUSTER) -> SqlStore:
    return SqlStore(make_engine(url), lambda: cluster)


def place(store: Store, placing: Job) -> Result:
    """``placing`` placed by the liquid policy in one scheduling cycle."""
    return run_cycle(store, [Place(placing, PLACE)])[0]


def placed(store: Store, placing: Job) -> bool:
    return isinstance(place(store, placing), Placed)


def release(store: Store, job_id: str) -> bool:
    """Whether ``job_id`` was running and is now released."""
    return isinstance(run_cycle(store, [End(job_id)])[0], Ended)


def complete(store: Store, job_id: str, duration_s: float, usage: Json) -> bool:
    return isinstance(run_cycle(store, [End(job_id, Completion(duration_s, usage))])[0], Ended)


def test_commit_release_complete_and_reload(database_url: str) -> None:
    store = store_at(database_url)
    assert store.snapshot().generation == 0
    ok = placed(store, job("j1", gpu=2.0))
    assert ok and store.snapshot().generation == 1
    ok2 = placed(store, job("j2", gpu=0.5, instances=3))
    assert ok2 and store.snapshot().generation == 2
    before = store.snapshot()
    # a second store on the same database (a restarted or second process) rebuilds the same state
    again = store_at(database_url).snapshot()
    assert again.generation == 2 and set(again.allocations) == {"j1", "j2"}
    assert (again.gpu_milli_used == before.gpu_milli_used).all() and (again.cpu_used == before.cpu_used).all()
    assert release(store, "j1") and not release(store, "j1")  # idempotent
    assert complete(store, "j2", 120.0, {"gpu": 0.3}) and not complete(store, "j2", 1.0, {})
    after = store.snapshot()
    assert after.generation == 4 and int(after.gpu_milli_used.sum()) == 0 and not after.allocations
    row = store.job("j2")
    assert row is not None and row.state == COMPLETED and row.completion is not None
    assert row.completion["duration_s"] == 120.0 and row.completion["usage"] == {"gpu": 0.3}
    assert store.job("j1") is not None and store.job("j1").state == RELEASED  # type: ignore[union-attr]
    assert [r.job_id for r in store.completions()] == ["j2"]


def test_a_decision_on_an_old_generation_conflicts_and_writes_nothing(database_url: str) -> None:
    store = store_at(database_url)
    snapshot = store.snapshot()
    first, second = PLACE(snapshot, job("x", gpu=8.0)), PLACE(snapshot, job("y", gpu=8.0))
    assert first.allocation is not None and second.allocation is not None
    assert first.allocation.instances[0].gpus == second.allocation.instances[0].gpus  # both want machine c
    committed = store.write([Place(job("x", gpu=8.0), PLACE, decision=first)], decided_on=snapshot.generation)
    assert isinstance(committed, Written) and isinstance(committed.results[0], Placed)
    conflict = store.write([Place(job("y", gpu=8.0), PLACE, decision=second)], decided_on=snapshot.generation)
    assert isinstance(conflict, Moved) and conflict.snapshot.generation == 1  # the state to decide on again
    assert store.job("y") is None and store.snapshot().generation == 1


def test_job_ids_are_never_reused(database_url: str) -> None:
    store = store_at(database_url)
    place(store, job("same"))
    release(store, "same")
    again = place(store, job("same"))
    assert isinstance(again, Refused) and again.reason is Reason.EXISTS and "same" in again.detail


def test_new_cluster_refused_while_it_orphans_running_jobs_unless_forced(database_url: str) -> None:
    store = store_at(database_url)
    place(store, job("big", gpu=8.0))  # only machine c has 8 GPUs
    smaller = build_cluster("synthetic", MACHINES[:2], rack_size=2)
    refused = run_cycle(store, [Replace(smaller)])[0]
    assert isinstance(refused, Refused) and refused.reason is Reason.WOULD_ORPHAN and "big" in refused.detail
    assert store.snapshot().cluster.name == "synthetic" and len(store.snapshot().cluster) == 3  # unchanged
    forced = run_cycle(store, [Replace(smaller, force=True)])[0]
    assert isinstance(forced, Replaced) and forced.evicted == ("big",)
    assert store.job("big").state == EVICTED  # type: ignore[union-attr]
    assert len(store_at(database_url).snapshot().cluster) == 2  # the new spec is what a restart loads


def _check(snapshot: ClusterSnapshot) -> None:
    """Independent recount from the allocations: nothing over capacity."""
    gpu: dict[int, int] = defaultdict(int)
    cpu: dict[int, int] = defaultdict(int)
    for allocation in snapshot.allocations.values():
        for p in allocation.instances:
            cpu[p.machine] += p.cpu_milli
            for g in p.gpus:
                gpu[g] += p.gpu_milli
    assert all(v <= MILLI for v in gpu.values())
    layout = snapshot.layout
    assert all(v <= layout.cpu_cap[m] for m, v in cpu.items())


def test_two_processes_sharing_one_database_never_double_allocate(database_url: str) -> None:
    stores = [store_at(database_url), store_at(database_url)]  # as two service processes would
    committed: list[str] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        for n in range(6):
            if placed(stores[k % 2], job(f"w{k}-{n}", gpu=1.0)):
                with lock:
                    committed.append(f"w{k}-{n}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = store_at(database_url).snapshot()
    _check(final)
    assert sorted(final.allocations) == sorted(committed)
    assert len(committed) == 16  # 16 GPUs in all: every one taken, none twice


def _same_usage(one: ClusterSnapshot, other: ClusterSnapshot) -> None:
    assert one.generation == other.generation and set(one.allocations) == set(other.allocations)
    for name in ("gpu_milli_used", "gpu_mem_used", "cpu_used", "mem_used"):
        assert (getattr(one, name) == getattr(other, name)).all(), name


def test_a_process_catches_up_with_another_s_writes_without_reloading_everything(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = store_at(database_url), store_at(database_url)  # as two service processes would
    for name in ("a1", "a2", "a3"):
        place(first, job(name, gpu=0.5))

    def no_full_reload(*_: object) -> None:
        raise AssertionError("reloaded every running job instead of catching up")

    monkeypatch.setattr(second, "_load_in", no_full_reload)
    _same_usage(second.snapshot(), store_at(database_url).snapshot())
    assert release(second, "a1")  # decided on the caught-up state, written by the second process
    assert complete(first, "a2", 60.0, {}) and not release(first, "a1")  # the first sees the second's release
    place(first, job("a4", gpu=2.0))
    caught_up = second.snapshot()
    _same_usage(caught_up, store_at(database_url).snapshot())
    assert set(caught_up.allocations) == {"a3", "a4"}
    _check(caught_up)
    monkeypatch.undo()
    run_cycle(first, [Replace(build_cluster("synthetic", MACHINES[:2], rack_size=2), force=True)])  # a4 may go
    assert len(second.snapshot().cluster) == 2  # a new spec: reloaded in full
    _same_usage(second.snapshot(), store_at(database_url).snapshot())


def _jobs_in_the_database_file_alone(tmp_path: Path, database: Path) -> set[str]:
    """The job ids in ``database``'s main file, read from a copy without its write-ahead log."""
    alone = tmp_path / "main-file-only.db"
    shutil.copyfile(database, alone)
    with sqlite3.connect(alone) as conn:
        return {row[0] for row in conn.execute("SELECT job_id FROM jobs")}


def test_sqlite_commits_leave_the_log_to_a_background_checkpoint(tmp_path: Path) -> None:
    database = tmp_path / "state.db"
    store = SqlStore(make_engine(f"sqlite:///{database}"), lambda: CLUSTER)
    store.checkpoints.stop()  # no checkpoint at all: what was committed sits in the log only
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one() == 0
    for k in range(5):
        place(store, job(f"w{k}", gpu=0.5))
    assert not _jobs_in_the_database_file_alone(tmp_path, database) & {f"w{k}" for k in range(5)}
    running = WalCheckpoints(store.engine, every_s=0.05)  # the store's own, as it runs in the service
    deadline = time.monotonic() + 10
    while running.runs < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _jobs_in_the_database_file_alone(tmp_path, database) >= {f"w{k}" for k in range(5)}
    place(store, job("last", gpu=0.5))
    running.stop()  # stopping checkpoints what is left
    assert "last" in _jobs_in_the_database_file_alone(tmp_path, database)
    assert store_at(f"sqlite:///{database}").snapshot().allocations.keys() == {f"w{k}" for k in range(5)} | {"last"}


def test_a_store_dropped_without_closing_takes_its_checkpoint_thread_with_it(tmp_path: Path) -> None:
    store = SqlStore(make_engine(f"sqlite:///{tmp_path / 'state.db'}"), lambda: CLUSTER)
    checkpoints = store.checkpoints
    thread = checkpoints._thread
    assert thread is not None and thread.is_alive()
    del store
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()
