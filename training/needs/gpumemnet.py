"""Loading GPUMemNet (measured peak GPU memory and mean GPU utilisation of 6,000 MLP training runs on an
A100 40 GB) into one tidy, checked table named by the hyperparameter vocabulary.

Every figure is checked on the way in: a missing column, a cell that is not a number, a count that is
not a whole number, a zero or negative value where it must be positive, raises :class:`DataError`
naming the file, the 1-based line (the header is line 1), the column and the value. See
``data/gpumemnet/README.md`` for the source, its licence (CC BY 4.0) and its limits.

The source's columns become (vocabulary names, ``training/needs/vocabulary.py``):

| source                       | here               |
|------------------------------|--------------------|
| `Total Parameters`           | `parameters`       |
| `Total Activations`          | `activations` (per sample) |
| `Depth`                      | `layers`           |
| `Batch Size`                 | `batch_size`       |
| `Batch Normalization Layers` | `batchnorm_layers` (0 in step 1, which has none) |
| `Dropout Layers`             | `dropout_layers` (0 in step 1) |
| `Activation Function`        | `activation` (lower-case, e.g. "relu", "leakyrelu") |
| `Max GPU Memory (MiB)`       | `peak_mib`         |
| `Avg GPUTL`                  | `gpu_util_pct` (0-100) |

plus ``model_family`` ("mlp"), ``precision`` ("fp32": every run trained in single precision),
``architecture`` (the ``Filename`` less its ``_batch:<n>`` part, so that runs of one architecture at
different batch sizes share it), ``file`` and ``line``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from placement.model.cluster_io import data_dir
from training.ingest.errors import DataError
from training.ingest.readers import (
    integer_cells,
    line_numbers,
    positive_cells,
    raise_first,
    read_text_csv,
    text_cells,
)

FILES = ("mlp_data_step1.csv", "mlp_data_step2.csv")
COLUMNS = ("architecture", "model_family", "precision", "activation", "layers", "parameters", "activations",
           "batch_size", "batchnorm_layers", "dropout_layers", "peak_mib", "gpu_util_pct", "file", "line")
SOURCE = "GPUMemNet: 6,000 measured MLP training runs on an A100 40 GB (CC BY 4.0)"

_REQUIRED = ("Filename", "Depth", "Activation Function", "Total Activations", "Total Parameters", "Batch Size",
             "Max GPU Memory (MiB)", "Avg GPUTL")
_LAYER_COUNTS = ("Batch Normalization Layers", "Dropout Layers")
"""Columns of step 2 only; a file that has one of them must have both."""
_BATCH_PART = re.compile(r"_batch:(\d+)")


def load_gpumemnet(folder: Path | None = None) -> pd.DataFrame:
    """Both GPUMemNet MLP files, one row per training run, columns :data:`COLUMNS` (see the module doc).

    Integers (``layers``, ``parameters``, ``activations``, ``batch_size``, the layer counts, ``line``) are
    int64; ``peak_mib`` and ``gpu_util_pct`` float64."""
    root = folder if folder is not None else data_dir() / "gpumemnet"
    if not root.is_dir():
        raise DataError(root, "folder not found")
    return pd.concat([_load_file(root / name) for name in FILES], ignore_index=True)[list(COLUMNS)]


def _load_file(path: Path) -> pd.DataFrame:
    raw = read_text_csv(path, ())
    missing = [c for c in _REQUIRED if c not in raw.columns]
    if missing:  # the header (line 1) lacks it
        raise DataError(path, f"missing column(s) {', '.join(missing)}; found {', '.join(map(str, raw.columns))}",
                        1, missing[0])
    present = [c for c in _LAYER_COUNTS if c in raw.columns]
    if len(present) == 1:
        absent = next(c for c in _LAYER_COUNTS if c not in present)
        raise DataError(path, f"missing column {absent}: {present[0]} is there, the two come together",
                        1, absent)
    batch = integer_cells(raw, "Batch Size", path, minimum=1)
    architecture = _architecture(raw, path, batch)
    counts = {c: (integer_cells(raw, c, path, minimum=0) if present else pd.Series(0, index=raw.index, dtype=np.int64))
              for c in _LAYER_COUNTS}
    util = positive_cells(raw, "Avg GPUTL", path)
    raise_first(raw, "Avg GPUTL", path, (util > 100).to_numpy(), "must be at most 100 (a percentage)")
    return pd.DataFrame({
        "architecture": architecture,
        "model_family": "mlp",
        "precision": "fp32",
        "activation": text_cells(raw, "Activation Function", path).str.strip().str.lower(),
        "layers": integer_cells(raw, "Depth", path, minimum=1),
        "parameters": integer_cells(raw, "Total Parameters", path, minimum=1),
        "activations": integer_cells(raw, "Total Activations", path, minimum=1),
        "batch_size": batch,
        "batchnorm_layers": counts["Batch Normalization Layers"],
        "dropout_layers": counts["Dropout Layers"],
        "peak_mib": positive_cells(raw, "Max GPU Memory (MiB)", path),
        "gpu_util_pct": util,
        "file": str(path),
        "line": line_numbers(raw),
    })


def _architecture(raw: pd.DataFrame, path: Path, batch: pd.Series) -> pd.Series:
    """The file name less its ``_batch:<n>`` part, which must agree with ``Batch Size``."""
    names = text_cells(raw, "Filename", path)
    found = names.str.extract(_BATCH_PART, expand=False)
    raise_first(raw, "Filename", path, found.isna().to_numpy(dtype=bool), "has no '_batch:<n>' part")
    disagrees = found.astype(np.int64).to_numpy() != batch.to_numpy()
    raise_first(raw, "Filename", path, disagrees, "names another batch size than the Batch Size column")
    return names.str.replace(_BATCH_PART, "", n=1, regex=True)








