"""The MLflow model registry, behind a small interface: versions, aliases, loading.

The tracking and registry store defaults to a SQLite file in gpuplace's working folder
(``sqlite:///<home>/mlflow.db``, artifacts in ``<home>/mlartifacts``); any MLflow tracking URI can be
given instead (``GPUPLACE_MLFLOW_URI``). New versions get the alias ``challenger``; ``champion`` is
what the service answers with. An alias move is one registry call, so a promotion is atomic.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.environment_variables import (
    MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR,
    MLFLOW_HTTP_REQUEST_BACKOFF_JITTER,
    MLFLOW_HTTP_REQUEST_MAX_RETRIES,
    MLFLOW_HTTP_REQUEST_TIMEOUT,
)
from mlflow.exceptions import MlflowException, RestException

CHAMPION = "champion"
CHALLENGER = "challenger"
DEFAULT_NAME = "gpuplace-estimators"
EXPERIMENT = "gpuplace"

log = logging.getLogger(__name__)
_NOT_FOUND = frozenset({"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"})
"""MLflow's error codes for "no such registered model" and "no version carries that alias": answers, not
failures."""


class RegistryUnavailable(ConnectionError):
    """The registry did not answer, or answered with an error: not the same as "no such alias"."""


class ModelNotFound(LookupError):
    """No such registered model, version or alias: an answer naming what was asked, not a failure."""


def redacted(uri: str) -> str:
    """``uri`` (or a message quoting it) without the user and password a URL may carry, for messages
    that ``/readyz`` shows to anyone."""
    return re.sub(r"//[^/@\s]+@", "//***@", uri)


@dataclass(frozen=True)
class VersionInfo:
    """One registered version with its aliases and the headline metrics of the run that made it."""

    version: str
    run_id: str
    aliases: tuple[str, ...]
    created_ms: int
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    """The version's tags: among them what it needs to load (``models.requirements``)."""


def default_uri(home: Path) -> str:
    return f"sqlite:///{(home / 'mlflow.db').resolve()}"


class ModelRegistry:
    """Versions and aliases of one registered model (``name``) in one MLflow store."""

    def __init__(self, tracking_uri: str, name: str = DEFAULT_NAME, artifact_root: Path | None = None) -> None:
        self.tracking_uri = tracking_uri
        self.name = name
        self.artifact_root = artifact_root
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    def experiment_id(self) -> str:
        """The experiment training runs go to (created with artifacts under ``artifact_root``)."""
        found = self.client.get_experiment_by_name(EXPERIMENT)
        if found is not None:
            return str(found.experiment_id)
        location = self.artifact_root.resolve().as_uri() if self.artifact_root is not None else None
        return str(self.client.create_experiment(EXPERIMENT, artifact_location=location))

    def alias_version(self, alias: str) -> str | None:
        """The version that carries ``alias``, or ``None``; :class:`RegistryUnavailable` when the registry
        cannot tell (a server that is down must not read as "no model yet")."""
        try:
            return str(self.client.get_model_version_by_alias(self.name, alias).version)
        except MlflowException as exc:
            if exc.error_code in _NOT_FOUND:
                return None
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: MlflowException) -> RegistryUnavailable:
        what = "answered with an error" if isinstance(exc, RestException) else "unreachable"
        return RegistryUnavailable(redacted(f"model registry at {self.tracking_uri} {what}: {exc.message}"))

    @staticmethod
    def bound_requests(timeout_s: int, retries: int) -> None:
        """Give up on an HTTP registry after ``retries`` retries of ``timeout_s`` each, a second or two
        apart (MLflow's defaults keep a client retrying for about four minutes). MLflow reads these
        settings from the environment at every request, so they hold for the whole process; any already
        set there are kept."""
        for setting, value in ((MLFLOW_HTTP_REQUEST_TIMEOUT, timeout_s), (MLFLOW_HTTP_REQUEST_MAX_RETRIES, retries),
                               (MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR, 1), (MLFLOW_HTTP_REQUEST_BACKOFF_JITTER, 0.5)):
            os.environ.setdefault(setting.name, str(value))

    def set_alias(self, alias: str, version: str) -> None:
        self.client.set_registered_model_alias(self.name, alias, version)
        log.info("alias moved", extra={"model": self.name, "alias": alias, "version": version})

    def tag_version(self, version: str, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_model_version_tag(self.name, version, key, value)

    def versions(self) -> list[VersionInfo]:
        """All versions, newest first, with the metrics and parameters of their training runs;
        :class:`RegistryUnavailable` when the registry cannot be asked (not an empty list)."""
        try:
            found = self.client.search_model_versions(f"name='{self.name}'")
        except MlflowException as exc:
            if exc.error_code in _NOT_FOUND:
                return []
            raise self._unavailable(exc) from exc
        if not found:
            return []
        aliases: dict[str, list[str]] = {}
        for alias, version in self.client.get_registered_model(self.name).aliases.items():
            aliases.setdefault(str(version), []).append(alias)
        infos = []
        for mv in found:
            run = self.client.get_run(mv.run_id) if mv.run_id else None
            infos.append(VersionInfo(str(mv.version), mv.run_id or "", tuple(sorted(aliases.get(str(mv.version), []))),
                                     int(mv.creation_timestamp or 0), dict(run.data.metrics) if run else {},
                                     dict(run.data.params) if run else {}, dict(mv.tags or {})))
        return sorted(infos, key=lambda v: int(v.version), reverse=True)

    def load(self, alias_or_version: str) -> tuple[str, Any]:
        """The version number and Python object of ``'champion'``, ``'challenger'`` or a version like ``'3'``.

        The object is stamped with its version (``set_version``) so that it answers with it.
        """
        version = alias_or_version if alias_or_version.isdigit() else self.alias_version(alias_or_version)
        where = redacted(self.tracking_uri)
        if version is None:
            raise ModelNotFound(f"model {self.name!r} has no version with alias {alias_or_version!r} in {where}")
        try:
            model = mlflow.pyfunc.load_model(f"models:/{self.name}/{version}").unwrap_python_model()
        except MlflowException as exc:
            if exc.error_code in _NOT_FOUND:
                raise ModelNotFound(f"model {self.name!r} has no version {version} in {where}") from exc
            raise self._unavailable(exc) from exc
        if hasattr(model, "set_version"):
            model.set_version(version)
        return version, model

    def run_info(self, version: str) -> VersionInfo:
        for info in self.versions():
            if info.version == version:
                return info
        raise KeyError(f"model {self.name!r} has no version {version}")
