"""The scheduling cycle (decide, then group-commit) on SQLite and on a real PostgreSQL, with a SYNTHETIC
3-machine cluster (machines a and b with 4 GPUs, c with 8)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from placement.model.decision import Decision
from placement.model.demand import Job
from placement.model.snapshot import ClusterSnapshot
from service.cycle import MAX_MOVES, QUIET_CYCLES, Cycle, cycle
from service.store import RUNNING, End, Ended, MemoryStore, Op, Place, Placed, Reason, Refused, Result, Written
from tests.service.test_store import CLUSTER, PLACE, _check, job, store_at


@pytest.fixture(params=["on the loop", "in a thread"])
def on_loop(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "on the loop")


async def _all(cycle: Cycle, ops: list[Op]) -> list[Result]:
    """Every op asked in the same pass of the event loop, so that they queue together."""
    return list(await asyncio.gather(*(cycle.run(op) for op in ops)))


def _independently_checked(url: str) -> ClusterSnapshot:
    """The state as a fresh store rebuilds it from the database, recounted: nothing over capacity."""
    fresh = store_at(url).snapshot()
    _check(fresh)
    return fresh


def test_placements_of_one_batch_see_each_other_and_are_stored_together(database_url: str, on_loop: bool) -> None:
    store = store_at(database_url)
    cycle = Cycle(store, on_loop=on_loop)
    # in a thread, the first cycle waits for the lock to write while the other requests queue behind it;
    # on the loop, all five are asked in one pass of the loop anyway
    store._lock.acquire()

    async def scenario() -> list[Result]:
        tasks = [asyncio.ensure_future(cycle.run(Place(job(f"g{k}", gpu=4.0), PLACE))) for k in range(5)]
        await asyncio.sleep(0.2)
        store._lock.release()
        return list(await asyncio.gather(*tasks))

    results = asyncio.run(scenario())
    cycle.stop()
    # 16 GPUs in all: four 4-GPU jobs fit (a, b, and c twice), the fifth does not
    assert all(isinstance(r, Placed) for r in results[:4])
    assert isinstance(results[4], Refused) and results[4].reason is Reason.DOES_NOT_FIT
    assert results[4].decision is not None and not results[4].decision.placed
    assert cycle.ops == 5 and cycle.batches <= 2
    fresh = _independently_checked(database_url)
    assert set(fresh.allocations) == {"g0", "g1", "g2", "g3"}
    assert fresh.generation == store.cached().generation
    assert (fresh.gpu_milli_used == store.cached().gpu_milli_used).all()
    machines = sorted(fresh.cluster.machines[p.machine].name for a in fresh.allocations.values() for p in a.instances)
    assert machines == ["a", "b", "c", "c"]


def test_a_release_earlier_in_the_batch_frees_room_for_a_later_placement(database_url: str, on_loop: bool) -> None:
    store = store_at(database_url)
    cycle = Cycle(store, on_loop=on_loop)
    first = asyncio.run(_all(cycle, [Place(job("big", gpu=8.0), PLACE)]))
    assert isinstance(first[0], Placed)
    big_again = Place(job("big2", gpu=8.0), PLACE)
    results = asyncio.run(_all(cycle, [Place(job("too-big", gpu=8.0), PLACE), End("big"), big_again]))
    cycle.stop()
    assert isinstance(results[0], Refused) and results[0].reason is Reason.DOES_NOT_FIT  # c was still full
    assert isinstance(results[1], Ended)
    assert isinstance(results[2], Placed)
    row = store.job("big")
    assert row is not None and row.state == "released"
    assert set(_independently_checked(database_url).allocations) == {"big2"}


def test_an_op_that_fails_fails_alone(database_url: str, on_loop: bool) -> None:
    store = store_at(database_url)
    cycle = Cycle(store, on_loop=on_loop)

    def broken(snapshot: ClusterSnapshot, j: Job) -> Decision:
        raise ValueError(f"no decision for {j.job_id}")

    unstorable: dict[str, Any] = {"records": [object()]}  # cannot be written as JSON
    ops: list[Op] = [Place(job("ok1"), PLACE), Place(job("ok1"), PLACE), Place(job("bug"), broken),
                                  Place(job("bad-details"), PLACE, unstorable), End("never-placed"),
                                  Place(job("ok2"), PLACE)]

    async def scenario() -> list[BaseException | Result]:
        return list(await asyncio.gather(*(cycle.run(op) for op in ops), return_exceptions=True))

    results = asyncio.run(scenario())
    cycle.stop()
    assert isinstance(results[0], Placed)
    assert isinstance(results[1], Refused) and results[1].reason is Reason.EXISTS  # the same id, in the same batch
    assert isinstance(results[2], ValueError) and "bug" in str(results[2])
    assert isinstance(results[3], ValueError) and "object" in str(results[3])
    assert isinstance(results[4], Refused) and results[4].reason is Reason.NOT_RUNNING
    assert isinstance(results[5], Placed)
    fresh = _independently_checked(database_url)
    assert set(fresh.allocations) == {"ok1", "ok2"}
    assert store.job("bad-details") is None and store.job("bug") is None
    for job_id in ("ok1", "ok2"):
        row = store.job(job_id)
        assert row is not None and row.state == RUNNING


def test_what_the_cycle_stores_is_what_the_database_holds(database_url: str, on_loop: bool) -> None:
    """Many placements and releases interleaved: the cycle's snapshot equals the database's, and no
    machine is over its capacity."""
    store = store_at(database_url)
    cycle = Cycle(store, on_loop=on_loop)

    async def scenario() -> None:
        for wave in range(6):
            ops: list[Op] = [Place(job(f"w{wave}-{k}", gpu=[0.5, 1.0, 2.0][k % 3]), PLACE)
                                          for k in range(8)]
            if wave:
                ops += [End(f"w{wave - 1}-{k}") for k in range(0, 8, 2)]
            await _all(cycle, ops)

    asyncio.run(scenario())
    cycle.stop()
    assert (cycle._thread is None) is on_loop  # on the loop: no thread at all
    fresh = _independently_checked(database_url)
    mine = store.cached()
    assert fresh.generation == mine.generation and set(fresh.allocations) == set(mine.allocations)
    assert (fresh.gpu_milli_used == mine.gpu_milli_used).all() and (fresh.cpu_used == mine.cpu_used).all()
    for job_id in fresh.allocations:
        row = store.job(job_id)
        assert row is not None and row.state == RUNNING
    released = [f"w{wave}-{k}" for wave in range(5) for k in range(0, 8, 2)]
    assert not set(released) & set(fresh.allocations)


def _refuse_job_rows(store: Any, job_id: str) -> None:
    """A trigger that makes the database itself refuse to store ``job_id`` (a real database error)."""
    with store.engine.begin() as conn:
        if store.engine.dialect.name == "sqlite":
            conn.exec_driver_sql(f"CREATE TRIGGER refuse BEFORE INSERT ON jobs WHEN NEW.job_id = '{job_id}' "
                                 "BEGIN SELECT RAISE(ABORT, 'refused by the database'); END")
        else:
            conn.exec_driver_sql(f"CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN IF NEW.job_id = '{job_id}' "
                                 "THEN RAISE EXCEPTION 'refused by the database'; END IF; RETURN NEW; END $$ "
                                 "LANGUAGE plpgsql")
            conn.exec_driver_sql("CREATE TRIGGER refuse BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION refuse()")


def test_a_database_error_stores_nothing_of_the_batch_and_then_fails_its_op_alone(database_url: str,
                                                                                  on_loop: bool) -> None:
    store = store_at(database_url)
    first = store.write([Place(job("before"), PLACE)])
    assert isinstance(first, Written) and isinstance(first.results[0], Placed)
    _refuse_job_rows(store, "poison")
    generation = store.cached().generation
    with pytest.raises(Exception, match="refused by the database"):
        store.write([Place(job("fine"), PLACE), End("before"), Place(job("poison"), PLACE)])
    assert store.cached().generation == generation  # the store's state is the committed one
    unchanged = _independently_checked(database_url)
    assert set(unchanged.allocations) == {"before"} and unchanged.generation == generation
    assert store.job("fine") is None and store.job("before").state == RUNNING  # type: ignore[union-attr]
    cycle = Cycle(store, on_loop=on_loop)  # the cycle then writes that batch's ops one by one
    ops: list[Op] = [Place(job("fine"), PLACE), End("before"), Place(job("poison"), PLACE)]

    async def scenario() -> list[BaseException | Result]:
        return list(await asyncio.gather(*(cycle.run(op) for op in ops), return_exceptions=True))

    results = asyncio.run(scenario())
    cycle.stop()
    assert isinstance(results[0], Placed) and isinstance(results[1], Ended)
    assert isinstance(results[2], Exception) and "refused by the database" in str(results[2])
    after = _independently_checked(database_url)
    assert set(after.allocations) == {"fine"} and after.generation == store.cached().generation


class Contended:
    """A store another process writes to between every decision and the first ``busy`` writes of it (or
    the writes ``busy`` counts, from 1)."""

    def __init__(self, store: Any, busy: int | set[int]) -> None:
        self.store, self.writes = store, 0
        self.busy = set(range(1, busy + 1)) if isinstance(busy, int) else busy
        self.fast_commits = store.fast_commits
        self.ahead: list[bool] = []
        """Per write, whether it was given decisions made ahead."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def write(self, ops: list[Op], decided_on: int | None = None, comes_to: ClusterSnapshot | None = None) -> Any:
        self.writes += 1
        self.ahead.append(decided_on is not None)
        if self.writes in self.busy:  # another process got there first
            self.store.write([Place(job(f"other-{self.writes}", gpu=0.5), PLACE)])
        return self.store.write(ops, decided_on, comes_to)


