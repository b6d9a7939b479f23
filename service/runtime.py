"""What every request handler shares: the state store, the estimator, the metrics, the API keys."""

from __future__ import annotations

import hmac
import math
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from placement import OnlinePolicy, PlacementConfig, SchedulingSettings, online_policy
from service.cycle import Cycle
from service.estimator import EstimatorHolder
from service.metrics import Metrics
from service.settings import Settings
from service.store import Planner, Store


@dataclass
class Runtime:
    settings: Settings
    store: Store
    estimator: EstimatorHolder
    metrics: Metrics = field(default_factory=Metrics)
    _policies: dict[str, OnlinePolicy] = field(default_factory=dict)
    cycle: Cycle = field(init=False)
    """Places, releases and completions, decided and group-committed (``service.cycle``)."""
    planner: Planner = field(init=False)
    """The scheduling passes' decider: the queues' jobs placed with the service's policy."""
    keys: tuple[bytes, ...] = field(init=False)
    """The accepted API keys (none: no auth)."""

    def __post_init__(self) -> None:
        _, policy = self.policy(None)
        patience = self.settings.opportunistic_after_s
        self.planner = Planner(policy, SchedulingSettings(
            preemption=self.settings.preemption, prescheduling_horizon_s=self.settings.prescheduling_horizon_s,
            opportunistic_after_s=math.inf if patience is None else patience), named=lambda name: self.policy(name)[1])
        self.cycle = Cycle(self.store, on_loop=None if self.settings.writer == "auto" else
                           self.settings.writer == "loop", decide=self.planner)
        self.keys = tuple(key.encode() for key in self.settings.accepted_keys())
        self.metrics.serve_state(self.store, self.planner)
        self.cycle.preemptions = self.metrics.preemption_counts()
        self.planner.observe = self.metrics.scheduling_pass.observe

    def policy(self, name: str | None) -> tuple[str, OnlinePolicy]:
        """The online policy ``name`` (default the service's); ``KeyError`` naming the known ones."""
        chosen = name or self.settings.policy
        if chosen not in self._policies:
            self._policies[chosen] = online_policy(chosen, PlacementConfig())
        return chosen, self._policies[chosen]


async def runtime(request: Request) -> Runtime:
    """A coroutine, as are the key checks: FastAPI would run a plain function in its thread pool, a
    thread hop per dependency per request."""
    return _runtime(request)


def _runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


RuntimeDep = Annotated[Runtime, Depends(runtime)]


CLIENT_CERTIFIED = "gpuplace.client_certified"
"""Set in the ASGI scope of a request that came in on the extender's listener, whose TLS handshake
required a client certificate signed by the configured CA (``service.k8s.listener``)."""


def _check_key(rt: Runtime, request: Request) -> None:
    """Refuse a request without an accepted API key, unless it was authenticated by its client
    certificate on the extender's listener (which serves nothing but the extender)."""
    keys = rt.keys
    if not keys or request.scope.get(CLIENT_CERTIFIED):
        return
    given = request.headers.get("x-api-key") or ""
    auth = request.headers.get("authorization", "")
    if not given and auth.lower().startswith("bearer "):
        given = auth[7:].strip()
    if not given:
        raise HTTPException(401, "missing API key: send it in the X-API-Key header (or Authorization: Bearer)",
                            headers={"WWW-Authenticate": "Bearer"})
    # constant-time: compare against every key, whatever matches first
    matched = [hmac.compare_digest(given.encode(), key) for key in keys]
    if not any(matched):
        raise HTTPException(403, "API key not accepted")


async def runtime_for_writes(request: Request) -> Runtime:
    """The runtime, for a mutating endpoint: once the request's API key has been accepted. One
    dependency for both, as FastAPI's per-dependency cost shows in the latency of the hot endpoints."""
    rt = _runtime(request)
    _check_key(rt, request)
    return rt


async def runtime_for_reads(request: Request) -> Runtime:
    """The runtime, for a read endpoint: a key is asked for only if ``protect_reads`` is set."""
    rt = _runtime(request)
    if rt.settings.protect_reads:
        _check_key(rt, request)
    return rt


WriteRuntime = Annotated[Runtime, Depends(runtime_for_writes)]
ReadRuntime = Annotated[Runtime, Depends(runtime_for_reads)]
