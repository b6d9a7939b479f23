"""Benchmark (not a timed test): one benchmark of this checkout against another commit, run alternately.

On a shared machine the load moves from one minute to the next, so a figure measured today is not
comparable with one measured yesterday. This runs the same benchmark script in this checkout and in a
temporary worktree of ``BASE`` in turns (ABBA order: each side runs first as often as second), with the
same interpreter, and prints per figure the median of each side and their ratio. Figures that are not
timings (jobs placed, network cost) are printed too: a change that should not alter decisions shows
them equal.

    .venv/bin/python tests/benchmarks/compare_commits.py 1c7ab59 --bench placement --rounds 2 -- --fast
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
from contextlib import contextmanager
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
    env = {**os.environ, "PYTHONPATH": str(tree)}  # before the editable install: the tree's own code
    script = tree / "tests" / "benchmarks" / f"bench_{bench}.py"
    done = subprocess.run([sys.executable, str(script), *extra, "--out", str(out)], cwd=tree, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench_{bench}.py failed in {tree} (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return dict(_leaves(json.loads(out.read_text())))


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
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.extra = argv[cut + 1:]  # everything after "--" goes to the benchmark as it is
    runs: dict[str, list[dict[str, float]]] = {"head": [], "base": []}
    with worktree(args.base) as base_tree, tempfile.TemporaryDirectory() as scratch:
        trees = {"head": REPO, "base": base_tree}
        for i in range(args.rounds):
            order = ("head", "base") if i % 2 == 0 else ("base", "head")
            for side in order:
                print(f"round {i + 1}/{args.rounds}: {side}", file=sys.stderr, flush=True)
                runs[side].append(run(trees[side], args.bench, args.extra, Path(scratch) / f"{side}{i}.json"))
    shared = sorted(set.intersection(*(set(r) for side in runs.values() for r in side)))
    print(f"bench_{args.bench}.py {' '.join(args.extra)}: this checkout against {args.base}, "
          f"median of {args.rounds} alternating runs each")
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
