"""The face of gpuplace: the REST service (``http``), the Kubernetes scheduler extender (``k8s``), the
command line (``cli``), and what they share: the scheduling cycle, the state store, the estimator."""
