"""The mine -> filter path at COCO scale on this machine: how time and memory grow with the work.

    python bench/mine/scale.py                        # 82,783 synthetic images, k=64, at 10%, 30% and 100%
    python bench/mine/scale.py --fractions 0.1 --images 82783
    python bench/mine/scale.py --images 1000000 --fractions 1 --stages mine --captions-per-image 1   # approximate
    python bench/mine/scale.py --images 10000000 --fractions 1 --stages mine --memory-budget 8 --dtype float16 \
        --captions-per-image 1 [--resume]      # hours here: --resume goes on after an interruption

Synthetic image embeddings (512-d) stand in for CLIP's: by default the mixture of bench.mine.hard_data (continuous and
uneven, as hard for IVF as real embeddings), or with `--data clustered` the old 1,000 tight clusters; each synthetic
image carries the 5 real captions of a COCO val2017 image (../shared/data/coco/captions_val2017.json). Each
stage runs in its own process, so its peak memory (max RSS) is its own. Prints, per fraction and stage: wall
time, peak memory, candidate pairs and pairs/s (and for mine the index, its parameter and the measured recall@k),
then the growth between fractions. Vectors are generated shard by shard, so the bench itself stays small.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import yaml

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.schemas import CAPTIONS, EMBEDDINGS
from csts_pipeline.pipeline.shards import shard_name, write_table
from csts_pipeline.stages.embed.encoder import embeddings_table
from csts_pipeline.stages.embed.readers.datasets import read_coco

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `python bench/mine/scale.py` as well as `python -m bench.mine.scale`

from bench.shared_data import COCO_VAL  # noqa: E402


def clustered_shard(n: int, dim: int, seed: int, shard: int) -> np.ndarray:
    """Image-embedding-like rows around 1,000 seeded centres (as bench.mine.exact_topk), L2-normalised, one shard's
    worth."""
    centres = np.random.default_rng(seed).standard_normal((1000, dim)).astype(np.float32)
    rng = np.random.default_rng([seed, shard])
    vectors = centres[rng.integers(0, 1000, n)] + 0.6 * rng.standard_normal((n, dim), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def synthetic_embed_stage(
    work_dir: Path,
    n_images: int,
    dim: int,
    seed: int = 0,
    per_image: int = 5,
    data: str = "mixture",
    dtype: str = "float32",
) -> None:
    """An embed folder as the embed stage writes it (docs/schemas.md), for `n_images` synthetic images with
    `per_image` real captions each, vectors from `data` (mixture or clustered) stored as `dtype`."""
    from bench.mine.hard_data import mixture_shard

    folder = work_dir / "embed"
    params = {"synthetic": n_images, "dim": dim, "seed": seed, "data": data, "dtype": dtype}
    if OutputFolder("embed", folder, params, {}).up_to_date():  # generated before, whole: 10M images take minutes
        return
    generate = mixture_shard if data == "mixture" else clustered_shard
    corpus = read_coco(COCO_VAL)
    by_image: dict[int, list[str]] = {}
    for image_id, text in zip(corpus.caption_image_ids, corpus.captions):
        by_image.setdefault(image_id, []).append(text)
    sources = [texts[:per_image] for texts in by_image.values() if len(texts) >= per_image]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(sources), n_images)
    image_ids = np.arange(n_images, dtype=np.int64)
    per_shard = 10_000
    for shard, lo in enumerate(range(0, n_images, per_shard)):
        hi = min(n_images, lo + per_shard)
        vectors = generate(hi - lo, dim, seed, shard)
        table = embeddings_table(image_ids[lo:hi], [f"{i:012d}.jpg" for i in image_ids[lo:hi]], vectors, dtype)
        write_table(table, folder / EMBEDDINGS / shard_name(shard))
    texts = [text for pick in picks for text in sources[pick]]
    write_table(
        pa.table(
            {
                "caption_id": np.arange(len(texts), dtype=np.int64),
                "image_id": np.repeat(image_ids, per_image),
                "caption": texts,
            }
        ),
        folder / CAPTIONS / shard_name(0),
    )
    OutputFolder("embed", folder, params, {}).record_in_place({"images_embedded": n_images})


HOLDOUT_SHARD = 10**9  # the generator's shard number of the held-out queries: never a shard of the base


def holdout_queries(n: int, dim: int, data: str, dtype: str) -> np.ndarray:
    """`n` vectors from the base's generator that are not in the base, rounded to the stored dtype as the base is."""
    from bench.mine.hard_data import mixture_shard

    generate = mixture_shard if data == "mixture" else clustered_shard
    return generate(n, dim, 0, HOLDOUT_SHARD).astype(dtype).astype(np.float32)


