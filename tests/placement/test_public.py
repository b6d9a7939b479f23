"""The package's public face: every exported name is the one its module defines, and loads lazily."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import placement


def test_every_exported_name_is_its_modules() -> None:
    for module, names in placement.EXPORTS.items():
        home = importlib.import_module(module)
        for name in names:
            assert getattr(placement, name) is getattr(home, name), f"{name} from {module}"
    assert sorted(placement.__all__) == sorted(n for names in placement.EXPORTS.values() for n in names)
    assert set(placement.__all__) <= set(dir(placement))


def test_the_type_checkers_see_the_same_names() -> None:
    """The ``TYPE_CHECKING`` imports (what mypy reads) list exactly ``EXPORTS`` (what runs)."""
    tree = ast.parse(Path(placement.__file__).read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    seen: dict[str, set[str]] = {}
    for node in guarded.body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names:
            assert alias.asname == alias.name  # "X as X": re-exported
            seen.setdefault(node.module, set()).add(alias.name)
    assert seen == {module: set(names) for module, names in placement.EXPORTS.items()}


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        placement.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("placement.no_such_name resolved")


def test_importing_a_light_part_does_not_load_the_policies() -> None:
    code = ("import sys, placement, placement.model.errors, placement.model.gpu_types; "
            "print(any(m in sys.modules for m in ('placement.online.policies', 'placement.online.greedy', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(placement.__file__).resolve().parents[1])
    assert out.stdout.strip() == "False"
