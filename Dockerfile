# syntax=docker/dockerfile:1
# gpuplace image: the runtime lock (no test or lint tools), gpuplace installed as a wheel (not editable,
# so the image does not depend on a source tree), the shipped real data, and a non-root user.

FROM python:3.11-slim AS build
RUN pip install --no-cache-dir uv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service service
COPY models models
COPY placement placement
COPY training training
COPY gpuplace gpuplace
RUN uv build --wheel --out-dir /wheels .

FROM python:3.11-slim
# LightGBM's wheel links OpenMP dynamically (libgomp.so.1), which the slim image does not carry.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.lock /tmp/requirements.lock
# uv is borrowed from the build stage for the installs only; it does not stay in the image.
RUN --mount=from=build,source=/usr/local/bin/uv,target=/usr/local/bin/uv \
    uv pip install --system --no-cache --compile-bytecode -r /tmp/requirements.lock
RUN --mount=from=build,source=/usr/local/bin/uv,target=/usr/local/bin/uv \
    --mount=from=build,source=/wheels,target=/wheels \
    uv pip install --system --no-cache --compile-bytecode --no-deps /wheels/gpuplace-*.whl
COPY data /app/data
# The volumes' mount points exist in the image owned by the service user, so that Docker's named volumes
# start out writable by it.
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/gpuplace --shell /usr/sbin/nologin gpuplace \
    && mkdir -p /var/lib/gpuplace /var/lib/mlflow/artifacts \
    && chown -R gpuplace:gpuplace /var/lib/gpuplace /var/lib/mlflow
# The installed package lives in site-packages, away from the data: GPUPLACE_DATA_DIR says where it is.
# The placement kernels' compiled code is cached in the state volume (site-packages is not writable).
ENV GPUPLACE_HOME=/var/lib/gpuplace \
    GPUPLACE_DATA_DIR=/app/data \
    NUMBA_CACHE_DIR=/var/lib/gpuplace/.numba \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/gpuplace
USER gpuplace
VOLUME /var/lib/gpuplace
ENTRYPOINT ["gpuplace"]
CMD ["quickstart"]
