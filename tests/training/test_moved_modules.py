"""A bundle registered before its modules moved still unpickles: old module names lead to the new ones."""

from __future__ import annotations

import importlib
import pickle

import pytest

from training import MOVED


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_module_name_is_the_new_module(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)


@pytest.mark.parametrize(("old", "name", "new"), [
    ("training.bundle", "EstimatorBundle", "training.pipeline.bundle"),
    ("training.history", "HistoryState", "training.features.history"),
    ("training.features", "TargetSpec", "training.features.frames"),
])
def test_a_pickle_naming_a_class_by_its_old_module_loads_the_class(old: str, name: str, new: str) -> None:
    # protocol 0's GLOBAL opcode: "c<module>\n<name>\n", then STOP; what a registered bundle holds for a class
    loaded = pickle.loads(f"c{old}\n{name}\n.".encode())
    assert loaded is getattr(importlib.import_module(new), name)


def test_a_name_that_never_existed_is_still_an_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("training.no_such_module")
