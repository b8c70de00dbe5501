# The project's own image: the embedded KServe v2 server, Locust (master and workers) and the
# one-shot train/export job of compose.yaml. Installed exactly as the README says: scripts/setup.
#   docker build -t trainserve:local .
#   docker build --build-arg TORCH_INDEX_URL=<PyTorch's CPU wheel index> -t trainserve:local .   (smaller image)
# BASE_IMAGE: any Debian-like image with Python 3.11+, venv and useradd; where python:3.12-slim
# cannot be pulled, scripts/engine builds one with debootstrap (docs/compose.md).
ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}

# scripts/setup reads these: which torch, and from which index (empty = the default index).
ARG TORCH_SPEC=""
ARG TORCH_INDEX_URL=""

RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin trainserve \
    && mkdir -p /app /runs && chown trainserve:trainserve /app /runs
WORKDIR /app
USER trainserve

# Dependency metadata first, so a code change does not reinstall torch.
COPY --chown=trainserve:trainserve pyproject.toml README.md ./
COPY --chown=trainserve:trainserve scripts ./scripts
COPY --chown=trainserve:trainserve trainserve ./trainserve
COPY --chown=trainserve:trainserve train ./train
COPY --chown=trainserve:trainserve serve ./serve
COPY --chown=trainserve:trainserve loadtest ./loadtest
RUN scripts/setup \
    && rm -rf /home/trainserve/.cache/pip

ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1
# HTTP, gRPC, metrics (Triton's ports), Locust web UI
EXPOSE 8000 8001 8002 8089
CMD ["trainserve", "--help"]
