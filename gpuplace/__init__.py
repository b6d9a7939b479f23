"""gpuplace for programs that talk to a running service: :mod:`gpuplace.client`, a typed client of its REST
API (sync and async) that answers with the service's own response models."""
