from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from csts_pipeline.pipeline.manifest import EmbedConfig
from csts_pipeline.stages.embed.encoder import load_clip
from csts_pipeline.stages.embed.images import DevicePreprocess, choose_decode, image_batches
from tests.conftest import TINY_CLIP


@pytest.fixture(scope="module")
def encoder():
    return load_clip(EmbedConfig(model_config_path=TINY_CLIP), torch.device("cpu"))


@pytest.fixture
def photos(tmp_path: Path) -> list[Path]:
    """COCO-like files: 640x480 and 480x640 JPEGs, a grayscale JPEG, a PNG and a corrupt file."""
    rng = np.random.default_rng(0)
    paths = []
    for i, size in enumerate([(640, 480), (480, 640), (500, 375)]):
        base = rng.integers(0, 255, (size[1] // 16, size[0] // 16, 3), dtype=np.uint8)
        image = Image.fromarray(base).resize(size, Image.Resampling.BILINEAR)
        paths.append(tmp_path / f"{i}.jpg")
        image.save(paths[-1], quality=90)
    Image.fromarray(rng.integers(0, 255, (300, 400), dtype=np.uint8)).save(tmp_path / "gray.jpg", quality=90)
    Image.fromarray(rng.integers(0, 255, (200, 300, 3), dtype=np.uint8)).save(tmp_path / "x.png")
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    return [*paths, tmp_path / "gray.jpg", tmp_path / "x.png", tmp_path / "broken.jpg"]


def _collect(paths, mode, encoder):
    rows, batches, failures = [], [], []
    for indices, batch, failed in image_batches(
        paths,
        mode,
        device=torch.device("cpu"),
        batch_size=4,
        num_workers=0,
        preprocess=encoder.preprocess,
        preprocess_config=encoder.preprocess_config,
    ):
        rows += indices
        failures += failed
        if batch is not None:
            batches.append(batch)
    return rows, torch.cat(batches), failures


def test_device_decode_matches_the_workers_path(photos, encoder):
    rows_w, batch_w, failed_w = _collect(photos, "workers", encoder)
    rows_d, batch_d, failed_d = _collect(photos, "device", encoder)
    assert rows_w == rows_d == [0, 1, 2, 3, 4]
    assert [i for i, _ in failed_w] == [i for i, _ in failed_d] == [5]
    assert "unreadable image" in failed_d[0][1]
    assert batch_d.shape == batch_w.shape == (5, 3, 64, 64)
    # different JPEG decoders and resize kernels: close, not bit-identical
    assert (batch_d - batch_w).abs().mean() < 0.05
    with torch.inference_mode():
        a = torch.nn.functional.normalize(encoder.model.encode_image(batch_w), dim=-1)
        b = torch.nn.functional.normalize(encoder.model.encode_image(batch_d), dim=-1)
    assert torch.all((a * b).sum(-1) > 0.99)


def test_auto_decode_uses_the_device_only_on_cuda():
    assert choose_decode("auto", torch.device("cpu")) == "workers"
    assert choose_decode("auto", torch.device("cuda")) == "device"
    assert choose_decode("device", torch.device("cpu")) == "device"
    assert choose_decode("workers", torch.device("cuda")) == "workers"
    assert choose_decode("nvimgcodec", torch.device("cuda")) == choose_decode("torchvision", torch.device("cpu"))
    assert choose_decode("torchvision", torch.device("cpu")) == "device"  # a named decoder decodes on the device


def test_batched_resize_keeps_order_across_size_groups(encoder):
    """Images of the same size are resized together; each output row still belongs to its own input."""
    on_cpu = DevicePreprocess(encoder.preprocess_config, torch.device("cpu"))
    rng = np.random.default_rng(1)
    shapes = [(480, 640), (640, 480), (480, 640), (375, 500), (640, 480)]
    images = [torch.from_numpy(rng.integers(0, 255, (3, *shape), dtype=np.uint8)) for shape in shapes]
    together = on_cpu.resize_crop(images)
    one_by_one = torch.cat([on_cpu.resize_crop([image]) for image in images])
    assert together.shape == (5, 3, 64, 64)
    torch.testing.assert_close(together, one_by_one)
    assert not torch.equal(together[0], together[2])  # same size, different pictures: not mixed up
