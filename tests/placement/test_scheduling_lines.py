"""The order a cycle offers its queues' jobs in, worked out in arrays (``placement.scheduling.lines``), against
offering the heads one by one: SYNTHETIC jobs, queues and shares."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from placement.scheduling import lines as lines_module
from placement.scheduling.lines import Offer
from placement.scheduling.memo import Facts, facts_of
from tests.placement.scheduling_cases import gpu_job, pending

Share = tuple[int, float]
SHARES: list[Share] = [(0, 0.0), (1, 0.0), (1, 0.25), (1, 0.5), (1, float("inf"))]


def one_by_one(lines: dict[str, list[Facts]], shares: dict[tuple[str, int], Share],
               changes: dict[int, tuple[str, int, Share]]) -> list[str]:
    """The cycle's reference walk: the queue whose head's turn is smallest goes on while its next job's turn is
    smaller than every other head's; after the ``k``-th job offered, ``changes[k]`` changes a share, and every
    head's turn is compared afresh."""
    def turn(facts: Facts) -> tuple[object, ...]:
        return shares[(facts.pending.queue, facts.shape)] + facts.turn

    taken = dict.fromkeys(lines, 0)
    turns = {name: turn(line[0]) for name, line in lines.items() if line}
    out: list[str] = []
    while turns:
        name = min(turns, key=turns.__getitem__)
        bound = min((t for q, t in turns.items() if q != name), default=None)
        line = lines[name]
        while True:
            out.append(line[taken[name]].pending.job_id)
            taken[name] += 1
            change = changes.get(len(out))
            if change is not None:
                shares[change[:2]] = change[2]
                turns = {n: turn(lines[n][taken[n]]) for n in turns if taken[n] < len(lines[n])}
                break
            if taken[name] == len(line):
                del turns[name]
                break
            if bound is not None and turn(line[taken[name]]) > bound:
                turns[name] = turn(line[taken[name]])
                break
    return out


def in_windows(lines: dict[str, list[Facts]], shares: dict[tuple[str, int], Share],
               changes: dict[int, tuple[str, int, Share]]) -> list[str]:
    """The same walk through :class:`Offer`, as the cycle drives it."""
    state = dict.fromkeys(lines, 0)  # per queue, its changes of usage: the shares it had are stale after one
    offer = Offer(lines, lambda facts: shares[(facts.pending.queue, facts.shape)], state.__getitem__)
    out: list[str] = []
    window = offer.next()
    while len(window):
        at, changed, lowered = 0, False, False
        for k in window.tolist():
            out.append(offer.facts[k].pending.job_id)
            at += 1
            change = changes.get(len(out))
            if change is not None:
                lowered = change[2] < shares[change[:2]]
                shares[change[:2]] = change[2]
                state[change[0]] += 1
                changed = True
                break
        offer.took(at, changed, lowered)
        window = offer.next()
    return out


job_specs = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(-1, 1), st.integers(0, 3)),
                     min_size=0, max_size=120)
"""Per job: its queue, shape (GPUs), priority and submit time (few values: turns tie but for the id)."""


@settings(max_examples=300, deadline=None)
@given(job_specs, st.data())
def test_the_offer_takes_jobs_as_offering_heads_one_by_one(specs: list[tuple[int, int, int, int]],
                                                           data: st.DataObject) -> None:
    lines: dict[str, list[Facts]] = {}
    for n, (queue, gpus, priority, submit) in enumerate(specs):
        job = pending(gpu_job(f"j{(n * 7919) % 1009:04d}-{n}", float(gpus + 1), priority=priority), f"q{queue}",
                      submit_s=float(submit))
        lines.setdefault(f"q{queue}", []).append(facts_of(job))
    # each queue's own order: not the order of turns (as an sjf line is not)
    lines = {name: data.draw(st.permutations(line)) for name, line in sorted(lines.items())}
    keys = sorted({(f.pending.queue, f.shape) for line in lines.values() for f in line})
    shares = {key: data.draw(st.sampled_from(SHARES)) for key in keys}
    changes = ({k: (*data.draw(st.sampled_from(keys)), data.draw(st.sampled_from(SHARES)))
                for k in data.draw(st.sets(st.integers(1, len(specs)), max_size=8))} if keys else {})
    expected = one_by_one(lines, dict(shares), changes)
    # small first windows: lines run past several, as the cycle's thousands of jobs run past 32
    with mock.patch.object(lines_module, "FIRST_WINDOW", data.draw(st.sampled_from([1, 2, 3, 32]))):
        assert in_windows(lines, dict(shares), changes) == expected
    assert sorted(expected) == sorted(f.pending.job_id for line in lines.values() for f in line)


def test_a_long_line_is_offered_over_several_windows() -> None:
    """Past the first window (``FIRST_WINDOW`` jobs a line): the running largest carries from one window to the
    next. One queue within its guarantee, one borrowing: the first one's jobs all go first."""
    lines = {
        "a": [facts_of(pending(gpu_job(f"a{n:03d}", 1.0), "a", submit_s=float(100 - n))) for n in range(100)],
        "b": [facts_of(pending(gpu_job(f"b{n:03d}", 2.0), "b", submit_s=float(n))) for n in range(100)],
    }
    shares = {("a", lines["a"][0].shape): (0, 0.0), ("b", lines["b"][0].shape): (1, 0.5)}
    got = in_windows(lines, dict(shares), {})
    assert got == [f"a{n:03d}" for n in range(100)] + [f"b{n:03d}" for n in range(100)]
    assert got == one_by_one(lines, dict(shares), {})
