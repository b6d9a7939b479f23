"""A typed client of the gpuplace REST API, blocking (:class:`Client`) and asyncio (:class:`AsyncClient`).

One method per operation of ``/openapi.json`` (:data:`OPERATIONS` maps each operation id to its method),
answering with the service's own response models (``service.http.responses``); request bodies are the
service's request models (``service.http.schemas``) or their JSON as dicts. An error status raises
:class:`ApiError` (status, title, detail, and the field a 422 refused); no answer raises
:class:`ServiceUnreachable`, a :class:`ConnectionError` naming the URL. Nothing is retried: a placement
or a submission is not idempotent.

    with Client("http://127.0.0.1:8000", api_key="secret") as api:
        decision = api.place({"job_id": "resnet-1", "tasks": [{"instances": 2, "gpu": 1}]})
"""

from gpuplace.client.asynchronous import AsyncClient
from gpuplace.client.errors import ApiError, ClientError, ServiceUnreachable
from gpuplace.client.operations import NOT_CALLED, OPERATIONS, JobEvent, Operation
from gpuplace.client.sync import Client

__all__ = ["NOT_CALLED", "OPERATIONS", "ApiError", "AsyncClient", "Client", "ClientError", "JobEvent", "Operation",
           "ServiceUnreachable"]
