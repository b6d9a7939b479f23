"""The hyperparameters a job may state, their types and ranges: one table, read by the API's validation,
the estimators' feature builders and the docs.

A job states any subset. Unknown keys and wrong types are refused with the key named, never ignored:
a misspelt ``batchsize`` silently dropped would make a memory estimate quietly wrong.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Hyperparameter:
    name: str
    kind: type
    """``int``, ``float`` or ``str``."""
    meaning: str
    minimum: float | None = None
    choices: tuple[str, ...] = ()


FAMILIES = ("mlp", "cnn", "transformer", "rnn", "recommender", "detection", "other")
PRECISIONS = ("fp32", "fp16", "bf16", "amp")
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "adagrad", "adadelta", "rmsprop", "lamb", "other")

VOCABULARY: dict[str, Hyperparameter] = {h.name: h for h in (
    Hyperparameter("model_family", str, "architecture family", choices=FAMILIES),
    Hyperparameter("model", str, "model name, e.g. resnet50, bert_base_uncased; matches a profiled workload "
                                 "where one was measured"),
    Hyperparameter("parameters", int, "trainable parameters (count)", minimum=1),
    Hyperparameter("activations", int, "activation units of one sample, summed over the layers (count)",
                   minimum=1),
    Hyperparameter("layers", int, "layers with weights (depth)", minimum=1),
    Hyperparameter("batchnorm_layers", int, "batch-normalisation layers (count)", minimum=0),
    Hyperparameter("dropout_layers", int, "dropout layers (count)", minimum=0),
    Hyperparameter("activation", str, "activation function, e.g. relu, gelu, tanh"),
    Hyperparameter("batch_size", int, "samples per GPU per step", minimum=1),
    Hyperparameter("precision", str, "numeric precision of training", choices=PRECISIONS),
    Hyperparameter("optimizer", str, "optimizer", choices=OPTIMIZERS),
    Hyperparameter("learning_rate", float, "learning rate", minimum=0.0),
    Hyperparameter("samples_per_epoch", int, "training samples in one epoch (count)", minimum=1),
    Hyperparameter("epochs", float, "epochs the job will train", minimum=0.0),
)}


class HyperparameterError(ValueError):
    """A stated hyperparameter the vocabulary refuses; ``key`` names it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"hyperparams.{key}: {problem}")
        self.key = key


def validate(stated: Mapping[str, Any]) -> dict[str, int | float | str]:
    """The stated hyperparameters, checked and normalised (ints as int, names lower-case), or
    :class:`HyperparameterError` naming the first bad key."""
    clean: dict[str, int | float | str] = {}
    for key, value in stated.items():
        known = VOCABULARY.get(key)
        if known is None:
            raise HyperparameterError(key, f"unknown hyperparameter; known: {', '.join(VOCABULARY)}")
        clean[key] = _checked(known, value)
    return clean


def _checked(known: Hyperparameter, value: Any) -> int | float | str:
    if known.kind is str:
        if not isinstance(value, str) or not value.strip():
            raise HyperparameterError(known.name, f"must be a non-empty string, got {value!r}")
        text = value.strip().lower()
        if known.choices and text not in known.choices:
            raise HyperparameterError(known.name, f"{value!r} is not one of {', '.join(known.choices)}")
        return text
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HyperparameterError(known.name, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise HyperparameterError(known.name, f"must be finite, got {value!r}")
    number: int | float = float(value)
    if known.kind is int:
        if not float(value).is_integer():
            raise HyperparameterError(known.name, f"must be a whole number, got {value!r}")
        number = int(number)
    strict = known.kind is float and known.minimum == 0.0  # a rate or a count of epochs: 0 is meaningless
    if known.minimum is not None and (number < known.minimum or (strict and number <= known.minimum)):
        bound = "> 0" if strict else f">= {known.minimum:g}"
        raise HyperparameterError(known.name, f"must be {bound}, got {value!r}")
    return number


def markdown_table() -> str:
    """The vocabulary as a Markdown table (for the docs)."""
    rows = ["| key | type | meaning | allowed |", "|---|---|---|---|"]
    for h in VOCABULARY.values():
        allowed = ", ".join(h.choices) if h.choices else (f">= {h.minimum:g}" if h.minimum is not None else "any")
        if h.kind is float and h.minimum == 0.0:
            allowed = "> 0"
        rows.append(f"| `{h.name}` | {h.kind.__name__} | {h.meaning} | {allowed} |")
    return "\n".join(rows)
