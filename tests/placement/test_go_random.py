"""Go's math/rand stream, ported so that a fill's seed gives FGD's simulator's pod order: the expected values
below were printed by Go 1.19 (``rand.New(rand.NewSource(seed))`` and the global source after
``rand.Seed(42)``), the first row of seed 1 being Go's well-known 5577006791947779410."""

from __future__ import annotations

import pytest

from placement.sim.go_random import GoRand

# seed -> Int63, Int63, Int, Intn(10), Intn(8152), Intn(1 << 20), Intn(3e9); Shuffle of range(12); Int63
GO_1_19 = {
    0: ((8717895732742165505, 2259404117704393152, 6050128673802995827, 6, 4899, 897504, 286980153),
        [4, 0, 8, 6, 3, 10, 5, 11, 2, 1, 9, 7], 7259475919510918339),
    1: ((5577006791947779410, 8674665223082153551, 6129484611666145821, 9, 3057, 643462, 2632969758),
        [9, 5, 0, 8, 7, 2, 10, 6, 4, 3, 11, 1], 6263450610539110790),
    42: ((3440579354231278675, 608747136543856411, 5571782338101878760, 0, 887, 817761, 1883513247),
         [5, 10, 8, 7, 3, 0, 2, 1, 9, 6, 11, 4], 8685383948212866759),
    -7: ((747107023976529931, 7084732931963018726, 6995717851144434728, 6, 3083, 343306, 77599753),
         [1, 2, 6, 9, 11, 0, 5, 8, 4, 3, 10, 7], 1366115374165645772),
    1 << 40: ((5470237361722394362, 6322525149314491254, 1177463506020107830, 3, 1277, 975798, 946297451),
              [9, 8, 7, 5, 11, 6, 0, 4, 1, 3, 2, 10], 7018503932511135185),
}


@pytest.mark.parametrize("seed", sorted(GO_1_19))
def test_every_draw_is_gos(seed: int) -> None:
    draws, shuffled, after = GO_1_19[seed]
    rng = GoRand(seed)
    got = (rng.int63(), rng.int63(), rng.int_(), rng.intn(10), rng.intn(8152), rng.intn(1 << 20),
           rng.intn(3_000_000_000))
    assert got == draws
    items = list(range(12))
    rng.shuffled(items)
    assert items == shuffled
    assert rng.int63() == after  # the shuffle drew exactly as many values as Go's


def test_a_long_shuffle_is_gos() -> None:
    # rand.Seed(42); rand.Int(); rand.Shuffle(8152, ...): the default openb list's size, as FGD's simulator runs it
    rng = GoRand(42)
    rng.int_()
    items = list(range(8152))
    rng.shuffled(items)
    assert items[:8] == [255, 1685, 6784, 4463, 602, 1564, 3882, 7257]
    assert items[-8:] == [3119, 3131, 6622, 3122, 357, 1701, 4923, 538]
    assert (rng.intn(8152), rng.intn(8152)) == (3888, 5689)


def test_a_permutation_is_gos() -> None:
    rng = GoRand(7)  # rand.New(rand.NewSource(7)).Perm(10), then Int63()
    assert rng.perm(10) == [2, 0, 5, 3, 1, 6, 9, 8, 4, 7]
    assert rng.int63() == 4231909740397749873


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="Intn needs n > 0, got 0"):
        GoRand(1).intn(0)