@pytest.mark.parametrize("busy", [1, 5])
def test_a_cycle_decides_again_when_another_process_moved_the_state(database_url: str, busy: int) -> None:
    """Decided on a state another process then changed: decided again on the state as committed, and
    after a few retries decided in the transaction itself; either way on the state it is written to."""
    store = store_at(database_url)
    contended = Contended(store_at(database_url), busy)  # the same database, as a second process
    decided_on: list[int] = []

    def recording(snapshot: ClusterSnapshot, j: Job) -> Decision:
        decided_on.append(snapshot.generation)
        return PLACE(snapshot, j)

    turn = cycle(contended, [[Place(job("mine", gpu=8.0), recording)], [End("nothing")]])
    outcomes, moves = turn.outcomes, turn.moves
    assert moves == min(busy, MAX_MOVES + 1) and contended.writes == moves + 1 and turn.crowded
    others = min(busy, contended.writes)  # each moved the generation by one
    assert isinstance(outcomes[0], list) and isinstance(outcomes[0][0], Placed)
    assert isinstance(outcomes[1], list) and isinstance(outcomes[1][0], Refused)
    assert len(decided_on) == moves + 1 and decided_on[-1] == others  # the last, on the state written
    fresh = _independently_checked(database_url)
    assert set(fresh.allocations) == {"mine"} | {f"other-{k}" for k in range(1, others + 1)}
    assert store.snapshot().generation == fresh.generation


