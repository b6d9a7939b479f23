# gpuplace image: the pinned dependencies, the code and the shipped real data.
FROM python:3.11-slim
WORKDIR /app
RUN pip install --no-cache-dir uv
COPY requirements.lock ./
RUN uv pip install --system --no-cache -r requirements.lock
COPY . .
RUN uv pip install --system --no-cache --no-deps -e .
ENV GPUPLACE_HOME=/var/lib/gpuplace
VOLUME /var/lib/gpuplace
ENTRYPOINT ["gpuplace"]
CMD ["quickstart"]
