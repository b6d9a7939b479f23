"""The face of gpuplace: the command line and (later) the REST service."""
