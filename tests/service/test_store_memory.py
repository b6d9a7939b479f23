"""The in-memory store against the database's: the same ops come to the same results, states and job
rows; and what a write does with decisions made on a state it does not meet, on every store."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from placement import ClusterSnapshot, Job, Machine, OnlinePolicy, Role, Task, build_cluster, online_policy
from service.cycle import decide, run_cycle
from service.store import (
    Completion,
    End,
    Ended,
    JobRow,
    MemoryStore,
    Moved,
    Op,
    Place,
    Placed,
    Reason,
    Refused,
    Replace,
    Result,
    Store,
    Written,
)
from tests.service.test_store import CLUSTER, MACHINES, PLACE, _check, job, place, release, store_at


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "memory":
        return MemoryStore(CLUSTER)
    if request.param == "sqlite":
        return store_at(f"sqlite:///{tmp_path / 'state.db'}")
    return store_at(request.getfixturevalue("postgres_url"))


def _random_cycles(seed: int, policy: OnlinePolicy = PLACE) -> list[list[Op]]:
    """Cycles of placements by ``policy`` (some of ids already taken), releases, completions and, now and then, a
    cluster spec loaded with force."""
    rng, cycles, ids = random.Random(seed), [], list[str]()
    for n in range(40):
        ops: list[Op] = []
        for k in range(rng.randint(1, 6)):
            roll = rng.random()
            if roll < 0.5 or not ids:
                ids.append(f"j{n}-{k}")
                placing = job(ids[-1], gpu=rng.choice([0.5, 1.0, 2.0, 4.0]), instances=rng.randint(1, 2))
                ops.append(Place(placing, policy, {"n": n}))
            elif roll < 0.6:
                ops.append(Place(job(rng.choice(ids)), policy))
            elif roll < 0.8:
                ops.append(End(rng.choice(ids)))
            else:
                ops.append(End(rng.choice(ids), Completion(float(n), {"gpu": 0.5})))
        if n % 13 == 12:
            ops.append(Replace(build_cluster("synthetic", MACHINES[n % 2:], rack_size=2), force=True))
        cycles.append(ops)
    return cycles


def _shape(result: Result) -> tuple[object, ...]:
    if isinstance(result, Placed):
        return "placed", result.decision.allocation
    if isinstance(result, Refused):
        return "refused", result.reason, result.decision.verdict if result.decision else None
    return type(result).__name__, *vars(result).values()


def test_the_memory_store_comes_to_what_the_database_does(tmp_path: Path) -> None:
    memory, database = MemoryStore(CLUSTER), store_at(f"sqlite:///{tmp_path / 'state.db'}")
    # one learning policy per store, each asked about the same jobs in the same order: one object shared would be
    # asked about a whole cycle's jobs for one store before the other, and its mix of recent shapes could move
    # in between (whether it does depends on all it was asked before, in other tests, some from several threads)
    cycles = zip(_random_cycles(7, online_policy("liquid")), _random_cycles(7, online_policy("liquid")), strict=True)
    for ops, same in cycles:
        assert [_shape(r) for r in run_cycle(memory, ops)] == [_shape(r) for r in run_cycle(database, same)]
        one, other = memory.snapshot(), database.snapshot()
        assert one.generation == other.generation and set(one.allocations) == set(other.allocations)
        assert (one.gpu_milli_used == other.gpu_milli_used).all() and (one.cpu_used == other.cpu_used).all()
        _check(one)
    reloaded = store_at(f"sqlite:///{tmp_path / 'state.db'}").snapshot()  # the state as the rows say it is
    assert reloaded.generation == database.cached().generation and set(reloaded.allocations) == set(
        database.cached().allocations)
    assert (reloaded.gpu_milli_used == database.cached().gpu_milli_used).all()
    assert (reloaded.mem_used == memory.cached().mem_used).all()
    assert [r.job_id for r in memory.completions()] == [r.job_id for r in database.completions()]
    placed = {op.job.job_id for ops in _random_cycles(seed=7) for op in ops if isinstance(op, Place)}
    assert [_stored(memory.job(j)) for j in sorted(placed)] == [_stored(database.job(j)) for j in sorted(placed)]


def _stored(row: JobRow | None) -> tuple[object, ...] | None:
    """What a job row holds, but for the times it was written at."""
    if row is None:
        return None
    completion = {k: v for k, v in (row.completion or {}).items() if k != "completed_at"}
    return row.state, row.policy, row.allocation, row.demand, row.details, row.placed_generation, completion


def test_a_decision_made_on_a_state_the_write_does_not_meet_is_made_again(store: Store) -> None:
    """A job id that ended long ago is not in the snapshot, so the cycle decided it as placed; the write
    refuses it, and the placement after it, decided on a state that held it, is decided again."""
    assert isinstance(place(store, job("gone", gpu=8.0)), Placed) and release(store, "gone")  # machine c
    snapshot = store.snapshot()
    decided, ahead = decide(snapshot, [[Place(job("gone", gpu=8.0), PLACE), Place(job("next", gpu=8.0), PLACE)]])
    ops = decided[0]
    assert ahead is not None and set(ahead.allocations) == {"gone"}  # as the cycle expected it to come out
    assert isinstance(ops, list) and all(isinstance(op, Place) and op.decision for op in ops)
    assert isinstance(ops[1], Place) and ops[1].decision is not None and not ops[1].decision.placed  # c was taken
    written = store.write(ops, decided_on=snapshot.generation, comes_to=ahead)
    assert isinstance(written, Written)
    gone, after = written.results
    assert isinstance(gone, Refused) and gone.reason is Reason.EXISTS
    assert isinstance(after, Placed) and after.decision.allocation == PLACE(snapshot, job("next", gpu=8.0)).allocation
    assert set(written.snapshot.allocations) == set(store.cached().allocations) == {"next"}
    _check(store.snapshot())


def test_a_write_without_a_generation_decides_every_placement_itself(store: Store) -> None:
    snapshot: ClusterSnapshot = store.snapshot()
    stale = PLACE(snapshot, job("first", gpu=8.0))
    place(store, job("meanwhile", gpu=8.0))  # takes machine c, which the stale decision wanted
    written = store.write([Place(job("first", gpu=8.0), PLACE, decision=stale)])
    assert isinstance(written.results[0], Refused) and written.results[0].reason is Reason.DOES_NOT_FIT
    assert set(store.snapshot().allocations) == {"meanwhile"}


def _t4_store() -> MemoryStore:
    machines = [Machine(f"m{i}", "T4", 4, 32, 128) for i in range(6)]  # 24 GPUs in all
    return MemoryStore(build_cluster("synthetic", machines, rack_size=2))


def test_a_decision_made_on_a_stale_snapshot_is_not_written() -> None:
    s, policy = _t4_store(), online_policy("first-fit")
    snapshot = s.snapshot()
    first, second = (Job(n, (Task(Role.WORKER, 1, gpu=4),)) for n in ("a", "b"))
    one, other = policy(snapshot, first), policy(snapshot, second)  # same snapshot: same machine
    assert one.allocation is not None and other.allocation is not None
    assert one.allocation.instances[0].machine == other.allocation.instances[0].machine
    assert isinstance(s.write([Place(first, policy, decision=one)], decided_on=snapshot.generation), Written)
    moved = s.write([Place(second, policy, decision=other)], decided_on=snapshot.generation)
    assert isinstance(moved, Moved) and set(moved.snapshot.allocations) == {"a"}
    assert set(s.snapshot().allocations) == {"a"}


def test_cycles_from_many_threads_never_double_allocate() -> None:
    # 40 jobs of 1 GPU from 8 threads on 24 GPUs: exactly 24 are placed, the rest refused as full
    s, policy = _t4_store(), online_policy("liquid")
    jobs = [Job(f"j{i}", (Task(Role.WORKER, 1, gpu=1, cpu_cores=1),)) for i in range(40)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda j: run_cycle(s, [Place(j, policy)])[0], jobs))
    placed = {r.decision.job_id for r in results if isinstance(r, Placed)}
    assert len(placed) == 24 == len(s.snapshot().allocations)
    assert set(s.snapshot().allocations) == placed
    assert s.snapshot().gpu_milli_used.max() == 1000 and int(s.snapshot().gpu_milli_used.sum()) == 24_000


def test_release_is_idempotent_and_exact() -> None:
    s = _t4_store()
    before = s.snapshot()
    result = run_cycle(s, [Place(Job("a", (Task(Role.WORKER, 2, gpu=0.5, cpu_cores=3),)), online_policy("liquid"))])
    assert isinstance(result[0], Placed) and result[0].decision.placed
    assert isinstance(run_cycle(s, [End("a")])[0], Ended)
    assert isinstance(run_cycle(s, [End("a")])[0], Refused)  # nothing left to end: nothing changes
    np.testing.assert_array_equal(s.snapshot().gpu_milli_used, before.gpu_milli_used)
    np.testing.assert_array_equal(s.snapshot().cpu_used, before.cpu_used)
