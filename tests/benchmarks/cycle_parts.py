"""Where a scheduling cycle's time goes: ``bench_scheduling.py --parts`` times the parts of each cycle it runs.

The parts are private functions of ``placement.scheduling``, wrapped here for the benchmark's run only (a
measurement, not an interface: the wrapping adds its own overhead, about a microsecond a call, and names the
functions as they are now). Per cycle:

* ``begin``: ``CycleState.begin`` (the running jobs' views, the quota book, the screen's indexes);
* ``set-up``: the pending list's checks (``_check_pending``); ``in order``: each queue's jobs in its order
  (``in_order``);
* the decisions made afresh, by what came of them: ``start`` and each wait reason, less the reservation searches
  inside them: ``reservation search`` (the forecast followed release by release until the job could fit there,
  then the policy asked), apart where none was found;
* ``walk``: the rest of the guaranteed jobs' pass: going over every waiting job in its queue's order and telling
  each the answer its class got (``_guaranteed`` less the decisions and the orders inside it);
* ``rest``: the cycle's time outside all of these (sorting the pending list by queue and mode, opportunistic jobs,
  upgrades, the plan).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import placement.scheduling.cycle as cycle_module
from placement.scheduling.state import CycleState


class CycleParts:
    """Seconds and calls per part of the cycle being timed (:meth:`timing`), and of every cycle timed so far."""

    def __init__(self) -> None:
        self.now: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        self.searching = 0.0
        """Seconds spent in reservation searches so far (a decision's own time leaves out those inside it)."""
        self.cycles: list[tuple[int, dict[str, list[float]]]] = []
        """Per cycle timed: how many jobs it started, and its parts."""

    def _add(self, part: str, seconds: float) -> None:
        entry = self.now[part]
        entry[0] += seconds
        entry[1] += 1

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Time the parts of the cycles run inside (one cycle per :meth:`cycle` call)."""
        originals: list[tuple[Any, str, Any]] = []

        def wrap(owner: Any, name: str, part: Callable[[Any], str] | str, search: bool = False,
                 less_searches: bool = False) -> None:
            inner = getattr(owner, name)
            originals.append((owner, name, owner.__dict__[name]))

            def timed(*args: Any, **kwargs: Any) -> Any:
                started, searched = time.perf_counter(), self.searching
                result = inner(*args, **kwargs)
                took = time.perf_counter() - started
                if search:
                    self.searching += took
                self._add(part if isinstance(part, str) else part(result),
                          took - (self.searching - searched if less_searches else 0.0))
                return result

            setattr(owner, name, staticmethod(timed) if isinstance(owner.__dict__[name], staticmethod) else timed)

        wrap(CycleState, "begin", "begin")
        wrap(cycle_module, "_check_pending", "set-up")
        wrap(cycle_module, "in_order", "in order")
        wrap(cycle_module, "_guaranteed", "guaranteed")
        wrap(cycle_module, "_decide_anew", lambda reason: "start" if reason is None else f"wait: {reason.value}",
             less_searches=True)
        wrap(cycle_module, "reserve", lambda held: "reservation search" if held is not None
             else "reservation search (none found)", search=True)
        try:
            yield
        finally:
            for owner, name, original in originals:
                setattr(owner, name, original)

    def cycle(self, run: Callable[[], Any], starts: Callable[[Any], int]) -> Any:
        """``run()`` (one cycle) timed whole and by parts; ``starts``: how many jobs its result started."""
        self.now.clear()
        started = time.perf_counter()
        result = run()
        total = time.perf_counter() - started
        parts = {k: list(v) for k, v in self.now.items()}
        parts["total"] = [total, 1]
        self.cycles.append((starts(result), parts))
        return result

    def summary(self, most_starts: int = 1) -> tuple[int, dict[str, tuple[float, float]]]:
        """How many cycles started at most ``most_starts`` jobs, and per part their mean milliseconds and calls a
        cycle (a decision's time leaves out the reservation search inside it, a part of its own)."""
        chosen = [parts for n, parts in self.cycles if n <= most_starts]
        if not chosen:
            return 0, {}
        names = sorted({k for parts in chosen for k in parts})
        mean = {k: (1e3 * sum(p.get(k, [0.0, 0])[0] for p in chosen) / len(chosen),
                    sum(p.get(k, [0.0, 0])[1] for p in chosen) / len(chosen)) for k in names}
        inside = sum(ms for k, (ms, _) in mean.items() if k == "start" or k.startswith(("wait: ", "reservation")))
        out = {k: v for k, v in mean.items() if k not in ("guaranteed", "total")}
        # the guaranteed pass less the decisions, searches and queue orders inside it
        out["walk"] = (mean.get("guaranteed", (0.0, 0))[0] - inside - mean.get("in order", (0.0, 0))[0], 0)
        out["rest"] = (mean["total"][0] - mean.get("guaranteed", (0.0, 0))[0] - mean.get("begin", (0.0, 0))[0]
                       - mean.get("set-up", (0.0, 0))[0], 0)
        out["total"] = mean["total"]
        return len(chosen), out


def parts_lines(parts: CycleParts) -> list[str]:
    """The summary, one line per part, largest first."""
    count, summary = parts.summary()
    if not count:
        return ["no cycle started at most one job: no parts to show"]
    lines = [f"where a cycle that started at most one job spends its time (wall clock, mean of {count} cycles; the "
             f"timing adds its own overhead):"]
    for name, (ms, calls) in sorted(summary.items(), key=lambda kv: (kv[0] == "total", -kv[1][0])):
        each = f", {calls:,.0f} a cycle, {1e3 * ms / calls:,.1f} us each" if calls and name != "total" else ""
        lines.append(f"  {name:32s} {ms:7.1f} ms{each}")
    return lines
