"""Every GPU figure of issue 45 with its baseline (today's path) in one run, written to --out (bench/gpu/run.sh runs
it).

    python -m bench.gpu.figures --out /tmp/gpu-figures                     # on a GPU machine (bench/gpu/run.sh)
    python -m bench.gpu.figures --out /tmp/gpu-dry --dry-run               # the same steps on the CPU at tiny sizes

Sections, in this order, each against its baseline in the same process or the same run:
- env: the device, torch, whether nvImageCodec and FAISS's GPU build are there.
- embed: images/s of the model alone (a preloaded batch), of decoding alone and of the stage's loop
  (stages.embed.encoder.write_embedding_shards), for the torchvision decoder (today's device path, the baseline)
  and nvImageCodec (the new one), on COCO-size synthetic JPEGs (bench/embed/throughput.py's, 640x480 q90).
- text: sentences/s of filter's encoding with a SimCSE-large-shaped encoder, today's (fp16, sentence-transformers'
  batches of filter.text_batch_size) against the new (bf16, longest first, the largest batch that fits), and how
  far apart their cosines are.
- mine: bench/gpu/mine_figures.py at each --mine-sizes in its own process (exact baseline against the approximate
search).
- e2e: bench/pipeline/e2e.py at full COCO size (82,783 images), each stage its own process.
The last mine size gets the time left before --deadline-s (its full search is projected past it). Writes
gpu_figures.json (everything) and gpu_figures.md (the summary printed last) into --out.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.embed.throughput import make_jpegs  # noqa: E402
from bench.pipeline.e2e import case_variant, text_encoder_folder  # noqa: E402
from csts_pipeline.pipeline.device import autocast_dtype, resolve_device  # noqa: E402
from csts_pipeline.pipeline.manifest import EmbedConfig  # noqa: E402
from csts_pipeline.pipeline.text_encoder import encode_texts, gpu_batches, load_text_encoder  # noqa: E402
from csts_pipeline.stages.embed import decoders  # noqa: E402
from csts_pipeline.stages.embed.encoder import ImageList, load_clip, write_embedding_shards  # noqa: E402
from csts_pipeline.stages.embed.images import image_batches  # noqa: E402

TINY_CLIP = REPO / "csts_pipeline" / "stages" / "embed" / "resources" / "open_clip" / "csts-tiny-clip.json"
SAMPLE_CAPTIONS = REPO / "tests" / "data" / "coco" / "captions_val2017_sample.json"


DRY_MINE = "--dim 32 --k 16 --threads 2 --held-out 200 --recall-sample 200 --exact-queries 1000"
DRY_E2E = "--fraction 0.0008 --small-text-encoder --image-batch-size 16 --text-batch-size 32 --workers 0"


def sizes(dry: bool) -> dict:
    """What each section runs on: full sizes on a GPU, tiny ones in the dry run."""
    if dry:
        mine, e2e = DRY_MINE.split(), [*DRY_E2E.split(), "--clip-config", str(TINY_CLIP)]
        return {"images": 32, "pool": 8, "batch": 16, "workers": 0, "texts": 200, "text_batch": 32}, mine, e2e
    full = {"images": 16_384, "pool": 2048, "batch": 256, "workers": 16, "texts": 65_536, "text_batch": 256}
    return full, [], ["--scale", "--knn", "torch", "--workers", "16"]


def env_section(device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{torch.get_num_threads()}"
    from csts_pipeline.stages.mine.budget import faiss_gpu

    module = decoders.nvimgcodec_module()
    return {
        "device": name,
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "faiss_gpu": faiss_gpu(),
        "nvimgcodec": getattr(module, "__version__", "installed") if module is not None else None,
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rate(count: int, started: float) -> float:
    return round(count / max(time.perf_counter() - started, 1e-9), 1)


def embed_section(device: torch.device, size: dict, work: Path, dry: bool) -> dict:
    """Model-only ceiling, then decode-only and the stage's loop for each device decoder."""
    pool = make_jpegs(work / "jpegs", size["pool"], workers=os.cpu_count() or 1)
    names = [p.name for p in itertools.islice(itertools.cycle(pool), size["images"])]
    paths = [work / "jpegs" / name for name in names]
    config = EmbedConfig(model_config_path=TINY_CLIP) if dry else EmbedConfig(model="ViT-B-32", pretrained=None)
    encoder = load_clip(config, device)
    batch = next(
        image_batches(
            paths[: size["batch"]],
            "workers",
            device=device,
            batch_size=size["batch"],
            num_workers=0,
            preprocess=encoder.preprocess,
            preprocess_config=encoder.preprocess_config,
        )
    )[1]
    dtype = autocast_dtype(device, "auto")
    out: dict = {"images": len(paths), "distinct_jpegs": len(pool), "batch": size["batch"]}
    with torch.inference_mode(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        encoder.model.encode_image(batch)
        _sync(device)
        rounds, started = max(1, len(paths) // len(batch)), time.perf_counter()
        for _ in range(rounds):
            encoder.model.encode_image(batch)
        _sync(device)
        out["model_only"] = _rate(rounds * len(batch), started)
    for setting in ("torchvision", "nvimgcodec"):
        if setting == "nvimgcodec" and decoders.nvimgcodec_module() is None:
            out[setting] = {"skipped": "nvImageCodec is not installed"}
            continue
        out[setting] = _decoder_rates(encoder, paths, names, work, device, size, setting)
    return out


def _decoder_rates(encoder, paths, names, work: Path, device, size: dict, setting: str) -> dict:
    decoder = decoders.device_decoder(setting, device)
    result = {"decoder": decoder.name, "backends": getattr(decoder, "backends", None)}
    how = {"device": device, "batch_size": size["batch"], "num_workers": size["workers"]}
    how |= {"preprocess": encoder.preprocess, "preprocess_config": encoder.preprocess_config, "decoder": setting}
    count, started = 0, time.perf_counter()
    for indices, _, _ in image_batches(paths, "device", **how):
        count += len(indices)
    _sync(device)
    result["decode_only"] = _rate(count, started)
    config = EmbedConfig(
        model="ViT-B-32", pretrained=None, batch_size=size["batch"], num_workers=size["workers"], decode=setting
    )
    images = ImageList(list(range(len(paths))), names, work / "jpegs", 4096)
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        for _ in write_embedding_shards(
            encoder, images, shards=list(range(images.n_shards)), folder=Path(out), device=device, config=config
        ):
            pass
        result["pipeline"] = _rate(len(paths), started)
    return result


def caption_texts(source: Path, count: int) -> list[str]:
    """`count` distinct COCO captions: the source's, then case variants of them (bench/pipeline/e2e.py's rule)."""
    captions = [entry["caption"].strip() for entry in json.loads(source.read_text())["annotations"]]
    captions = list(dict.fromkeys(captions))
    return [case_variant(captions[i % len(captions)], i // len(captions)) for i in range(count)]


def text_section(
    device: torch.device, size: dict, work: Path, captions: Path, tokenizer: Path | None, dry: bool
) -> dict:
    """Today's encoding (fp16 on CUDA, sentence-transformers' batches) against the new one (bf16, sorted, the
    largest batch that fits), on the encoder folder e2e uses (the dry run: the packaged MiniLM, whose sentences
    differ enough that a wrong order shows)."""
    texts = caption_texts(captions, size["texts"])
    if dry:
        name, model = "packaged MiniLM", load_text_encoder("packaged:all-MiniLM-L6-v2", "model", device)
    else:
        name = "simcse-large-shaped"
        folder = text_encoder_folder(work / "e2e" / "models" / name, tokenizer)
        model = load_text_encoder(str(folder), "cls_pooler", device)
    out: dict = {"texts": len(texts), "encoder": name}
    if device.type == "cuda":
        model.half()  # today's path
    started = time.perf_counter()
    with torch.inference_mode():
        before = model.encode(texts, batch_size=size["text_batch"], convert_to_tensor=True, show_progress_bar=False)
        before = torch.nn.functional.normalize(before.float(), dim=1).cpu().numpy()
    _sync(device)
    out["baseline"] = {
        "sentences_per_s": _rate(len(texts), started),
        "precision": "fp16" if device.type == "cuda" else "fp32",
    }
    if device.type == "cuda":
        model.to(autocast_dtype(device, "auto"))
        started = time.perf_counter()
        after = encode_texts(model, texts, size["text_batch"])
    else:  # the GPU path's batching, driven by the CPU model
        started = time.perf_counter()
        after = gpu_batches(lambda batch: encode_texts(model, batch, len(batch)), texts, 64, lambda exc: False)
    _sync(device)
    out["new"] = {"sentences_per_s": _rate(len(texts), started), "precision": str(next(model.parameters()).dtype)}
    rng = np.random.default_rng(0)
    first, second = rng.integers(0, len(texts), (2, 2000))
    cosines = [np.einsum("ij,ij->i", vectors[first], vectors[second]) for vectors in (before, after)]
    out["mean_abs_cosine_change"] = round(float(np.abs(cosines[0] - cosines[1]).mean()), 5)
    out["max_abs_embedding_change"] = round(float(np.abs(before - after).max()), 5)
    return out


def run_json(command: list[str], result: Path, log: Path) -> dict:
    """A bench step in its own process (its own peak memory); its JSON result, or the tail of its log."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with open(log, "w") as handle:
        status = subprocess.run(command, env=env, stdout=handle, stderr=subprocess.STDOUT, check=False).returncode
    if status != 0 or not result.is_file():
        return {"failed": status, "log_tail": log.read_text(errors="replace")[-2000:]}
    return json.loads(result.read_text())


def mine_section(n: int, device: str, extra: list[str], work: Path, search_seconds: float) -> dict:
    result = work / f"mine-{n}.json"
    command = [
        sys.executable,
        "-m",
        "bench.gpu.mine_figures",
        "--images",
        str(n),
        "--device",
        device,
        "--out",
        str(result),
        "--search-seconds",
        f"{search_seconds:.0f}",
        *extra,
    ]
    return run_json(command, result, work / f"mine-{n}.log")


def e2e_section(device: str, extra: list[str], work: Path, captions: Path, tokenizer: Path | None) -> dict:
    command = [
        sys.executable,
        str(REPO / "bench" / "pipeline" / "e2e.py"),
        "--device",
        device,
        "--work",
        str(work / "e2e"),
        "--captions",
        str(captions),
        *extra,
        *(["--tokenizer", str(tokenizer)] if tokenizer else []),
    ]
    raw = run_json(command, work / "e2e" / "e2e.json", work / "e2e.log")
    if "failed" in raw:
        return raw
    stages = {
        name: {"seconds": round(raw[name]["seconds"], 1), "peak_mib": round(raw[name]["peak_mib"])}
        for name in ("embed", "mine", "filter")
    }
    return {
        "images": raw["images"],
        "stages": stages,
        "total_seconds": round(sum(s["seconds"] for s in stages.values()), 1),
    }


def summary(figures: dict) -> list[str]:
    """The figures as the lines docs/performance.md takes, each with its baseline."""
    lines = [
        f"device: {figures['env']['device']}; torch {figures['env']['torch']}; "
        f"nvImageCodec {figures['env']['nvimgcodec']}; FAISS GPU {figures['env']['faiss_gpu']}"
    ]
    embed = figures.get("embed", {})
    if "model_only" in embed:
        lines.append(f"embed: model only {embed['model_only']:,.0f} images/s")
        lines[-1] += f" ({embed['images']:,} images, batch {embed['batch']})"
        for setting in ("torchvision", "nvimgcodec"):
            row = embed.get(setting, {})
            if "pipeline" in row:
                ceiling = min(row["decode_only"], embed["model_only"])
                lines.append(
                    f"embed {setting} ({row['decoder']}, {row['backends'] or '-'}): decode only "
                    f"{row['decode_only']:,.0f}, pipeline {row['pipeline']:,.0f} images/s = "
                    f"{row['pipeline'] / ceiling:.0%} of min(model, decoder)"
                )
            else:
                lines.append(f"embed {setting}: {row}")
    text = figures.get("text", {})
    if "new" in text:
        lines.append(
            f"text: {text['texts']:,} sentences, baseline {text['baseline']['sentences_per_s']:,.0f}/s "
            f"({text['baseline']['precision']}), new {text['new']['sentences_per_s']:,.0f}/s "
            f"({text['new']['precision']}); mean |cosine change| {text['mean_abs_cosine_change']}"
        )
    for key, row in figures.items():
        if key.startswith("mine-") and "approximate" in row:
            exact, ann = row["exact_baseline"], row["approximate"]
            line = (
                f"mine {row['images']:,}: exact baseline {exact['projected_seconds']:,.1f} s projected from "
                f"{exact['queries_timed']:,} queries; {ann['kind']} ({ann['backend']}, {ann['lists']} lists)"
            )
            if "search_projected_seconds" in ann:
                line += (
                    f": build {ann['build_seconds']} s, tune {ann['tune_seconds']} s (nprobe {ann['nprobe']}), "
                    f"search {ann['search_projected_seconds']:,.1f} s ({ann['searched']:,} rows timed), "
                    f"held-out recall@{row['k']} {ann['held_out_recall']}, GPU peak "
                    f"{ann.get('gpu_peak_gib', '-')} GiB, host peak {row['host_peak_gib']} GiB"
                )
            lines.append(line)
        elif key.startswith("mine-"):
            lines.append(f"{key}: {row}")
    e2e = figures.get("e2e", {})
    if "stages" in e2e:
        parts = ", ".join(f"{name} {s['seconds']} s ({s['peak_mib']:,} MiB)" for name, s in e2e["stages"].items())
        lines.append(f"e2e {e2e['images']:,} images: {parts}; total {e2e['total_seconds']} s")
    elif e2e:
        lines.append(f"e2e: {e2e}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="gpu_figures.json and gpu_figures.md go here")
    parser.add_argument("--dry-run", action="store_true", help="the CPU, tiny sizes, the repository's sample data")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "csts-gpu-bench")
    parser.add_argument(
        "--data", type=Path, default=REPO / ".gpu-data", help="captions_val2017.json, minilm-tokenizer/"
    )
    parser.add_argument("--deadline-s", type=float, default=530, help="the last mine size is fitted into this")
    parser.add_argument("--sections", default="embed,text,mine,e2e")
    args = parser.parse_args()
    started = time.perf_counter()
    device = resolve_device("cpu" if args.dry_run else "cuda")
    size, mine_args, e2e_args = sizes(args.dry_run)
    captions = SAMPLE_CAPTIONS if args.dry_run else args.data / "captions_val2017.json"
    tokenizer = args.data / "minilm-tokenizer" if (args.data / "minilm-tokenizer").is_dir() else None
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    figures: dict = {"env": env_section(device), "dry_run": args.dry_run}
    wanted = args.sections.split(",")

    def save() -> None:
        figures["seconds"] = round(time.perf_counter() - started, 1)
        (args.out / "gpu_figures.json").write_text(json.dumps(figures, indent=2))
        (args.out / "gpu_figures.md").write_text("\n".join(summary(figures)) + "\n")

    def mine(n: int) -> dict:
        """The last size gets the time left before the deadline, less about 2 minutes for generation, build and
        tuning; the others a minute of full search, then projected."""
        left = args.deadline_s - (time.perf_counter() - started) - 120
        search = 60.0 if n != mine_sizes[-1] else max(30.0, left)
        return mine_section(n, device.type, mine_args, args.work, search)

    mine_sizes = [2000] if args.dry_run else [1_000_000, 10_000_000]
    steps = [
        ("embed", lambda: embed_section(device, size, args.work, args.dry_run)),
        ("text", lambda: text_section(device, size, args.work, captions, tokenizer, args.dry_run)),
        (f"mine-{mine_sizes[0]}", lambda: mine(mine_sizes[0])),
        ("e2e", lambda: e2e_section(device.type, e2e_args, args.work, captions, tokenizer)),
        *[(f"mine-{n}", lambda n=n: mine(n)) for n in mine_sizes[1:]],
    ]
    for name, step in steps:
        if name.split("-")[0] not in wanted:
            continue
        print(f"[{time.perf_counter() - started:6.0f}s] {name}", flush=True)
        try:
            figures[name] = step()
        except Exception as exc:  # one section's failure must not lose the others' figures
            figures[name] = {"failed": f"{exc.__class__.__name__}: {str(exc)[:500]}"}
        save()
    save()
    print("\n".join(summary(figures)), flush=True)


if __name__ == "__main__":
    main()
