"""Following the Kubernetes cluster (``GPUPLACE_KUBE_FOLLOW``): nodes and pods, listed then watched.

``gpuplace serve`` starts a :class:`Follower` on its event loop when the setting is on. It talks to the
API server with lightkube: ``GPUPLACE_KUBE_API`` with the token and CA files of ``GPUPLACE_KUBE_TOKEN_FILE``
and ``GPUPLACE_KUBE_CA_FILE`` when set (the token file is read again when the server answers 401, as a
projected service-account token is renewed), else lightkube's own configuration: in a pod, its service
account; elsewhere ``KUBECONFIG`` or ``~/.kube/config``.

Each session lists the nodes, loads them as the cluster, lists the pods and reconciles the state with
them (``service.k8s.tally``), then watches both from the resource versions of their lists. The watches
run until something fails: a watch that the server ends (its timeout) is resumed from the last version
seen; a 410 Gone (the version is too old: an ``ERROR`` event with code 410, or an HTTP 410) starts a new
session at once, a list again; any other failure (the API server down, a refusal, the database) starts
one after a pause that doubles from 1 s to 30 s, and goes back to 1 s once a list succeeds. Objects
that cannot be read are logged and skipped. :attr:`Follower.state` (``/readyz``'s ``kubernetes``) says
where it stands: ``starting``, ``listing``, ``following N nodes, M pods``, or ``retrying in S s: why``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.core.exceptions import ApiError, NotReadyError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from service.k8s.tally import Tally
from service.runtime import Runtime
from service.settings import Settings

log = logging.getLogger(__name__)
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
"""Pauses before the next session after failures in a row."""
WATCH_TIMEOUT_S = 300
"""The server ends a watch after this long (lightkube resumes it from the last version seen)."""
LIST_CHUNK = 500
"""Objects per list request (lightkube asks for the rest with ``continue``), each within lightkube's 10 s."""

# raw JSON objects (dicts), not lightkube's typed models: an object the models cannot decode would end the
# list or the watch; read by hand, it is skipped alone
Node = create_global_resource("", "v1", "Node", "nodes")
Pod = create_namespaced_resource("", "v1", "Pod", "pods")


def connect(settings: Settings) -> AsyncClient:
    """A client of the API server the settings name (module docstring)."""
    if not settings.kube_api:
        return AsyncClient()
    ca, token = Path(settings.kube_ca_file), Path(settings.kube_token_file)
    config = KubeConfig.from_one(
        cluster=Cluster(server=settings.kube_api.rstrip("/"), certificate_auth=str(ca) if ca.is_file() else None),
        user=User(token_file=str(token) if token.is_file() else None))
    return AsyncClient(config)


def gone(exc: BaseException) -> bool:
    """Whether ``exc`` says the resource version watched from is too old (410 Gone)."""
    if isinstance(exc, ApiError) and exc.status is not None and exc.status.code == 410:
        return True
    return getattr(getattr(exc, "response", None), "status_code", None) == 410  # an HTTP 410


class Gone(Exception):
    """A watch's resource version is too old: list again."""


class Follower:
    """Lists and watches the nodes and pods of the cluster, for as long as it runs (module docstring)."""

    def __init__(self, rt: Runtime, make_client: Callable[[], AsyncClient] | None = None) -> None:
        self.rt = rt
        self.tally = Tally(rt, rt.settings.kube_gpu_type_label)
        self.make_client = make_client or (lambda: connect(rt.settings))
        self.state = "starting"
        self.sessions = 0
        """Lists that succeeded."""
        self._failures = 0
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def following(self) -> bool:
        return self.state.startswith("following")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name="kubernetes-follower")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.state = "stopped"

    async def run(self) -> None:
        """Sessions, one after the other, until cancelled."""
        while True:
            try:
                await self._session()
            except Gone:
                log.info("Kubernetes watch: resource version too old (410 Gone), listing again")
            except Exception as exc:
                pause = BACKOFF_S[min(self._failures, len(BACKOFF_S) - 1)]
                self._failures += 1
                self.state = f"retrying in {pause:.0f} s: {type(exc).__name__}: {exc}"[:500]
                log.warning("following Kubernetes failed, %s", self.state)
                await asyncio.sleep(pause)

    async def _session(self) -> None:
        client = self.make_client()
        try:
            self.state = "listing"
            nodes_version = await self._list_nodes(client)
            pods_version = await self._list_pods(client)
            self._failures = 0
            self.sessions += 1
            self._following()
            try:
                async with asyncio.TaskGroup() as tasks:
                    tasks.create_task(self._watch(client.watch(Node, resource_version=nodes_version,
                                                               server_timeout=WATCH_TIMEOUT_S), self._node))
                    tasks.create_task(self._watch(client.watch(Pod, namespace="*", resource_version=pods_version,
                                                               server_timeout=WATCH_TIMEOUT_S), self._pod))
                    tasks.create_task(self._load_nodes())
            except BaseExceptionGroup as group:
                raise _first(group) from None
        finally:
            await client.close()

    def _following(self) -> None:
        self.state = f"following {len(self.tally.nodes)} nodes, {len(self.tally.pods)} pods"

    async def _list_nodes(self, client: AsyncClient) -> str | None:
        listing = client.list(Node, chunk_size=LIST_CHUNK)
        self.tally.nodes_listed([node async for node in listing])
        await self.tally.sync_cluster()
        return _version(listing)

    async def _list_pods(self, client: AsyncClient) -> str | None:
        held = set(self.rt.store.cached().allocations)
        listing = client.list(Pod, namespace="*", chunk_size=LIST_CHUNK)
        await self.tally.pods_listed([pod async for pod in listing], held)
        return _version(listing)

    async def _watch(self, events: AsyncIterable[tuple[str, Any]],
                     seen: Callable[[str, dict[str, Any]], Awaitable[None]]) -> None:
        try:
            async for kind, obj in events:
                if kind != "BOOKMARK":
                    await seen(kind, dict(obj))
                    self._following()
        except Exception as exc:
            if gone(exc):
                raise Gone() from exc
            raise
        raise ConnectionError("the watch ended")  # lightkube resumes a watch the server ends: not reached

    async def _node(self, kind: str, node: dict[str, Any]) -> None:
        if self.tally.node_seen(kind, node):
            self._dirty.set()  # loaded by _load_nodes: a burst of node events is one cluster change

    async def _pod(self, kind: str, pod: dict[str, Any]) -> None:
        await self.tally.pod_seen(kind, pod)

    async def _load_nodes(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self.tally.sync_cluster()


def _version(listing: Any) -> str | None:
    try:
        version: str = listing.resourceVersion
    except NotReadyError:  # an empty version: watch from now
        return None
    return version


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    """The exception that ended a session: a 410 if there is one, else the first."""
    found = group.subgroup(lambda e: isinstance(e, Gone)) or group
    exc: BaseException = found
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