def measure_holdout(queries: np.ndarray) -> None:
    """Make mine's searcher also report recall@k on `queries` (never added to the index) at its tuned parameter,
    against their exact top-k over the base (streamed in blocks), beside the record's self-excluded figure."""
    from csts_pipeline.stages.mine import search

    build = search.build_searcher

    def build_and_measure(plan, shards, config, device, folder=None):
        from csts_pipeline.stages.mine.ann import holdout_recall

        searcher, record = build(plan, shards, config, device, folder)
        if record.get("index") != "exact":
            started = time.perf_counter()
            record["holdout_recall_at_k"] = round(holdout_recall(searcher, shards, queries, config.k), 4)
            record |= {"holdout_queries": len(queries), "holdout_seconds": round(time.perf_counter() - started, 1)}
        return searcher, record

    search.build_searcher = build_and_measure


def _run_stage(
    stage: str, manifest_path: str, queue: mp.Queue, holdout: np.ndarray | None = None, resume: bool = False
) -> None:
    from importlib import import_module

    from csts_pipeline.pipeline.manifest import load_manifest

    if holdout is not None:
        measure_holdout(holdout)
    started = time.perf_counter()
    record = import_module(f"csts_pipeline.stages.{stage}.stage").run(
        load_manifest(Path(manifest_path)), force=not resume
    )
    seconds = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(
        {
            "seconds": seconds,
            "peak_mib": peak_mib,
            "counts": record["counts"],
            "timings": record["timings"],
            "search": record.get("search"),
        }
    )


def run_stage(stage: str, manifest_path: Path, holdout: np.ndarray | None = None, resume: bool = False) -> dict:
    """One stage in a fresh process, so that its peak memory is measured alone; `resume`: an interrupted run of
    the same stage goes on from where it stopped (mine: its saved index and finished query blocks)."""
    queue: mp.Queue = mp.get_context("spawn").Queue()
    args = (stage, str(manifest_path), queue, holdout, resume)
    process = mp.get_context("spawn").Process(target=_run_stage, args=args)
    process.start()
    result = queue.get()
    process.join()
    return result


