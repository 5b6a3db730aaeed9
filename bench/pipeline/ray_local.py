"""The Ray executor against the local executor on this machine, measured in the same run, one after the other.

    python bench/pipeline/ray_local.py sample                    # csts-pipeline run --dataset sample, both executors
    python bench/pipeline/ray_local.py scale --fraction 0.1      # bench/mine/scale.py's synthetic COCO embed output:
    mine, filter python bench/pipeline/ray_local.py embed --fraction 0.02     # bench/pipeline/e2e.py's COCO-shaped
    images: embed (ViT-B/32)

Every stage runs as its own CLI process with `--force` (a local Ray is started by each Ray process, as a user's
run would). Printed per stage and executor: wall time, the record's setup / prepare / process seconds, and the
ratio ray / local; then whether every table holds the same rows under both (sorted by their scalar columns and
compared exactly). What this measures on one machine is the Ray executor's overhead, not its scaling.
The filter's sentence-embedding cache (`<work_dir>/text_embeddings/`) is filled by an untimed local warm-up run
and copied to the Ray run, so that both timed filters do the same work: scoring, not encoding.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
EXECUTORS = ("local", "ray")


def cli(*args: str) -> float:
    """One CLI process; its wall time."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env |= {"TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-c", "from csts_pipeline.cli import main; main()", *args]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return time.perf_counter() - started


def timings(work: Path, stage: str) -> str:
    record = yaml.safe_load((work / stage / "_stage.json").read_text())
    t = record["timings"]
    return f"setup {t['setup']:6.1f}s  prepare {t['prepare']:6.1f}s  process {t['process']:6.1f}s"


def same_rows(a: Path, b: Path, stages: tuple[str, ...]) -> dict[str, bool]:
    """Per table: the same rows, compared exactly after sorting by every scalar column."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    equal = {}
    for stage in stages:
        for folder in sorted(p for p in (a / stage).iterdir() if p.is_dir() and not p.name.startswith("_")):
            left = ds.dataset(folder, format="parquet").to_table()
            right = ds.dataset(b / stage / folder.name, format="parquet").to_table()
            keys = [(f.name, "ascending") for f in left.schema if not pa.types.is_nested(f.type)]
            equal[f"{stage}/{folder.name}"] = left.sort_by(keys).equals(right.sort_by(keys))
    return equal


def compare(work: Path, stages: tuple[str, ...], manifests: dict[str, Path] | None, dataset: str | None) -> None:
    """Each stage under both executors (local first), then the tables compared."""
    for stage in stages:
        walls = {}
        for executor in EXECUTORS:
            out = work / executor
            given = ["--manifest", str(manifests[executor])] if manifests else ["--dataset", dataset, "--out", str(out)]
            if stage == "filter" and executor == "local" and not (out / "text_embeddings").is_dir():
                warm = cli(stage, *given, "--executor", executor, "--force")
                print(f"{stage:<7} {executor:<6} wall {warm:7.1f}s  (untimed warm-up: fills the sentence cache)")
            if stage == "filter" and executor == "ray":
                shutil.rmtree(out / "text_embeddings", ignore_errors=True)
                shutil.copytree(work / "local" / "text_embeddings", out / "text_embeddings")
            walls[executor] = cli(stage, *given, "--executor", executor, "--force")
            print(f"{stage:<7} {executor:<6} wall {walls[executor]:7.1f}s  {timings(out, stage)}", flush=True)
        print(f"{stage:<7} ray / local wall time: {walls['ray'] / walls['local']:.2f}", flush=True)
    equal = same_rows(work / "local", work / "ray", stages)
    print("same rows under both executors:", "yes" if all(equal.values()) else equal)


def scale_manifests(work: Path, fraction: float) -> dict[str, Path]:
    """bench/mine/scale.py's synthetic embed output (512-d, k=64, 5 real captions per image) in both work folders."""
    from bench.mine.scale import synthetic_embed_stage
    from bench.shared_data import COCO_VAL

    n_images = round(82_783 * fraction)
    manifests = {}
    for executor in EXECUTORS:
        if not (work / executor / "embed" / "_stage.json").is_file():
            synthetic_embed_stage(work / executor, n_images, 512)
        manifest = {
            "name": f"ray-local-{n_images}",
            "demo_encoders": True,
            "work_dir": str(work / executor),
            "data": {"format": "coco", "captions": str(COCO_VAL), "images": str(work)},
            "run": {"device": "cpu"},
            "mine": {"k": 64, "index": "exact"},
            "filter": {"max_iou": 0.12, "min_cosine": 0.4, "min_ratio": 0.7, "min_length": 50},
        }
        manifest["filter"] |= {"text_encoder": "packaged:all-MiniLM-L6-v2", "text_pooling": "model"}
        manifests[executor] = work / f"{executor}.yaml"
        manifests[executor].write_text(yaml.safe_dump(manifest))
    print(f"{n_images:,} synthetic images ({fraction:.0%} of COCO), k=64", flush=True)
    return manifests


def embed_manifests(work: Path, fraction: float, workers: int) -> dict[str, Path]:
    """bench/pipeline/e2e.py's COCO-shaped inputs (linked synthetic JPEGs, ViT-B/32 with random weights)."""
    from bench.pipeline import e2e

    n_images = max(65, round(e2e.COCO_TRAIN_IMAGES * fraction))
    e2e.write_captions(work / "captions.json", n_images)
    if not (work / "images").is_dir() or len(list((work / "images").iterdir())) != n_images:
        e2e.link_images(work / "images", work / "jpeg-pool", n_images, 2000)
    args = argparse.Namespace(fraction=fraction, device="cpu", workers=workers, text_batch_size=None)
    args.image_batch_size = None
    base = yaml.safe_load(e2e.write_manifest(work, args, work / "unused-text-encoder").read_text())
    manifests = {}
    for executor in EXECUTORS:
        manifests[executor] = work / f"{executor}.yaml"
        manifests[executor].write_text(yaml.safe_dump(base | {"work_dir": str(work / executor)}))
    print(f"{n_images:,} images ({fraction:.1%} of COCO), ViT-B/32 random weights, CPU", flush=True)
    return manifests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["sample", "scale", "embed"])
    parser.add_argument("--fraction", type=float, default=0.1, help="scale, embed: share of COCO's 82,783 images")
    parser.add_argument("--work", type=Path, default=Path("runs/bench-ray-local"))
    parser.add_argument("--workers", type=int, default=2, help="embed: embed.num_workers of the local executor")
    args = parser.parse_args()
    work = (args.work / args.what).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    if args.what == "sample":
        compare(work, ("embed", "mine", "filter"), None, "sample")
    elif args.what == "scale":
        compare(work, ("mine", "filter"), scale_manifests(work, args.fraction), None)
    else:
        compare(work, ("embed",), embed_manifests(work, args.fraction, args.workers), None)
    print(f"bench wall time {time.perf_counter() - started:.0f}s, load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
