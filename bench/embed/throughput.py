"""Image embedding throughput on realistic JPEGs, with its two ceilings measured in the same run.

    python bench/embed/throughput.py                                  # ViT-B-32 (random weights: same speed), 400 JPEGs
    python bench/embed/throughput.py --images 4000 --batch-size 256 --workers 16 --device cuda

Generates COCO-like JPEGs (640x480, quality 90) once into --folder, then measures, for each decode path
(`workers`: PIL in DataLoader workers; `device`: batched decode_jpeg on the model's device):
  decode-only   images/s of the loader alone (decode + preprocess, batches on the device)
  model-only    images/s of encode_image on a preloaded batch
  pipeline      images/s of the embed stage's loop (stages.embed.write_embedding_shards: read, embed and write
                Parquet shards of --images-per-shard, overlapped), and its fraction of the lower ceiling.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFilter

from csts_pipeline.pipeline.device import resolve_device
from csts_pipeline.pipeline.manifest import EmbedConfig
from csts_pipeline.stages.embed.encoder import ImageList, load_clip, write_embedding_shards
from csts_pipeline.stages.embed.images import image_batches


def make_jpegs(folder: Path, count: int, seed: int = 0, workers: int = 1) -> list[Path]:
    """Photo-like 640x480 JPEGs: smooth colour fields, shapes and sensor noise (about 100-150 KB each), each from
    its own seeded generator, so `workers` processes make the same files as one."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{i:06d}.jpg" for i in range(count)]
    missing = [i for i, path in enumerate(paths) if not path.is_file()]
    if workers > 1 and len(missing) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(_write_jpeg, [paths[i] for i in missing], [seed] * len(missing), missing, chunksize=16))
    else:
        for i in missing:
            _write_jpeg(paths[i], seed, i)
    return paths


def _write_jpeg(path: Path, seed: int, index: int) -> None:
    rng = np.random.default_rng([seed, index])
    field = rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)
    image = Image.fromarray(field).resize((640, 480), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 9))):
        x, y = int(rng.integers(0, 560)), int(rng.integers(0, 400))
        colour = tuple(int(c) for c in rng.integers(0, 255, 3))
        draw.ellipse((x, y, x + int(rng.integers(20, 160)), y + int(rng.integers(20, 160))), fill=colour)
    image = image.filter(ImageFilter.GaussianBlur(1.2))
    noisy = np.asarray(image, np.int16) + rng.integers(-12, 12, (480, 640, 3))
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(path, quality=90)


def _rate(count: int, seconds: float) -> float:
    return count / max(seconds, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--images-per-shard", type=int, default=1000)
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "csts-bench-jpegs")
    args = parser.parse_args()

    device = resolve_device(args.device)
    paths = make_jpegs(args.folder, args.images)
    encoder = load_clip(EmbedConfig(model=args.model, pretrained=None), device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{torch.get_num_threads()}"
    print(
        f"device: {name}; model {args.model}; {len(paths)} JPEGs 640x480 q90; batch {args.batch_size}; "
        f"workers {args.workers}; precision {args.precision}"
    )

    # model-only ceiling: one preprocessed batch, reused
    batch = next(
        image_batches(
            paths[: args.batch_size],
            "workers",
            device=device,
            batch_size=args.batch_size,
            num_workers=0,
            preprocess=encoder.preprocess,
            preprocess_config=encoder.preprocess_config,
        )
    )[1]
    from csts_pipeline.pipeline.device import autocast_dtype

    dtype = autocast_dtype(device, args.precision)
    with torch.inference_mode(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        encoder.model.encode_image(batch)
        sync()
        rounds = max(1, len(paths) // args.batch_size)
        started = time.perf_counter()
        for _ in range(rounds):
            encoder.model.encode_image(batch)
        sync()
        model_only = _rate(rounds * len(batch), time.perf_counter() - started)
    print(f"model-only            {model_only:9.1f} images/s")

    for mode in ("workers", "device"):
        started = time.perf_counter()
        count = 0
        for indices, _, _ in image_batches(
            paths,
            mode,
            device=device,
            batch_size=args.batch_size,
            num_workers=args.workers,
            preprocess=encoder.preprocess,
            preprocess_config=encoder.preprocess_config,
        ):
            count += len(indices)
        sync()
        decode_only = _rate(count, time.perf_counter() - started)
        config = EmbedConfig(
            model=args.model,
            pretrained=None,
            batch_size=args.batch_size,
            num_workers=args.workers,
            precision=args.precision,
            decode=mode,
        )
        images = ImageList(list(range(len(paths))), [p.name for p in paths], args.folder, args.images_per_shard)
        with tempfile.TemporaryDirectory() as out:
            started = time.perf_counter()
            for _ in write_embedding_shards(
                encoder, images, shards=list(range(images.n_shards)), folder=Path(out), device=device, config=config
            ):
                pass
            pipeline = _rate(len(paths), time.perf_counter() - started)
        ceiling = min(decode_only, model_only)
        print(f"decode-only ({mode:<7}) {decode_only:9.1f} images/s")
        print(
            f"pipeline    ({mode:<7}) {pipeline:9.1f} images/s = {pipeline / ceiling:.0%} of the lower ceiling "
            f"({'decode' if decode_only < model_only else 'model'}, {ceiling:.1f} images/s)"
        )


if __name__ == "__main__":
    main()
