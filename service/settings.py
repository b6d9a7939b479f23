"""Settings of the service, from the environment (``GPUPLACE_*``) or a ``.env`` file."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLACE_", env_file=".env", extra="ignore")

    home: Path = Field(Path(".gpuplace"), description="working folder: tables, and by default the state "
                                                      "database and the MLflow store")
    database_url: str = Field("", description="SQLAlchemy URL of the state database; default a SQLite file "
                                              "state.db in GPUPLACE_HOME. PostgreSQL: postgresql+psycopg://...")
    mlflow_uri: str = Field("", description="MLflow tracking/registry URI; default the SQLite store in GPUPLACE_HOME")
    model_name: str = "gpuplace-estimators"
    model_alias: str = "champion"
    prediction_cache_rows: int = Field(
        50_000, ge=0, description="answers the estimator keeps per target for job descriptions seen again; "
                                  "0 = ask the model every time")
    model_poll_s: float = Field(60.0, ge=0.0, description="how often to look for a new champion; 0 = never "
                                                         "(a registry unreachable while no model answers is "
                                                         "retried regardless)")
    cluster: str = Field("pai", description="cluster loaded into an empty database: a shipped name or a file")
    topology: str = Field("", description="topology YAML for that cluster (default: the derived rule)")
    policy: str = Field("liquid", description="default online placement policy")
    writer: Literal["auto", "loop", "thread"] = Field(
        "auto", description="where placements and releases are group-committed: on the event loop or in a "
                            "writer thread; auto: on the loop for SQLite, in a thread for a database server")
    preemption: bool = Field(True, description="let the scheduler preempt opportunistic, lower-priority and "
                                               "borrowing jobs for a job within its queue's guarantee")
    prescheduling_horizon_s: float = Field(0.0, ge=0.0, le=30 * 86_400, description=(
        "reserve the place of a running job estimated to end within this many seconds for a waiting job; 0 = off"))
    opportunistic_after_s: float | None = Field(None, ge=0.0, allow_inf_nan=False, description=(
        "a guaranteed job that has waited this many seconds over its queue's quota, or behind a reservation it "
        "would delay, may start opportunistically: on idle GPUs, preempted first (AntMan); unset = never"))
    api_keys: str = Field("", description="comma-separated API keys for mutating endpoints; empty = no auth")
    protect_reads: bool = Field(False, description="require an API key for read endpoints too")
    max_body_bytes: int = Field(1_000_000, ge=1024)
    extender_max_body_bytes: int = Field(
        128 * 2**20, ge=1024, description="larger request bodies get 413 on the extender's paths (/k8s/extender/), "
                                          "on either listener: a NodeList of 5,000 nodes of 20 KB each "
                                          "(nodeCacheCapable: false) fits the default")
    otel: bool = Field(False, description="FastAPI's OpenTelemetry spans, metrics and logs (for an OTel SDK the "
                                          "deployment configures); off by default: /metrics serves Prometheus")
    extender_port: int = Field(0, ge=0, le=65535, description="a second listener, for kube-scheduler's extender "
                               "calls only: HTTPS with a client certificate required; 0 = none")
    extender_tls_cert: str = Field("", description="that listener's certificate (PEM)")
    extender_tls_key: str = Field("", description="that listener's private key (PEM)")
    extender_client_ca: str = Field("", description="CA (PEM) whose client certificates that listener accepts")
    kube_api: str = Field("", description="Kubernetes API server URL for the extender's bind and for following "
                                          "the cluster (in a cluster: https://kubernetes.default.svc)")
    gang_wait_s: float = Field(60.0, gt=0, le=3600, description=(
        "how long a gang's reservation waits for all its members' binds (at most; a PodGroup's "
        "scheduleTimeoutSeconds may shorten it); kube-scheduler's extender httpTimeout must be longer"))
    kube_token_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    kube_ca_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    kube_follow: bool = Field(False, description="follow the Kubernetes cluster: its nodes as the cluster, its pods' "
                                                 "reservations released when they end, pods bound by other "
                                                 "schedulers counted (GPUPLACE_KUBE_API, else in-cluster or "
                                                 "kubeconfig)")
    kube_gpu_type_label: str = Field("nvidia.com/gpu.product", description="the node label whose value is a "
                                                                           "followed node's GPU type")

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        self.home.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{(self.home / 'state.db').resolve()}"

    def resolved_mlflow_uri(self) -> str:
        return self.mlflow_uri or f"sqlite:///{(self.home / 'mlflow.db').resolve()}"

    def accepted_keys(self) -> list[str]:
        return [k.strip() for k in self.api_keys.split(",") if k.strip()]
