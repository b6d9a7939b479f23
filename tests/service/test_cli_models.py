"""``gpuplace models list`` says which gpuplace each registered version needs and whether this installation
can load it, from the tags a version is registered with (read from a real MLflow store)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from models.registry import ModelRegistry, default_uri
from models.requirements import pip_requirements, version_tags

REPO = Path(__file__).resolve().parents[2]
NAME = "list-test"


def test_models_list_shows_needed_gpuplace_and_whether_it_loads_here(tmp_path: Path) -> None:
    store = ModelRegistry(default_uri(tmp_path), NAME, artifact_root=tmp_path / "mlartifacts")
    store.client.create_registered_model(NAME)
    here = pip_requirements()
    other_gpuplace = [f"gpuplace==0.0.1{'' if version('gpuplace') != '0.0.1' else '.post1'}", *here[1:]]
    other_lightgbm = [pin if not pin.startswith("lightgbm==") else "lightgbm==0.0.1" for pin in here]
    for tags in ({}, version_tags(other_gpuplace), version_tags(other_lightgbm), version_tags(here)):
        # versions without artifacts: listing reads tags only and never downloads a model
        store.client.create_model_version(NAME, source=(tmp_path / "none").as_uri(), tags=tags)

    out = subprocess.run([sys.executable, "-m", "service.cli", "models", "list", "--name", NAME],
                         capture_output=True, text=True, cwd=REPO, timeout=180,
                         env={**os.environ, "GPUPLACE_HOME": str(tmp_path), "COLUMNS": "400"})
    assert out.returncode == 0, out.stderr
    rows = {line.split("│")[1].strip(): line for line in out.stdout.splitlines()
            if line.startswith("│") and line.split("│")[1].strip().isdigit()}
    assert sorted(rows) == ["1", "2", "3", "4"], out.stdout
    assert f"loads here (gpuplace {version('gpuplace')})" in out.stdout.replace("\n", "")
    assert "unknown: registered without its requirements" in rows["1"]
    assert "no: gpuplace 0.0.1" in rows["2"] and f"{version('gpuplace')} installed" in rows["2"]
    assert "unsure: lightgbm 0.0.1 needed" in rows["3"] and f"│ {version('gpuplace')} " in rows["3"]
    assert "yes" in rows["4"] and f"│ {version('gpuplace')} " in rows["4"]
