"""The extender's answers as kube-scheduler reads them (``k8s.io/kube-scheduler/extender/v1``, Go field
names, no json tags), declared so that ``/openapi.json`` describes them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ExtenderFilterResult(BaseModel):
    """Filter's answer: the nodes that can host the pod, as the request gave them (the full ``Nodes``
    list, or ``NodeNames`` when the extender is node-cache capable), and why the others cannot."""

    Nodes: dict[str, Any] | None = Field(description="the NodeList of the nodes that pass (null with NodeNames)")
    NodeNames: list[str] | None = Field(description="names of the nodes that pass (null with Nodes)")
    FailedNodes: dict[str, str] = Field(description="node -> why it cannot host the pod now")
    FailedAndUnresolvableNodes: dict[str, str] = Field(
        description="node -> why it could not host the pod even empty (preemption cannot help)")
    Error: str = Field(description="empty, or why the pod could not be judged at all")


class HostPriority(BaseModel):
    """Prioritize's answer, one per node asked about."""

    Host: str
    Score: int = Field(ge=0, le=10, description="the liquid policy's bounded score x 10 (0 where it cannot fit)")


class ExtenderBindingResult(BaseModel):
    """Bind's answer: empty ``Error`` when the pod's resources are reserved and the Binding created."""

    Error: str
