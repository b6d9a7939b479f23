"""What a scheduling pass remembers about jobs that cannot start (SYNTHETIC sizes)."""

from __future__ import annotations

import pytest

from placement.sim.pass_memo import PassMemo, Sizes

GPU = ((1, 0, 1, ()),)  # one task: 1 whole GPU, 1 instance, any type


@pytest.mark.parametrize(("sizes", "known"), [
    (((4000, 1024),), True),   # the same CPU and memory as the failed job
    (((5000, 2048),), True),   # more of both: cannot start either
    (((3000, 4096),), False),  # less CPU: might fit
    (((5000, 512),), False),   # less memory: might fit
])
def test_a_job_needing_at_least_as_much_as_one_that_could_not_start_is_passed_over(sizes: Sizes,
                                                                                  known: bool) -> None:
    memo = PassMemo()
    memo.could_not_start(GPU, ((4000, 1024),))
    assert memo.known_to_fail(GPU, sizes, "shape") is known
    # another GPU part learns nothing from it
    assert memo.known_to_fail(((2, 0, 1, ()),), sizes, "shape") is False


def test_the_frontier_keeps_only_the_smallest_failures() -> None:
    memo = PassMemo()
    memo.could_not_start(GPU, ((4000, 1024),))
    memo.could_not_start(GPU, ((2000, 512),))   # dominated by nothing, dominates the first
    assert memo.frontier[GPU] == [((2000, 512),)]


def test_a_refusal_by_the_policy_counts_for_its_exact_shape_only_and_a_full_gpu_part_for_all() -> None:
    memo = PassMemo()
    memo.refused("shape-a")
    assert memo.known_to_fail(GPU, ((1, 1),), "shape-a") and not memo.known_to_fail(GPU, ((1, 1),), "shape-b")
    memo.gpu_checked[GPU] = False
    assert memo.known_to_fail(GPU, ((0, 0),), "shape-b")
