"""The group-committing writer on SQLite and on a real PostgreSQL, with a SYNTHETIC 3-machine cluster
(machines a and b with 4 GPUs, c with 8)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from placement.decision import Decision
from placement.demand import Job
from placement.snapshot import ClusterSnapshot
from service.state_db import RUNNING, EndOp, JobExists, OpResult, Placed, PlaceOp
from service.writer import Writer
from tests.service.test_state_db import PLACE, _check, job, store_at


@pytest.fixture(params=["on the loop", "in a thread"])
def on_loop(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "on the loop")


async def _all(writer: Writer, ops: list[PlaceOp | EndOp]) -> list[OpResult]:
    """Every op asked in the same pass of the event loop, so that they queue together."""
    return list(await asyncio.gather(*(writer.run(op) for op in ops)))


def _independently_checked(url: str) -> ClusterSnapshot:
    """The state as a fresh store rebuilds it from the database, recounted: nothing over capacity."""
    fresh = store_at(url).snapshot()
    _check(fresh)
    return fresh


def test_placements_of_one_batch_see_each_other_and_are_stored_together(database_url: str, on_loop: bool) -> None:
    store = store_at(database_url)
    writer = Writer(store, on_loop=on_loop)
    # in a thread, the writer's first batch waits for the lock while the other requests queue behind it;
    # on the loop, all five are asked in one pass of the loop anyway
    store._lock.acquire()

    async def scenario() -> list[OpResult]:
        tasks = [asyncio.ensure_future(writer.run(PlaceOp(job(f"g{k}", gpu=4.0), PLACE))) for k in range(5)]
        await asyncio.sleep(0.2)
        store._lock.release()
        return list(await asyncio.gather(*tasks))

    results = asyncio.run(scenario())
    writer.stop()
    placed = [r for r in results if isinstance(r, Placed)]
    assert len(placed) == 5
    # 16 GPUs in all: four 4-GPU jobs fit (a, b, and c twice), the fifth does not
    assert sum(p.committed for p in placed) == 4 and not placed[4].committed
    assert writer.ops == 5 and writer.batches <= 2
    fresh = _independently_checked(database_url)
    assert set(fresh.allocations) == {"g0", "g1", "g2", "g3"}
    assert fresh.generation == store.cached().generation
    assert (fresh.gpu_milli_used == store.cached().gpu_milli_used).all()
    machines = sorted(fresh.cluster.machines[p.machine].name for a in fresh.allocations.values() for p in a.instances)
    assert machines == ["a", "b", "c", "c"]


def test_a_release_earlier_in_the_batch_frees_room_for_a_later_placement(database_url: str, on_loop: bool) -> None:
    store = store_at(database_url)
    writer = Writer(store, on_loop=on_loop)
    first = asyncio.run(_all(writer, [PlaceOp(job("big", gpu=8.0), PLACE)]))
    assert isinstance(first[0], Placed) and first[0].committed
    big_again = PlaceOp(job("big2", gpu=8.0), PLACE)
    results = asyncio.run(_all(writer, [PlaceOp(job("too-big", gpu=8.0), PLACE), EndOp("big"), big_again]))
    writer.stop()
    assert isinstance(results[0], Placed) and not results[0].committed  # c was still full
    assert results[1] is True
    assert isinstance(results[2], Placed) and results[2].committed
    row = store.job("big")
    assert row is not None and row.state == "released"
    assert set(_independently_checked(database_url).allocations) == {"big2"}


def test_an_op_that_fails_fails_alone(database_url: str, on_loop: bool) -> None:
    store = store_at(database_url)
    writer = Writer(store, on_loop=on_loop)

    def broken(snapshot: ClusterSnapshot, j: Job) -> Decision:
        raise ValueError(f"no decision for {j.job_id}")

    unstorable: dict[str, Any] = {"records": [object()]}  # cannot be written as JSON
    ops: list[PlaceOp | EndOp] = [PlaceOp(job("ok1"), PLACE), PlaceOp(job("ok1"), PLACE), PlaceOp(job("bug"), broken),
                                  PlaceOp(job("bad-details"), PLACE, unstorable), EndOp("never-placed"),
                                  PlaceOp(job("ok2"), PLACE)]

    async def scenario() -> list[BaseException | OpResult]:
        return list(await asyncio.gather(*(writer.run(op) for op in ops), return_exceptions=True))

    results = asyncio.run(scenario())
    writer.stop()
    assert isinstance(results[0], Placed) and results[0].committed
    assert isinstance(results[1], JobExists)  # the same id again, in the same batch
    assert isinstance(results[2], ValueError) and "bug" in str(results[2])
    assert isinstance(results[3], ValueError) and "object" in str(results[3])
    assert results[4] is False
    assert isinstance(results[5], Placed) and results[5].committed
    fresh = _independently_checked(database_url)
    assert set(fresh.allocations) == {"ok1", "ok2"}
    assert store.job("bad-details") is None and store.job("bug") is None
    for job_id in ("ok1", "ok2"):
        row = store.job(job_id)
        assert row is not None and row.state == RUNNING


def test_what_the_writer_stores_is_what_the_database_holds(database_url: str, on_loop: bool) -> None:
    """Many placements and releases interleaved: the writer's snapshot equals the database's, and no
    machine is over its capacity."""
    store = store_at(database_url)
    writer = Writer(store, on_loop=on_loop)

    async def scenario() -> None:
        for wave in range(6):
            ops: list[PlaceOp | EndOp] = [PlaceOp(job(f"w{wave}-{k}", gpu=[0.5, 1.0, 2.0][k % 3]), PLACE)
                                          for k in range(8)]
            if wave:
                ops += [EndOp(f"w{wave - 1}-{k}") for k in range(0, 8, 2)]
            await _all(writer, ops)

    asyncio.run(scenario())
    writer.stop()
    assert (writer._thread is None) is on_loop  # on the loop: no writer thread at all
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
    first = store.apply_ops([PlaceOp(job("before"), PLACE)])
    assert isinstance(first[0], Placed) and first[0].committed
    _refuse_job_rows(store, "poison")
    generation = store.cached().generation
    with pytest.raises(Exception, match="refused by the database"):
        store.apply_ops([PlaceOp(job("fine"), PLACE), EndOp("before"), PlaceOp(job("poison"), PLACE)])
    assert store.cached().generation == generation  # the store's state is the committed one
    unchanged = _independently_checked(database_url)
    assert set(unchanged.allocations) == {"before"} and unchanged.generation == generation
    assert store.job("fine") is None and store.job("before").state == RUNNING  # type: ignore[union-attr]
    writer = Writer(store, on_loop=on_loop)  # the writer then runs that batch's ops one by one
    ops: list[PlaceOp | EndOp] = [PlaceOp(job("fine"), PLACE), EndOp("before"), PlaceOp(job("poison"), PLACE)]

    async def scenario() -> list[BaseException | OpResult]:
        return list(await asyncio.gather(*(writer.run(op) for op in ops), return_exceptions=True))

    results = asyncio.run(scenario())
    writer.stop()
    assert isinstance(results[0], Placed) and results[0].committed and results[1] is True
    assert isinstance(results[2], Exception) and "refused by the database" in str(results[2])
    after = _independently_checked(database_url)
    assert set(after.allocations) == {"fine"} and after.generation == store.cached().generation
