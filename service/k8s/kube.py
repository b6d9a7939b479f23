"""The extender's calls to the Kubernetes API server (``GPUPLACE_KUBE_API``, with the token and CA files
of ``GPUPLACE_KUBE_TOKEN_FILE`` and ``GPUPLACE_KUBE_CA_FILE`` when they exist): blocking, for a thread.

A failure is an :class:`httpx.HTTPError` (the server unreachable, or an answer that is not a 2xx), an
answer that cannot be read a :class:`~service.k8s.pod.PodError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from service.k8s.pod import GANG_LABEL, PodError, object_at
from service.settings import Settings

POD_GROUPS = "/apis/scheduling.x-k8s.io/v1alpha1"
"""The coscheduling plugin's PodGroup API (``scheduling.x-k8s.io/v1alpha1``)."""


def client(settings: Settings) -> httpx.Client:
    token_file = Path(settings.kube_token_file)
    headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"} if token_file.is_file() else {}
    verify: Any = settings.kube_ca_file if Path(settings.kube_ca_file).is_file() else True
    return httpx.Client(base_url=settings.kube_api.rstrip("/"), headers=headers, verify=verify, timeout=10)


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"


def _json(reply: httpx.Response, what: str) -> dict[str, Any]:
    try:
        return object_at(reply.json(), what)
    except json.JSONDecodeError as exc:
        raise PodError(f"{what}: the API server's answer is not JSON: {reply.text[:80]!r}") from exc


def read_pod(settings: Settings, namespace: str, name: str, uid: str) -> dict[str, Any]:
    """The pod as the API server holds it; :class:`PodError` if it is another pod of the same name (a
    pod deleted and created again since kube-scheduler asked)."""
    with client(settings) as api:
        reply = api.get(pod_path(namespace, name))
        reply.raise_for_status()
    pod = _json(reply, "Pod")
    held = object_at(pod.get("metadata"), "Pod.metadata").get("uid")
    if held != uid:
        raise PodError(f"the API server's pod {namespace}/{name} has uid {held!r}, not {uid!r}")
    return pod


def read_pod_group(settings: Settings, namespace: str, name: str) -> dict[str, Any] | None:
    """The PodGroup ``namespace/name``; ``None`` if there is none (or no PodGroup API)."""
    with client(settings) as api:
        reply = api.get(f"{POD_GROUPS}/namespaces/{quote(namespace, safe='')}/podgroups/{quote(name, safe='')}")
    if reply.status_code == 404:
        return None
    reply.raise_for_status()
    return _json(reply, "PodGroup")


def group_pods(settings: Settings, namespace: str, name: str) -> list[dict[str, Any]]:
    """The pods of namespace ``namespace`` labelled as members of pod group ``name``."""
    with client(settings) as api:
        reply = api.get(f"/api/v1/namespaces/{quote(namespace, safe='')}/pods",
                        params={"labelSelector": f"{GANG_LABEL}={name}"})
        reply.raise_for_status()
    items = _json(reply, "PodList").get("items")
    return [object_at(p, "PodList.items[]") for p in items] if isinstance(items, list) else []


def annotate(settings: Settings, namespace: str, name: str, uid: str, annotations: dict[str, str]) -> None:
    """Add ``annotations`` to the pod (a JSON merge patch); the UID in the patch is a precondition: the API
    server refuses it (409) for another pod of the same name."""
    body = {"metadata": {"uid": uid, "annotations": annotations}}
    with client(settings) as api:
        api.patch(pod_path(namespace, name), content=json.dumps(body),
                  headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()


def bind(settings: Settings, namespace: str, name: str, uid: str, node: str) -> None:
    """Create the pod's Binding to ``node``."""
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    with client(settings) as api:
        api.post(f"{pod_path(namespace, name)}/binding", json=body).raise_for_status()
