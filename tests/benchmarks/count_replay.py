"""Benchmark (not a timed test): the instructions one replay runs, this checkout against another commit, counted.

On a shared 2-core machine the same replay's CPU time moves by a third from one run to the next (the tight
SJF-oracle replay of ``bench_anchor_pai.py`` took 1.27-1.94 s in 18 runs of one commit within an hour), so a change
worth a few percent cannot be told from the noise by timing it. The number of instructions the replay executes does
not move: this counts them with valgrind's cachegrind (``--cache-sim=no``: instructions only; Debian's
``valgrind``), on exactly the replay ``bench_anchor_pai.py`` times beside the PAI trace's simulator (the first
``--jobs`` out-of-sample PAI jobs, 1,000 arriving a minute, causal estimates, one node of ``--gpus`` GPUs,
``first-fit``).

For each side (``BASE`` in a temporary worktree, then this checkout) the same process runs twice under valgrind: with
the replay and without it; the difference is the replay's own instructions (set-up, imports and reading the cached
jobs cancel out). Printed per side: those instructions, a digest of the replay's records (the starts and ends of every
job: equal digests, the same decisions) and the ratio of this checkout over the base. Instructions are not time (a
cache miss costs more than an addition), but in interpreted code they follow it closely; each valgrind run takes
about 30 times the replay's time.

    .venv/bin/python tests/benchmarks/count_replay.py BASE [--jobs 5000] [--gpus 1000] [--queue sjf-oracle]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks.compare_commits import worktree  # noqa: E402

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")

CHILD = """
import hashlib, sys
from bench_anchor_pai import same_inputs
from placement.sim.engine import simulate
from placement.sim.queues import queue_policy
from service.workdir import home
from training.replay.compare import cluster_for, pai_jobs

jobs, gpus, queue, replay = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "replay"
chosen = same_inputs(pai_jobs(None, False, jobs, None, cache=home() / "cache")[:jobs], 1000.0, False)
cluster, _ = cluster_for("big-node", gpus)
if replay:
    records = simulate(cluster, chosen, "first-fit", queue_policy(queue)).records
    print(hashlib.sha256(repr([(r.start_s, r.end_s) for r in records]).encode()).hexdigest()[:16])
"""
"""One run, in the code of the tree it runs in (its working folder and ``PYTHONPATH``): the benchmark's jobs set up and,
given ``replay``, replayed, printing the digest of the records."""


def counted(tree: Path, args: argparse.Namespace, replay: bool) -> tuple[int, str]:
    """(instructions, records' digest) of one run of :data:`CHILD` in ``tree``, under valgrind."""
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", sys.executable,
               "-c", CHILD, str(args.jobs), str(args.gpus), args.queue, "replay" if replay else "set-up"]
    env = {**os.environ, "PYTHONPATH": f"{tree}:{tree / 'tests' / 'benchmarks'}",  # the tree's code, not the install
           "PYTHONHASHSEED": "0"}  # the same hashes, hence the same dict and set orders, in every run
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    found = _REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the run in {tree} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return int(found.group(1).replace(",", "")), done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit to compare with (e.g. main~3, a tag, a hash)")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--queue", default="sjf-oracle", help="fifo, sjf-oracle, sjf-group-gpu, drf, ...")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    # one working folder, so one cache of the jobs, for both sides; the cache made outside valgrind (by this
    # checkout: a base whose set-up differs makes its own, slowly)
    os.environ["GPUPLACE_HOME"] = str(Path(os.environ.get("GPUPLACE_HOME", REPO / ".gpuplace")).resolve())
    subprocess.run([sys.executable, "-c", CHILD, str(args.jobs), str(args.gpus), args.queue, "set-up"], cwd=REPO,
                   env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests' / 'benchmarks'}"}, check=True)
    print(f"{args.queue} replay of {args.jobs:,} PAI jobs on {args.gpus:,} GPUs, instructions (cachegrind):",
          flush=True)
    sides = {}
    with worktree(args.base) as base:
        for name, tree in ((args.base, base), ("this checkout", REPO)):
            without, _ = counted(tree, args, replay=False)
            with_replay, digest = counted(tree, args, replay=True)
            sides[name] = with_replay - without
            print(f"  {name:<16} {sides[name] / 1e6:12,.0f} M  records {digest}", flush=True)
    print(f"  this checkout / {args.base}: {sides['this checkout'] / sides[args.base]:.4f}")


if __name__ == "__main__":
    main()
