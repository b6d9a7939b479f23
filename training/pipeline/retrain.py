"""``gpuplace retrain``: a challenger on the trace plus feedback, promoted only through the gate.

1. The training table is the source's shipped trace followed by the feedback rows (completed jobs
   the service saw, :mod:`training.pipeline.feedback`). Their time order puts the newest completions in the
   holdout window (the later ``test_share`` of jobs).
2. If the current challenger was trained on exactly this data (same trace digest, feedback digest,
   algorithm, seed and parameters), nothing is trained again: retraining is idempotent.
3. Otherwise a challenger is trained and registered; the alias ``challenger`` moves only once its
   version is fully registered, so an interrupted run leaves at most an unaliased version behind.
4. The promotion gate (:mod:`training.pipeline.promote`) scores challenger and champion on the same most
   recent holdout; ``champion`` moves (one alias move) only if the challenger is better by
   ``margin`` on the primary metric and not worse on P90 coverage.
5. The decision, both models' holdout metrics and a plot comparing them are logged to MLflow as a
   run named ``promotion``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd

from models.registry import CHALLENGER, ModelRegistry
from training.ingest.sources import get_source
from training.pipeline.feedback import digest, with_feedback
from training.pipeline.promote import Decision, promote
from training.pipeline.train import source_digest, train_and_register

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RetrainOutcome:
    trained: bool
    challenger: str | None
    decision: Decision
    feedback_rows: int
    decision_run_id: str


def retrain(registry: ModelRegistry, source: str, feedback: pd.DataFrame, algo: str = "rf", seed: int = 0,
            margin: float = 0.0, params: dict[str, Any] | None = None,
            progress: Progress | None = None) -> RetrainOutcome:
    """Train a challenger on ``source`` + ``feedback`` unless one already has, then run the gate."""
    say = progress or (lambda _: None)
    table = with_feedback(get_source(source).load(), feedback)
    wanted = {"algo": algo, "seed": str(seed), "learner_params": repr(params or {}), "sources": source,
              f"data_sha256.{source}": source_digest(source), "feedback_sha256": digest(feedback)}
    challenger = registry.alias_version(CHALLENGER)
    trained = False
    if challenger is None or any(registry.run_info(challenger).params.get(k) != v for k, v in wanted.items()):
        say(f"training a challenger on {len(table) - len(feedback):,} trace rows and {len(feedback):,} feedback rows")
        result = train_and_register(registry, [source], algo, seed, progress=say, params=params,
                                    tables={source: table},
                                    extra_params={"feedback_sha256": wanted["feedback_sha256"],
                                                  "feedback_rows": str(len(feedback))})
        challenger, trained = result.version, True
    else:
        say(f"challenger version {challenger} was trained on this very data: not training again")
    say("scoring challenger and champion on the most recent holdout")
    decision = promote(registry, margin, tables={source: table})
    run_id = _log_decision(registry, decision, margin, len(feedback))
    return RetrainOutcome(trained, challenger, decision, len(feedback), run_id)


def _log_decision(registry: ModelRegistry, decision: Decision, margin: float, feedback_rows: int) -> str:
    with mlflow.start_run(experiment_id=registry.experiment_id(), run_name="promotion") as run:
        mlflow.log_params({"challenger": decision.challenger or "", "champion_before": decision.champion_before or "",
                           "promoted": str(decision.promoted), "margin": str(margin),
                           "feedback_rows": str(feedback_rows)})
        mlflow.set_tag("reason", decision.reason)
        for side, values in decision.comparison.items():
            mlflow.log_metrics({f"{side}.{k}": v for k, v in values.items()})
        if decision.comparison:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "promotion.png"
                plot_comparison(decision, path)
                mlflow.log_artifact(str(path))
    return str(run.info.run_id)


def plot_comparison(decision: Decision, path: Path) -> Path:
    """Bars of each target's holdout MALE and P90 coverage, champion beside challenger."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    new, old = decision.comparison.get("challenger", {}), decision.comparison.get("champion", {})
    targets = sorted({k.split(".")[0] for k in new})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, metric, title, label in (
            (axes[0], "male", "mean absolute log error (lower is better)", "mean absolute log error (ln, no unit)"),
            (axes[1], "p90_coverage", "P90 coverage (0.9 is right)", "share of jobs with actual <= P90 (fraction)")):
        xs = range(len(targets))
        ax.bar([x - 0.2 for x in xs], [old.get(f"{t}.{metric}", float("nan")) for t in targets], 0.4,
               label=f"champion {decision.champion_before or '-'}")
        ax.bar([x + 0.2 for x in xs], [new.get(f"{t}.{metric}", float("nan")) for t in targets], 0.4,
               label=f"challenger {decision.challenger or '-'}")
        ax.set_xticks(list(xs), targets)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("target")
        ax.set_ylabel(label, fontsize=8)
        if metric == "p90_coverage":
            ax.axhline(0.9, color="grey", linestyle="--", linewidth=1)
    axes[0].legend(fontsize=8)
    verdict = "promoted" if decision.promoted else "kept the champion"
    fig.suptitle(f"retrain on the most recent holdout: {verdict}: {decision.reason[:100]}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
