"""COCO-shaped end to end through the CLI (embed -> mine -> filter) on any machine, without downloads.

    python bench/pipeline/e2e.py                       # 0.2% of COCO 2014 train (166 images); 0.1% took 11 min on 2
    busy cores python bench/pipeline/e2e.py --fraction 0.02       # 2% (1,656 images, ~8,300 captions)
    python bench/pipeline/e2e.py --scale --device cuda # all 82,783 images, ~414k distinct captions

What it builds under --work (reused between runs where the inputs are the same):
- images: a pool of at most --distinct-jpegs synthetic 640x480 q90 JPEGs (bench/embed/throughput.py's), hard-linked to
one
  name per image: decoding costs per file, so links cost what distinct files do.
- captions: a COCO captions JSON with 5 real COCO val2017 captions per image; image i takes those of val image
  i mod 5,000, with the letter case of up to 5 letters swapped by the bits of its repeat i div 5,000. Every caption
  string is thus distinct (about 414k at full size) while the words, lengths and IoU stay real (the bag of words
  and the uncased tokenizer lowercase).
- models: CLIP ViT-B/32 with random weights (open_clip's own config, no pretrained tag), and a text encoder of
  SimCSE-large's shape (24 layers, width 1024, 16 heads, FFN 4096, pooler) built from a BERT config with random
  weights and MiniLM's uncased vocabulary from the packaged model: no download; the same cost per token.
- the manifest: manifests/coco.yaml with those paths (thresholds, k=64, batch sizes as for the real run).

Each stage runs as its own CLI process (`csts-pipeline embed|mine|filter --manifest ...`), so its peak memory
(max RSS, children included) is its own. Printed: each stage's wall time and peak memory, its executor timings
(setup / process / finish from <work>/<stage>/_stage.json), the total, and on a CPU a projection to full COCO.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

COCO_VAL = REPO.parent / "shared" / "data" / "coco" / "captions_val2017.json"
COCO_TRAIN_IMAGES = 82_783
CAPTIONS_PER_IMAGE = 5
STAGES = ("embed", "mine", "filter")
TEXT_ENCODER_SHAPE = {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16}
TEXT_ENCODER_SHAPE["intermediate_size"] = 4096
SMALL_TEXT_ENCODER = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128}


def case_variant(text: str, repeat: int) -> str:
    """`text` with the case of its k-th cased letter swapped for every bit k set in `repeat` (k < 5 for the 17
    repeats of full COCO; higher bits reach further letters): distinct per repeat, the same words lowercased."""
    cased = [i for i, char in enumerate(text) if char.swapcase() != char and len(char.swapcase()) == 1]
    chars = list(text)
    for bit, position in enumerate(cased):
        if repeat >> bit == 0:
            break
        if repeat >> bit & 1:
            chars[position] = chars[position].swapcase()
    return "".join(chars)


def write_captions(path: Path, n_images: int, source: Path = COCO_VAL) -> int:
    """A COCO captions JSON for `n_images` images (ids 1..n), 5 captions each from the val2017 captions (or
    another COCO captions JSON, `source`)."""
    annotations = json.loads(source.read_text())["annotations"]
    by_image: dict[int, list[str]] = {}
    for entry in sorted(annotations, key=lambda a: a["id"]):
        by_image.setdefault(entry["image_id"], []).append(entry["caption"].strip())
    sources = [texts[:CAPTIONS_PER_IMAGE] for _, texts in sorted(by_image.items()) if len(texts) >= 5]
    images, captions = [], []
    for index in range(n_images):
        image_id = index + 1
        images.append({"id": image_id, "file_name": f"{image_id:012d}.jpg", "width": 640, "height": 480})
        repeat, source = divmod(index, len(sources))
        for k, text in enumerate(sources[source]):
            caption_id = image_id * CAPTIONS_PER_IMAGE + k
            captions.append({"id": caption_id, "image_id": image_id, "caption": case_variant(text, repeat)})
    path.write_text(json.dumps({"images": images, "annotations": captions}))
    return len({c["caption"] for c in captions})


def link_images(folder: Path, pool: Path, n_images: int, distinct: int) -> None:
    """One hard link per image name to a pool of `distinct` synthetic JPEGs (bench/embed/throughput.py's generator)."""
    from bench.embed.throughput import make_jpegs

    jpegs = make_jpegs(pool, min(distinct, n_images), workers=os.cpu_count() or 1)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for index in range(n_images):
        os.link(jpegs[index % len(jpegs)], folder / f"{index + 1:012d}.jpg")


def text_encoder_folder(folder: Path, tokenizer_folder: Path | None = None, shape: dict | None = None) -> Path:
    """SimCSE-large's shape (or `shape`) from a BERT config, random weights, MiniLM's uncased tokenizer (from the
    packaged model, or `tokenizer_folder` holding its files); built once."""
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from csts_pipeline.pipeline.packaged_models import resolve_model_path

    source = tokenizer_folder or Path(resolve_model_path("packaged:all-MiniLM-L6-v2"))
    tokenizer = AutoTokenizer.from_pretrained(source)
    config = BertConfig(vocab_size=tokenizer.vocab_size, max_position_embeddings=514, **(shape or TEXT_ENCODER_SHAPE))
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_manifest(work: Path, args: argparse.Namespace, encoder: Path) -> Path:
    manifest = yaml.safe_load((REPO / "manifests" / "coco.yaml").read_text())
    manifest["name"] = f"e2e-{args.fraction:g}"
    manifest["work_dir"] = str(work / "run")
    manifest["data"] = {"format": "coco", "captions": str(work / "captions.json"), "images": str(work / "images")}
    manifest["run"] = {"device": args.device}
    manifest["mine"] = manifest.get("mine") or {}
    manifest["mine"]["knn"] = args.knn
    manifest["embed"] |= {"model": "ViT-B-32", "pretrained": None, "num_workers": args.workers}
    if args.clip_config:
        manifest["embed"] |= {"model_config_path": str(args.clip_config.resolve())}
    if args.decode:
        manifest["embed"]["decode"] = args.decode
    manifest["filter"] |= {"text_encoder": str(encoder), "text_pooling": "cls_pooler"}
    if args.text_batch_size:
        manifest["filter"]["text_batch_size"] = args.text_batch_size
    if args.image_batch_size:
        manifest["embed"]["batch_size"] = args.image_batch_size
    path = work / "manifest.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def run_stage(stage: str, manifest: Path) -> dict:
    """`csts-pipeline STAGE --manifest M --force` in its own process: wall time, peak RSS, the stage record."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-c", "from csts_pipeline.cli import main; main()", stage, "--manifest", str(manifest)]
    started = time.perf_counter()
    process = subprocess.Popen([*command, "--force"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = process.stdout.read().decode(errors="replace") if process.stdout else ""
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{stage} failed:\n{output[-3000:]}")
    work_dir = Path(yaml.safe_load(manifest.read_text())["work_dir"])
    record = json.loads((work_dir / stage / "_stage.json").read_text())
    return {"stage": stage, "seconds": seconds, "peak_mib": usage.ru_maxrss / 1024, "record": record}


def timing_row(result: dict) -> str:
    timings, counts = result["record"]["timings"], result["record"].get("counts", {})
    parts = ", ".join(f"{name} {timings[name]:.1f}s" for name in ("setup", "prepare", "process", "finish"))
    shown = ", ".join(f"{key}={value:,}" for key, value in counts.items() if isinstance(value, int))
    return (
        f"{result['stage']:<7} wall {result['seconds']:8.1f}s  peak {result['peak_mib']:7.0f} MiB  ({parts})  {shown}"
    )


def projection(results: dict[str, dict], fraction: float) -> list[str]:
    """Full COCO from this run on the same machine. Setups (model loading) stay; embed's process, the filter's
    encoding of the distinct captions (its record's encode_seconds) and its pair pass grow linearly with the
    images; mine's exact kNN grows between linearly (fixed costs dominate small runs) and with the square."""
    scale = 1 / fraction
    embed, mine, filter_ = (results[name]["record"]["timings"] for name in STAGES)
    encode = results["filter"]["record"].get("text_encoder", {}).get("encode_seconds", 0.0)
    fixed_mine = mine["setup"] + mine["prepare"] + mine["finish"]
    rows = {
        "embed": (embed["setup"] + embed["process"] * scale + embed["finish"],) * 2,
        "mine": (fixed_mine + mine["process"] * scale, fixed_mine + mine["process"] * scale**2),
        "filter": (filter_["setup"] - encode + (encode + filter_["process"]) * scale + filter_["finish"],) * 2,
    }
    basis = {
        "embed": "setup once, process x images",
        "mine": "setup once, process x images .. x images^2 (exact kNN)",
        "filter": "setup less encoding once, encoding and pair pass x images",
    }
    lines = [f"projection to {COCO_TRAIN_IMAGES:,} images (x{scale:,.1f}) on this machine, from this run:"]
    for name, (low, high) in rows.items():
        span = f"{low / 60:8.1f} min" if low == high else f"{low / 60:8.1f} .. {high / 60:.1f} min"
        lines.append(f"  {name:<7} {span}  ({basis[name]})")
    low, high = sum(row[0] for row in rows.values()), sum(row[1] for row in rows.values())
    lines.append(f"  total   {low / 60:8.1f} .. {high / 60:.1f} min")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=0.002, help="share of COCO's 82,783 images")
    parser.add_argument("--scale", action="store_true", help="full COCO size (--fraction 1)")
    parser.add_argument("--device", default="auto", help="run.device: auto, cpu, cuda")
    parser.add_argument("--knn", default="faiss", choices=["faiss", "torch"], help="mine.knn (torch: on the device)")
    parser.add_argument("--work", type=Path, default=Path("runs/bench-e2e"))
    parser.add_argument("--distinct-jpegs", type=int, default=2000, help="distinct files behind the image names")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="embed.num_workers")
    parser.add_argument("--image-batch-size", type=int, default=None, help="embed.batch_size (default: coco's)")
    parser.add_argument("--text-batch-size", type=int, default=None, help="filter.text_batch_size (coco's)")
    parser.add_argument("--decode", default=None, help="embed.decode (default: coco's)")
    parser.add_argument("--captions", type=Path, default=COCO_VAL, help="COCO captions JSON the captions come from")
    parser.add_argument("--tokenizer", type=Path, default=None, help="MiniLM's tokenizer files (default: packaged)")
    parser.add_argument("--clip-config", type=Path, default=None, help="an open_clip config JSON instead of ViT-B/32")
    parser.add_argument("--small-text-encoder", action="store_true", help="a 2-layer encoder (dry runs)")
    args = parser.parse_args()
    if args.scale:
        args.fraction = 1.0
    if not args.captions.is_file():
        sys.exit(f"captions missing: {args.captions}")
    n_images = max(65, round(COCO_TRAIN_IMAGES * args.fraction))  # mine needs k + 1 = 65 images
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    distinct = write_captions(work / "captions.json", n_images, args.captions)
    link_images(work / "images", work / "jpeg-pool", n_images, args.distinct_jpegs)
    shape = SMALL_TEXT_ENCODER if args.small_text_encoder else None
    name = "small" if args.small_text_encoder else "simcse-large-shaped"
    encoder = text_encoder_folder(work / "models" / name, args.tokenizer, shape)
    manifest = write_manifest(work, args, encoder)
    print(
        f"{n_images:,} images ({args.fraction:.2%} of COCO), {n_images * CAPTIONS_PER_IMAGE:,} captions "
        f"({distinct:,} distinct), inputs ready in {time.perf_counter() - started:.0f}s; manifest {manifest}",
        flush=True,
    )
    from csts_pipeline.pipeline.device import resolve_device

    device = resolve_device(args.device)
    results = {}
    for stage in STAGES:
        results[stage] = run_stage(stage, manifest)
        print(timing_row(results[stage]), flush=True)
    total = sum(result["seconds"] for result in results.values())
    print(f"total   wall {total:8.1f}s ({total / 60:.1f} min) on {device}, {os.cpu_count()} CPU cores")
    if device.type == "cpu":
        print("\n".join(projection(results, n_images / COCO_TRAIN_IMAGES)))
    (work / "e2e.json").write_text(json.dumps({"fraction": args.fraction, "images": n_images, **results}, indent=2))


if __name__ == "__main__":
    main()
