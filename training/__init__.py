"""Training: trace ingestion (``ingest``), features without leakage (``features``), the pipeline from
training to the registered bundle (``pipeline``), what a job needs from its hyperparameters (``needs``),
measured performance profiles (``performance``) and the replay of real traces (``replay``).

A registered model is a pickle that names the modules of its classes. Modules that have moved keep
their old names as aliases (:data:`MOVED`), so that a model registered before the move still loads.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

MOVED = {
    "training.bundle": "training.pipeline.bundle",
    "training.encoder": "training.features.encoder",
    "training.history": "training.features.history",
    "training.activity": "training.features.activity",
    "training.targets": "training.features.targets",
    "training.schema": "training.ingest.schema",
}
"""Old module name -> where it lives now, for the modules whose classes a registered bundle pickles."""


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        pass  # the target module ran when it was imported


class _MovedModules(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(MOVED[fullname]))


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
