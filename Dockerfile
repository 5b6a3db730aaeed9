# csts-pipeline on a CUDA box: torch's wheels bring their own CUDA libraries; the runtime image provides the
# driver-facing pieces (and nvJPEG for GPU decode). Build: docker build -t csts-pipeline .
# Run:   docker run --gpus all -v $PWD/data:/app/data -v $PWD/runs:/app/runs csts-pipeline run --dataset coco
FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

WORKDIR /app
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY csts_pipeline ./csts_pipeline
COPY pipeline ./pipeline
COPY stages ./stages
COPY manifests ./manifests
# hadolint ignore=DL3013
RUN pip install --no-cache-dir '.[gpu]'  # this project; its dependency ranges are in pyproject.toml

ENTRYPOINT ["csts-pipeline"]
CMD ["--help"]
