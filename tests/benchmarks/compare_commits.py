"""Benchmark (not a timed test): one benchmark of this checkout against another commit, run alternately.

On a shared machine the load moves from one minute to the next, so a figure measured today is not
comparable with one measured yesterday. This runs the same benchmark script in this checkout and in a
temporary worktree of ``BASE`` in turns (ABBA order: each side runs first as often as second), with the
same interpreter, and prints per figure the median of each side and their ratio. Figures that are not
timings (jobs placed, network cost) are printed too: a change that should not alter decisions shows
them equal.

    .venv/bin/python tests/benchmarks/compare_commits.py 1c7ab59 --bench placement --rounds 2 -- --fast

``--together`` runs the two sides at the same time in each round instead: whatever else loads the
machine then loads both alike, where alternating runs minutes apart meet different loads (on a shared
2-core machine the same commit's closed-loop throughput moved by 15% from one run to the next). Each
side gets about half the cores, so absolute figures drop; the ratios are the result. The phases of the
two runs line up to within their start-up times (a second or two). Each side's CPU time (its
benchmark process and the servers it started, ``cpu_s``) is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIMING_SUFFIXES = ("_ms", "_s", "_per_s", "per_s", "_rps")
"""Figure names read as timings or rates; the ratio column is this checkout over the base."""


@contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """A detached worktree of ``commit``, removed afterwards whatever happens."""
    with tempfile.TemporaryDirectory(prefix="gpuplace-base-") as parent:
        tree = Path(parent) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), commit], cwd=REPO, check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)


def run(tree: Path, bench: str, extra: list[str], out: Path) -> dict[str, float]:
    """The benchmark's figures (numeric leaves of its JSON, by dotted path) from one run in ``tree``."""
    return run_together([(tree, out)], bench, extra)[0]


def run_together(sides: list[tuple[Path, Path]], bench: str, extra: list[str]) -> list[dict[str, float]]:
    """One run of the benchmark per ``(tree, out)``, all at the same time: per run its figures, and
    ``cpu_s``, the CPU time of the run and every process it started and waited for."""
    with ExitStack() as stack:
        started = []
        for tree, out in sides:
            env = {**os.environ, "PYTHONPATH": str(tree)}  # before the editable install: the tree's own code
            script = tree / "tests" / "benchmarks" / f"bench_{bench}.py"
            log = stack.enter_context(tempfile.TemporaryFile())
            started.append((tree, out, log, subprocess.Popen(
                [sys.executable, str(script), *extra, "--out", str(out)], cwd=tree, env=env,
                stdout=subprocess.DEVNULL, stderr=log)))
        figures = []
        for tree, out, log, process in started:
            _, status, usage = os.wait4(process.pid, 0)  # the usage of this run alone, servers included
            process.returncode = os.waitstatus_to_exitcode(status)
            if process.returncode != 0:
                log.seek(0)
                tail = log.read().decode(errors="replace")[-3000:]
                raise SystemExit(f"bench_{bench}.py failed in {tree} (exit {process.returncode}):\n{tail}")
            figures.append({**dict(_leaves(json.loads(out.read_text()))), "cpu_s": usage.ru_utime + usage.ru_stime})
    return figures


def _leaves(value: object, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, bool):
        return
    elif isinstance(value, int | float):
        yield path, float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="arguments after -- go to the benchmark, e.g. -- --fast")
    parser.add_argument("base", help="the commit to compare with (e.g. main~3, a tag, a hash)")
    parser.add_argument("--bench", default="placement", help="placement, service, sim, predict, ... (bench_<name>.py)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side")
    parser.add_argument("--all", action="store_true", help="print every figure, not only timings and decisions")
    parser.add_argument("--together", action="store_true", help="run both sides at the same time in each round")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.extra = argv[cut + 1:]  # everything after "--" goes to the benchmark as it is
    runs: dict[str, list[dict[str, float]]] = {"head": [], "base": []}
    with worktree(args.base) as base_tree, tempfile.TemporaryDirectory() as scratch:
        trees = {"head": REPO, "base": base_tree}
        for i in range(args.rounds):
            order = ("head", "base") if i % 2 == 0 else ("base", "head")
            if args.together:
                print(f"round {i + 1}/{args.rounds}: both sides at once", file=sys.stderr, flush=True)
                done = run_together([(trees[side], Path(scratch) / f"{side}{i}.json") for side in order],
                                    args.bench, args.extra)
                for side, figures in zip(order, done, strict=True):
                    runs[side].append(figures)
                continue
            for side in order:
                print(f"round {i + 1}/{args.rounds}: {side}", file=sys.stderr, flush=True)
                runs[side].append(run(trees[side], args.bench, args.extra, Path(scratch) / f"{side}{i}.json"))
    shared = sorted(set.intersection(*(set(r) for side in runs.values() for r in side)))
    how = "simultaneous" if args.together else "alternating"
    print(f"bench_{args.bench}.py {' '.join(args.extra)}: this checkout against {args.base}, "
          f"median of {args.rounds} {how} runs each")
    print(f"{'figure':70s} {'head':>12s} {'base':>12s} {'head/base':>10s}")
    for name in shared:
        head = statistics.median(r[name] for r in runs["head"])
        base = statistics.median(r[name] for r in runs["base"])
        timing = name.endswith(TIMING_SUFFIXES)
        if not (timing or args.all or name.rsplit(".", 1)[-1] in ("placed", "jobs_placed", "network_cost")):
            continue
        ratio = f"{head / base:10.3f}" if timing and base else ("" if head != base else "     same")
        print(f"{name:70s} {head:12.4g} {base:12.4g} {ratio:>10s}")


if __name__ == "__main__":
    main()
