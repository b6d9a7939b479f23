"""A Kubernetes API server of nodes and pods, in memory, over HTTP on 127.0.0.1 (aiohttp on a thread of its
own), speaking the list-and-watch protocol: ``GET /api/v1/nodes`` and ``/api/v1/pods`` list (``limit``
and ``continue`` honoured) with the list's ``resourceVersion``; with ``watch=true`` a chunked stream of
``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`` lines of the changes after the
``resourceVersion`` asked for, ended after ``timeoutSeconds``. :meth:`FakeKubeApi.outage` holds the
changes back and then compacts the history, as an etcd compaction does: an open watch gets an ``ERROR``
event with code 410 (or is simply closed), and a watch from an older version is an HTTP 410. A pod is
read with ``GET /api/v1/namespaces/{ns}/pods/{name}``, annotated with a JSON merge ``PATCH`` (a UID in it
is a precondition) and bound with a ``POST`` of its ``binding``."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections import Counter
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

Made = TypeVar("Made")
KINDS = {"nodes": "Node", "pods": "Pod"}


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def merged(target: Any, patch: Any) -> Any:
    """``target`` with the JSON merge patch ``patch`` applied (RFC 7386)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


@dataclass(frozen=True)
class Event:
    version: int
    kind: str
    type: str
    object: dict[str, Any]


