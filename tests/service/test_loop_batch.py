"""The loop-pass batcher that the estimator and the scheduling cycle share."""

from __future__ import annotations

import asyncio

import pytest

from service.loop_batch import LoopBatcher


class Doubler:
    """Doubles each item; records the items of every run."""

    def __init__(self) -> None:
        self.runs: list[list[int]] = []

    def __call__(self, items: list[int]) -> list[int | BaseException]:
        self.runs.append(items)
        return [ValueError(f"odd: {i}") if i % 2 else 2 * i for i in items]


async def _submit_all(batcher: LoopBatcher[int, int], items: list[int]) -> list[int | str]:
    results = await asyncio.gather(*(batcher.submit(i) for i in items), return_exceptions=True)
    return [str(r) if isinstance(r, BaseException) else r for r in results]


def test_the_calls_of_one_pass_share_one_run_and_fail_alone() -> None:
    run = Doubler()
    answers = asyncio.run(_submit_all(LoopBatcher(run), [0, 2, 3, 4]))
    assert answers == [0, 4, "odd: 3", 8] and run.runs == [[0, 2, 3, 4]]


def test_take_leaves_the_rest_for_the_next_pass() -> None:
    run = Doubler()
    answers = asyncio.run(_submit_all(LoopBatcher(run, take=lambda items: min(2, len(items))), [0, 2, 4, 6, 8]))
    assert answers == [0, 4, 8, 12, 16] and run.runs == [[0, 2], [4, 6], [8]]


def test_a_run_that_raises_fails_every_call_of_its_batch() -> None:
    def broken(items: list[int]) -> list[int | BaseException]:
        raise RuntimeError("broken")

    assert asyncio.run(_submit_all(LoopBatcher(broken), [0, 2])) == ["broken", "broken"]


def test_a_call_whose_caller_has_gone_is_left_out() -> None:
    run = Doubler()

    async def scenario() -> int:
        batcher = LoopBatcher(run)
        gone = asyncio.ensure_future(batcher.submit(2))
        staying = asyncio.ensure_future(batcher.submit(4))
        await asyncio.sleep(0)  # both have asked
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        return await staying

    assert asyncio.run(scenario()) == 8 and run.runs == [[4]]