def test_the_policy_runs_outside_the_store_s_transaction(database_url: str, on_loop: bool) -> None:
    store = store_at(database_url)
    free: list[bool] = []

    def watching(snapshot: ClusterSnapshot, j: Job) -> Decision:
        probe = threading.Thread(target=lambda: free.append(_take_and_give_back(store._lock)))
        probe.start()
        probe.join()
        return PLACE(snapshot, j)

    cycle_ = Cycle(store, on_loop=on_loop)
    results = asyncio.run(_all(cycle_, [Place(job(f"o{k}"), watching) for k in range(3)]))
    cycle_.stop()
    assert all(isinstance(r, Placed) for r in results) and free == [True] * 3


def _take_and_give_back(lock: Any) -> bool:
    if not lock.acquire(blocking=False):
        return False
    lock.release()
    return True


def test_a_group_is_written_whole_in_one_transaction(database_url: str, on_loop: bool) -> None:
    store = store_at(database_url)
    cycle_ = Cycle(store, on_loop=on_loop)

    async def scenario() -> tuple[list[Result], list[Result]]:
        group = cycle_.run_all([Place(job(f"batch-{k}", gpu=4.0), PLACE) for k in range(3)])
        alone = cycle_.run_all([Place(job("single", gpu=4.0), PLACE), Place(job("too-many", gpu=4.0), PLACE)])
        return await asyncio.gather(group, alone)

    grouped, alone = asyncio.run(scenario())
    cycle_.stop()
    assert all(isinstance(r, Placed) for r in grouped) and isinstance(alone[0], Placed)
    assert isinstance(alone[1], Refused) and alone[1].reason is Reason.DOES_NOT_FIT
    assert cycle_.batches == 1 and len(_independently_checked(database_url).allocations) == 4


def test_while_another_process_writes_as_busily_the_write_decides(on_loop: bool) -> None:
    contended = Contended(MemoryStore(CLUSTER), busy={1, 3})  # the other process writes before these writes
    cycle_ = Cycle(contended, on_loop=on_loop)
    quiet = []
    for k in range(QUIET_CYCLES + 3):
        result = asyncio.run(cycle_.run(Place(job(f"mine-{k}", gpu=0.5), PLACE)))
        assert isinstance(result, Placed)
        quiet.append(cycle_.quiet)
    cycle_.stop()
    # decided ahead, moved, decided again; then in the write, which met the other's second write; then in
    # the write, which met nobody else's, until enough cycles in a row had not; then ahead again
    assert contended.ahead == [True, True, False] + [False] * QUIET_CYCLES + [True] and cycle_.moves == 1
    assert quiet == [0, 0, *range(1, QUIET_CYCLES + 2)]