def print_pair_pass(fraction: float, n_images: int, timings: dict, candidates: int) -> None:
    """The filter's pair pass alone (the executor's `process` timing: read every candidates shard, score, write
    the kept shards), apart from its setup (caption features and encoding the distinct texts)."""
    seconds = timings["process"]
    print(
        f"{fraction:>5.0%} {n_images:>6} images  filter pair pass (Parquet read + score + write) {seconds:8.2f}s  "
        f"{candidates / seconds:12,.0f} pairs/s; setup (features + text encoding) {timings['setup']:.1f}s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=82_783)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--work", type=Path, default=Path("runs/bench-scale"))
    parser.add_argument("--stages", nargs="+", default=["mine", "filter"], choices=["mine", "filter"])
    parser.add_argument("--captions-per-image", type=int, default=5)
    parser.add_argument("--index", default="auto", choices=["auto", "exact", "ivf", "ivf_sq8", "ivf_pq", "hnsw"])
    parser.add_argument("--memory-budget", type=float, default=8.0, help="mine.memory_budget, GiB")
    parser.add_argument("--knn", default="faiss", choices=["faiss", "torch"], help="mine.knn: the exact search")
    parser.add_argument("--rerank", type=int, default=8, help="mine.rerank: candidates re-ranked are this x k")
    parser.add_argument("--recall-target", type=float, default=0.95, help="mine.recall_target (on the sample)")
    parser.add_argument("--device", default="auto", help="run.device (mine.knn=torch searches there)")
    parser.add_argument("--data", default="mixture", choices=["mixture", "clustered"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    parser.add_argument("--holdout", type=int, default=1000, help="held-out queries for mine's independent recall")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on with an interrupted run of the same command (else each stage starts afresh)",
    )
    args = parser.parse_args()

    rows = []
    total_started = time.perf_counter()
    for fraction in args.fractions:
        n_images = round(args.images * fraction)
        work_dir = (args.work / f"{n_images}").resolve()
        synthetic_embed_stage(work_dir, n_images, args.dim, 0, args.captions_per_image, args.data, args.dtype)
        manifest = {
            "name": f"scale-{n_images}",
            "demo_encoders": True,
            "work_dir": str(work_dir),
            "data": {"format": "coco", "captions": str(COCO_VAL), "images": str(work_dir)},
            "run": {"device": args.device},
            "mine": {
                "k": args.k,
                "index": args.index,
                "memory_budget": args.memory_budget,
                "knn": args.knn,
                "rerank": args.rerank,
                "recall_target": args.recall_target,
            },
            "filter": {
                "max_iou": 0.12,
                "min_cosine": 0.4,
                "min_ratio": 0.7,
                "min_length": 50,
                "text_encoder": "packaged:all-MiniLM-L6-v2",
                "text_pooling": "model",
            },
        }
        manifest_path = work_dir / "manifest.yaml"
        manifest_path.write_text(yaml.safe_dump(manifest))
        holdout = holdout_queries(args.holdout, args.dim, args.data, args.dtype) if args.holdout else None
        for stage in args.stages:
            result = run_stage(stage, manifest_path, holdout if stage == "mine" else None, args.resume)
            candidates = result["counts"].get("candidate_pairs") or result["counts"].get("candidates")
            rows.append(
                {"fraction": fraction, "images": n_images, "stage": stage, **result, "candidate_pairs": candidates}
            )
            print(
                f"{fraction:>5.0%} {n_images:>6} images  {stage:<6} {result['seconds']:8.1f}s  "
                f"peak {result['peak_mib']:8.0f} MiB  candidate pairs {candidates:>11,}  "
                f"{candidates / result['seconds']:12,.0f} pairs/s",
                flush=True,
            )
            if stage == "filter":
                print_pair_pass(fraction, n_images, result["timings"], candidates)
            if result.get("search"):
                print(f"       search: {_describe_search(result['search'])}", flush=True)
    print(f"total wall time {time.perf_counter() - total_started:.0f}s")
    base = {row["stage"]: row for row in rows if row["fraction"] == args.fractions[0]}
    for row in rows[len(args.stages) :]:
        first = base[row["stage"]]
        print(
            f"growth {row['stage']:<6} {first['fraction']:.0%} -> {row['fraction']:.0%}: pairs x"
            f"{row['candidate_pairs'] / first['candidate_pairs']:.2f}, time x{row['seconds'] / first['seconds']:.2f}, "
            f"peak memory x{row['peak_mib'] / first['peak_mib']:.2f}"
        )
    (args.work / "scale.json").write_text(json.dumps(rows, indent=2, default=str))


def _describe_search(search: dict) -> str:
    """One line of mine's `search` record: index, tuned parameter, recall@k against exact on the sample."""
    if search.get("index") == "exact":
        return f"exact ({search.get('knn_backend')})"
    knob = "nprobe" if "nprobe" in search else "efSearch"
    budget = search.get("budget", {})
    holdout = (
        f", recall@k={search['holdout_recall_at_k']} on {search['holdout_queries']} held-out queries"
        if "holdout_recall_at_k" in search
        else ""
    )
    return (
        f"{search['index']} {knob}={search[knob]} recall@k={search['recall_at_k']} on {search['recall_sample']} "
        f"sample rows (self excluded){holdout} (build {search['build_seconds']}s, tune {search['tune_seconds']}s, "
        f"search {search.get('search_seconds')}s over every run, {search.get('blocks_resumed', 0)} blocks resumed); "
        f"budget: {budget.get('reason')}, "
        f"measured peak {budget.get('measured_peak_gib')} GiB"
    )


if __name__ == "__main__":
    main()
