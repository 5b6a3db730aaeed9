# csts-pipeline on a CUDA box: torch's wheels bring their own CUDA libraries; the runtime image provides the
# driver-facing pieces (and nvJPEG for GPU decode). Build: docker build -t csts-pipeline .
# Run:   docker run --gpus all -v $PWD/data:/app/data -v $PWD/runs:/app/runs csts-pipeline run --dataset coco
# The image installs exactly the lock CI tests (requirements/lock-py312.txt: Ubuntu 24.04's Python 3.12), then the
# project's wheel without resolving anything; `.ci/check-wheel` builds that wheel from exactly the files copied here
# and checks every declared dependency is installed (but those requirements/overrides.txt leaves out on purpose).
FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

WORKDIR /app
COPY requirements/lock-py312.txt ./requirements/
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements/lock-py312.txt
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY csts_pipeline ./csts_pipeline
COPY manifests ./manifests
RUN pip install --no-cache-dir --no-deps --no-build-isolation .

ENTRYPOINT ["csts-pipeline"]
CMD ["--help"]