class FakeKubeApi:
    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"nodes": {}, "pods": {}}
        self.history: list[Event] = []
        self.version = 1000
        self.oldest = 0
        """Versions before this one are compacted: a watch from one of them is a 410."""
        self.lists: Counter[str] = Counter()
        self.gone: Counter[str] = Counter()
        """410s answered, by kind."""
        self.paused = False
        self.epoch = 0
        self.error_event_for: tuple[str, ...] = ()
        self.closing = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-kube-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeKubeApi:
        self._thread.start()
        self.port = self._call(self._start())
        return self

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _call(self, coro: Coroutine[Any, Any, Made]) -> Made:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _start(self) -> int:
        self._changed = asyncio.Condition()
        app = web.Application()
        app.add_routes([web.get("/api/v1/nodes", self._nodes), web.get("/api/v1/pods", self._pods),
                        web.get("/api/v1/namespaces/{ns}/pods/{name}", self._get_pod),
                        web.patch("/api/v1/namespaces/{ns}/pods/{name}", self._patch_pod),
                        web.post("/api/v1/namespaces/{ns}/pods/{name}/binding", self._bind)])
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        return int(self._runner.addresses[0][1])

    async def _stop(self) -> None:
        async with self._changed:
            self.closing = True
            self._changed.notify_all()
        await self._runner.cleanup()

    # what a test does

    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace ``obj`` (an ADDED or MODIFIED event); the object as stored."""
        return self._call(self._put(kind, copy.deepcopy(obj)))

    def delete(self, kind: str, key: str) -> None:
        """Delete the object ``key`` (a node's name, a pod's ``namespace/name``): a DELETED event."""
        self._call(self._delete(kind, key))

    def get(self, kind: str, key: str) -> dict[str, Any]:
        return copy.deepcopy(self.objects[kind][key])

    @contextmanager
    def outage(self, error_event_for: tuple[str, ...] = ("nodes",)) -> Iterator[None]:
        """Changes made within are not streamed; at the end the history is compacted: open watches of
        ``error_event_for`` get an ERROR event with code 410, the others are closed (and their next watch,
        from the version they had seen, is an HTTP 410)."""
        self._call(self._pause())
        yield
        self._call(self._compact(error_event_for))

    async def _pause(self) -> None:
        self.paused = True

    async def _compact(self, error_event_for: tuple[str, ...]) -> None:
        async with self._changed:
            self.paused, self.oldest, self.history = False, self.version, []
            self.epoch, self.error_event_for = self.epoch + 1, error_event_for
            self._changed.notify_all()

    async def _record(self, kind: str, type_: str, obj: dict[str, Any]) -> dict[str, Any]:
        async with self._changed:
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.history.append(Event(self.version, kind, type_, copy.deepcopy(obj)))
            self._changed.notify_all()
        return obj

    async def _put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        key = meta["name"] if kind == "nodes" else f"{meta['namespace']}/{meta['name']}"
        type_ = "MODIFIED" if key in self.objects[kind] else "ADDED"
        self.objects[kind][key] = obj
        return copy.deepcopy(await self._record(kind, type_, obj))

    async def _delete(self, kind: str, key: str) -> None:
        await self._record(kind, "DELETED", self.objects[kind].pop(key))

    # the API

    async def _nodes(self, request: web.Request) -> web.StreamResponse:
        return await self._list_or_watch(request, "nodes")

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        return await self._list_or_watch(request, "pods")

    async def _list_or_watch(self, request: web.Request, kind: str) -> web.StreamResponse:
        if request.query.get("watch") in ("true", "1"):
            return await self._watch(request, kind)
        self.lists[kind] += 1
        items = [copy.deepcopy(self.objects[kind][k]) for k in sorted(self.objects[kind])]
        start = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or len(items) or 1)
        page = items[start:start + limit]
        more = start + limit < len(items)
        meta = {"resourceVersion": str(self.version), **({"continue": str(start + limit)} if more else {})}
        return web.json_response({"kind": f"{KINDS[kind]}List", "apiVersion": "v1", "metadata": meta,
                                  "items": page})

    async def _watch(self, request: web.Request, kind: str) -> web.StreamResponse:
        asked = request.query.get("resourceVersion")
        sent = int(asked) if asked else self.version
        if sent < self.oldest:
            self.gone[kind] += 1
            return web.json_response(status(410, "Expired", f"too old resource version: {sent} ({self.oldest})"),
                                     status=410)
        reply = web.StreamResponse(headers={"Content-Type": "application/json"})
        reply.enable_chunked_encoding()
        await reply.prepare(request)
        epoch, loop = self.epoch, asyncio.get_running_loop()
        deadline = loop.time() + float(request.query.get("timeoutSeconds") or 300)
        bookmark = {"kind": KINDS[kind], "apiVersion": "v1", "metadata": {"resourceVersion": str(sent)}}
        await reply.write(json.dumps({"type": "BOOKMARK", "object": bookmark}).encode() + b"\n")
        while True:
            async with self._changed:
                while True:
                    if self.closing:
                        return reply
                    if self.epoch != epoch:
                        if kind in self.error_event_for:
                            self.gone[kind] += 1
                            error = status(410, "Expired", f"too old resource version: {sent} ({self.oldest})")
                            await reply.write(json.dumps({"type": "ERROR", "object": error}).encode() + b"\n")
                        return reply
                    pending = [] if self.paused else [e for e in self.history if e.kind == kind and e.version > sent]
                    if pending:
                        break
                    try:
                        await asyncio.wait_for(self._changed.wait(), timeout=max(deadline - loop.time(), 0.0))
                    except TimeoutError:
                        return reply
            for event in pending:
                await reply.write(json.dumps({"type": event.type, "object": event.object}).encode() + b"\n")
                sent = event.version

    async def _get_pod(self, request: web.Request) -> web.Response:
        pod = self.objects["pods"].get(f"{request.match_info['ns']}/{request.match_info['name']}")
        if pod is None:
            return web.json_response(status(404, "NotFound", "pods not found"), status=404)
        return web.json_response(pod)

    async def _patch_pod(self, request: web.Request) -> web.Response:
        key = f"{request.match_info['ns']}/{request.match_info['name']}"
        body = await request.json()
        pod = copy.deepcopy(self.objects["pods"].get(key))
        if pod is None:
            return web.json_response(status(404, "NotFound", "pods not found"), status=404)
        if body.get("metadata", {}).get("uid", pod["metadata"]["uid"]) != pod["metadata"]["uid"]:
            return web.json_response(status(409, "Conflict", "Precondition failed: UID"), status=409)
        return web.json_response(await self._put("pods", merged(pod, body)))

    async def _bind(self, request: web.Request) -> web.Response:
        key = f"{request.match_info['ns']}/{request.match_info['name']}"
        body = await request.json()
        pod = copy.deepcopy(self.objects["pods"].get(key))
        if pod is None or pod["metadata"]["uid"] != body["metadata"].get("uid", pod["metadata"]["uid"]):
            return web.json_response(status(404, "NotFound", "pods not found"), status=404)
        pod["spec"]["nodeName"] = body["target"]["name"]
        pod["status"]["conditions"] = [{"lastProbeTime": None, "lastTransitionTime": "2025-03-05T10:00:00Z",
                                        "status": "True", "type": "PodScheduled"}]
        await self._put("pods", pod)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                  "code": 201}, status=201)
