"""The Kubernetes manifests (deploy/kubernetes): valid against Kubernetes' own schemas, and agreeing with the
service they deploy (settings, ports, the extender's routes, RBAC for the API calls it makes, certificates
for the names the scheduler calls)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from service.settings import Settings

FOLDER = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
KUBERNETES = "1.31.0"
"""The oldest Kubernetes minor the manifests are meant for (the scheduler image's)."""
CUSTOM = {"cert-manager.io/v1", "monitoring.coreos.com/v1"}
"""API groups of custom resources (cert-manager, Prometheus Operator): not in Kubernetes' schemas."""


def documents() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    found = []
    for name in kustomization["resources"]:
        found += [d for d in yaml.safe_load_all((FOLDER / name).read_text()) if d]
    return found


def one(kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, (kind, name, len(matches))
    return matches[0]


def scheduler_config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(one("ConfigMap", "gpuplace-scheduler")["data"]["scheduler-config.yaml"])
    return loaded


def test_the_kustomization_lists_every_manifest_of_the_folder() -> None:
    listed = set(yaml.safe_load((FOLDER / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in FOLDER.glob("*.yaml")} - {"kustomization.yaml"}


@pytest.mark.parametrize("index", range(len(documents())))
def test_each_object_is_valid_against_the_kubernetes_schema(index: int) -> None:
    document = documents()[index]
    if document["apiVersion"] in CUSTOM:
        assert document["spec"], document["metadata"]["name"]
        return
    kubernetes_validate.validate(document, KUBERNETES, strict=True)  # raises naming the path and the value


def test_the_service_settings_are_fields_the_service_reads() -> None:
    deployment = one("Deployment", "gpuplace")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    names = set(one("ConfigMap", "gpuplace")["data"]) | {e["name"] for e in container["env"]}
    known = {f"GPUPLACE_{field.upper()}" for field in Settings.model_fields}
    assert names <= known, names - known


def test_the_scheduler_calls_the_extender_listener_through_the_service() -> None:
    config = scheduler_config()
    assert config["kind"] == "KubeSchedulerConfiguration" and config["profiles"][0]["schedulerName"] == "gpuplace"
    extender = config["extenders"][0]
    url = urlsplit(extender["urlPrefix"])
    service = one("Service", "gpuplace")
    meta = service["metadata"]
    assert url.scheme == "https" and url.hostname == f"{meta['name']}.{meta['namespace']}.svc"
    port = next(p for p in service["spec"]["ports"] if p["port"] == url.port)
    container = one("Deployment", "gpuplace")["spec"]["template"]["spec"]["containers"][0]
    listener = next(p for p in container["ports"] if p["name"] == port["targetPort"])
    assert str(listener["containerPort"]) == one("ConfigMap", "gpuplace")["data"]["GPUPLACE_EXTENDER_PORT"]
    # the verbs are the extender's routes under the prefix the listener serves
    from service.k8s.extender import router
    from service.k8s.listener import PREFIX

    assert url.path + "/" == PREFIX
    routes = {route.path for route in router.routes}  # type: ignore[attr-defined]
    for verb in ("filterVerb", "prioritizeVerb", "bindVerb"):
        assert PREFIX + extender[verb] in routes, extender[verb]
    assert extender["nodeCacheCapable"] is True  # node names only: a NodeList of 1,000 nodes is megabytes


def test_the_scheduler_sends_every_pod_the_extender_places_and_waits_for_a_gang() -> None:
    from service.k8s.pod import GPU_RESOURCE, SHARE_RESOURCE

    extender = scheduler_config()["extenders"][0]
    managed = {r["name"] for r in extender["managedResources"]}
    assert managed == {GPU_RESOURCE, SHARE_RESOURCE}  # a pod asking neither never reaches the extender
    # a gang member's bind is held up to the gang's wait: kube-scheduler must wait longer for the answer
    wait_s = float(one("ConfigMap", "gpuplace")["data"].get("GPUPLACE_GANG_WAIT_S", Settings().gang_wait_s))
    seconds = re.fullmatch(r"(\d+)s", extender["httpTimeout"])
    assert seconds is not None and int(seconds[1]) > wait_s


def test_the_certificates_cover_what_each_side_checks() -> None:
    extender = scheduler_config()["extenders"][0]
    host = urlsplit(extender["urlPrefix"]).hostname
    server = one("Certificate", "gpuplace-extender")["spec"]
    assert host in server["dnsNames"] and "server auth" in server["usages"]
    client = one("Certificate", "gpuplace-scheduler-client")["spec"]
    assert "client auth" in client["usages"] and server["issuerRef"] == client["issuerRef"]
    # the listener reads its key pair and the CA from the server certificate's secret ...
    mounts = _mounts("gpuplace")
    data = one("ConfigMap", "gpuplace")["data"]
    for setting in ("GPUPLACE_EXTENDER_TLS_CERT", "GPUPLACE_EXTENDER_TLS_KEY", "GPUPLACE_EXTENDER_CLIENT_CA"):
        folder, _ = data[setting].rsplit("/", 1)
        assert mounts[folder] == server["secretName"], setting
    # ... and the scheduler its client key pair and the CA from the client certificate's secret
    scheduler_mounts = _mounts("gpuplace-scheduler")
    for key in ("certFile", "keyFile", "caFile"):
        folder, _ = extender["tlsConfig"][key].rsplit("/", 1)
        assert scheduler_mounts[folder] == client["secretName"], key


def _mounts(deployment: str) -> dict[str, str]:
    """Mount path -> secret or ConfigMap name, for the deployment's first container."""
    pod = one("Deployment", deployment)["spec"]["template"]["spec"]
    sources = {v["name"]: v.get("secret", {}).get("secretName") or v.get("configMap", {}).get("name")
               for v in pod["volumes"]}
    return {m["mountPath"]: sources[m["name"]] for m in pod["containers"][0]["volumeMounts"]}


def test_rbac_grants_the_calls_the_service_and_the_scheduler_make() -> None:
    rules = one("ClusterRole", "gpuplace")["rules"]

    def allowed(group: str, resource: str, verb: str) -> bool:
        return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)

    # bind: read the pod (UID, requests), create its Binding; following the cluster: list and watch
    for group, resource, verb in (("", "pods", "get"), ("", "pods/binding", "create"), ("", "pods", "list"),
                                  ("", "pods", "watch"), ("", "nodes", "list"), ("", "nodes", "watch")):
        assert allowed(group, resource, verb), (resource, verb)
    binding = one("ClusterRoleBinding", "gpuplace")
    pod = one("Deployment", "gpuplace")["spec"]["template"]["spec"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    scheduler = one("Deployment", "gpuplace-scheduler")["spec"]["template"]["spec"]
    roles = {d["roleRef"]["name"] for d in documents() if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
             and d["subjects"][0]["name"] == scheduler["serviceAccountName"]}
    assert {"system:kube-scheduler", "system:volume-scheduler"} <= roles
    election = scheduler_config()["leaderElection"]
    lease = one("Role", "gpuplace-scheduler-leader")
    assert lease["metadata"]["namespace"] == election["resourceNamespace"]
    assert "leases" in lease["rules"][0]["resources"]


def test_the_service_runs_as_the_image_user_with_probes_on_its_health_routes() -> None:
    pod = one("Deployment", "gpuplace")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 10001  # the Dockerfile's service user
    container = pod["containers"][0]
    assert container["args"][:1] == ["serve"] and container["args"][-2:] == ["--workers", "1"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    monitor = one("ServiceMonitor", "gpuplace")["spec"]
    assert monitor["endpoints"][0]["path"] == "/metrics"
    assert monitor["selector"]["matchLabels"].items() <= one("Service", "gpuplace")["metadata"]["labels"].items()
