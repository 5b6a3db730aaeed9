"""Image batches for a CLIP image tower, by one of two decode paths.

- `workers`: DataLoader worker processes open each file with PIL and run open_clip's own preprocess; batches are
  pinned and copied to the device without blocking. The reference path, and the one for CPU runs.
- `device`: workers only read the file bytes; JPEGs are decoded as a batch on the model's device by one of
  stages.embed.decoders (nvImageCodec's hardware decoders on a GPU where it is installed, else
  `torchvision.io.decode_jpeg`), then resized, cropped and normalised there, as open_clip's preprocess does.
  Files the decoder refuses (PNG, CMYK JPEG) fall back to PIL one by one.

Both yield (row indices, float batch on the device, [(row, reason)] for unreadable files), so an unreadable image
is reported, never raised.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset

from csts_pipeline.stages.embed.decoders import JpegDecoder, TorchvisionDecoder, device_decoder

Batch = tuple[list[int], torch.Tensor | None, list[tuple[int, str]]]
DecodeMode = Literal["workers", "device"]
_PIL_ERRORS = (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError)
MAX_PIXELS = 64_000_000  # a larger image would take gigabytes to decode; CLIP sees 224x224 of it anyway


def opened(source) -> Image.Image:
    """PIL's lazy open (the header only), refusing an image too large to decode: a skip, not gigabytes."""
    image = Image.open(source)
    width, height = image.size
    if width * height > MAX_PIXELS:
        image.close()
        raise ValueError(f"image too large to decode: {width}x{height} pixels, above {MAX_PIXELS:,}")
    return image


def choose_decode(mode: str, device: torch.device) -> DecodeMode:
    """`auto` decodes on the GPU when the model runs there, else in DataLoader workers; naming a device decoder
    (`nvimgcodec`, `torchvision`) decodes on the device with it (stages.embed.decoders.device_decoder)."""
    if mode == "auto":
        return "device" if device.type == "cuda" else "workers"
    return "workers" if mode == "workers" else "device"


def unreadable(exc: BaseException) -> str:
    """The reason recorded for an image; without object addresses (PIL names the BytesIO it was given), so that
    two runs record the same reason."""
    return f"unreadable image ({exc.__class__.__name__}: {re.sub(r' at 0x[0-9a-fA-F]+', '', str(exc))[:120]})"


def _openable(path):
    """A file path, or the bytes of an archive member (stages.embed.readers.archives.Member) as a file object."""
    return path if isinstance(path, Path) else io.BytesIO(path.read())


class _PreprocessedImages(Dataset):
    def __init__(self, paths: list[Path], preprocess: Callable):
        self.paths, self.preprocess = paths, preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor | None, str]:
        try:
            with opened(_openable(self.paths[index])) as image:
                return index, self.preprocess(image.convert("RGB")), ""
        except _PIL_ERRORS as exc:
            return index, None, unreadable(exc)


class _FileBytes(Dataset):
    def __init__(self, paths: list[Path]):
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor | None, str]:
        try:
            path = self.paths[index]
            raw = np.fromfile(path, np.uint8) if isinstance(path, Path) else np.frombuffer(path.read(), np.uint8)
            data = raw.copy() if not raw.flags.writeable else raw
        except OSError as exc:
            return index, None, unreadable(exc)
        return index, torch.from_numpy(data), ""


def _stack_collate(items: list[tuple[int, torch.Tensor | None, str]]) -> Batch:
    good = [(i, t) for i, t, _ in items if t is not None]
    failed = [(i, reason) for i, t, reason in items if t is None]
    return [i for i, _ in good], torch.stack([t for _, t in good]) if good else None, failed


def _list_collate(items: list[tuple[int, torch.Tensor | None, str]]):
    good = [(i, t) for i, t, _ in items if t is not None]
    failed = [(i, reason) for i, t, reason in items if t is None]
    return [i for i, _ in good], [t for _, t in good], failed


class DevicePreprocess:
    """open_clip's eval preprocess (resize shortest side, centre crop, normalise) as tensor ops on a device."""

    def __init__(self, config: dict, device: torch.device, decoder: JpegDecoder | None = None):
        height, width = config["size"] if isinstance(config["size"], tuple | list) else (config["size"],) * 2
        self.size = (int(height), int(width))
        self.mode = {"bicubic": "bicubic", "bilinear": "bilinear"}.get(
            config.get("interpolation", "bicubic"), "bicubic"
        )
        self.mean = torch.tensor(config["mean"], device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(config["std"], device=device).view(1, 3, 1, 1) * 255
        self.device = device
        self.decoder = decoder if decoder is not None else TorchvisionDecoder(device)

    def decode(self, data: list[torch.Tensor]) -> list[torch.Tensor | str]:
        """The batch through the device decoder; what it cannot decode goes through PIL one by one, and what PIL
        cannot read either becomes the reason it is skipped."""
        decoded = self.decoder.decode_batch(data)
        return [image if image is not None else self._pil(item) for item, image in zip(data, decoded)]

    def _pil(self, data: torch.Tensor) -> torch.Tensor | str:
        try:
            with opened(io.BytesIO(data.numpy().tobytes())) as image:
                array = np.asarray(image.convert("RGB"))
            return torch.from_numpy(array.copy()).permute(2, 0, 1).to(self.device)
        except _PIL_ERRORS as exc:
            return unreadable(exc)

    def resize_crop(self, images: list[torch.Tensor]) -> torch.Tensor:
        """Resize shortest side and centre-crop, one interpolate call per distinct input size.

        COCO and Flickr30K are mostly 640x480 and 480x640 (or 500 wide), so a batch costs a few kernel launches.
        """
        out = torch.empty((len(images), 3, *self.size), device=self.device)
        by_size: dict[tuple[int, int], list[int]] = defaultdict(list)
        for position, image in enumerate(images):
            by_size[tuple(image.shape[-2:])].append(position)
        for (height, width), positions in by_size.items():
            scale = max(self.size[0] / height, self.size[1] / width)
            new_size = (max(self.size[0], round(height * scale)), max(self.size[1], round(width * scale)))
            group = torch.stack([images[p] for p in positions]).float()
            resized = F.interpolate(group, size=new_size, mode=self.mode, antialias=True, align_corners=False)
            top, left = (new_size[0] - self.size[0]) // 2, (new_size[1] - self.size[1]) // 2
            out[positions] = resized[:, :, top : top + self.size[0], left : left + self.size[1]]
        return out.clamp_(0, 255)

    def __call__(self, data: list[torch.Tensor]) -> tuple[list[int], torch.Tensor | None, list[tuple[int, str]]]:
        decoded = self.decode(data)
        good = [(pos, image) for pos, image in enumerate(decoded) if not isinstance(image, str)]
        failed = [(pos, image) for pos, image in enumerate(decoded) if isinstance(image, str)]
        if not good:
            return [], None, failed
        batch = self.resize_crop([image for _, image in good])
        return [pos for pos, _ in good], (batch - self.mean) / self.std, failed


def image_batches(
    paths: list[Path],
    mode: DecodeMode,
    *,
    device: torch.device,
    batch_size: int,
    num_workers: int,
    preprocess: Callable,
    preprocess_config: dict,
    decoder: str = "device",
) -> Iterator[Batch]:
    """Batches of preprocessed images on `device`, in path order, with failures reported per batch; `decoder`
    is the `embed.decode` setting that picks the device path's decoder."""
    pin = device.type == "cuda"
    if mode == "workers":
        loader = DataLoader(
            _PreprocessedImages(paths, preprocess),
            batch_size=batch_size,
            num_workers=num_workers,
            collate_fn=_stack_collate,
            pin_memory=pin,
        )
        for indices, batch, failed in loader:
            yield indices, None if batch is None else batch.to(device, non_blocking=True), failed
        return
    on_device = DevicePreprocess(preprocess_config, device, device_decoder(decoder, device))
    loader = DataLoader(_FileBytes(paths), batch_size=batch_size, num_workers=num_workers, collate_fn=_list_collate)
    for indices, data, failed in loader:
        positions, batch, decode_failed = on_device(data) if data else ([], None, [])
        yield [indices[p] for p in positions], batch, failed + [(indices[p], reason) for p, reason in decode_failed]


_TO_TENSOR = ("ToTensor", "MaybeToTensor")


def split_preprocess(preprocess: Callable) -> tuple[Callable, Callable[[np.ndarray], torch.Tensor]]:
    """open_clip's eval preprocess cut at its to-tensor step: (PIL part, batch part).

    The PIL part (resize, crop, RGB) ends in uint8 pixels, a quarter of the float32 bytes, so it is what decode
    workers ship to the model's actors; the batch part turns a uint8 [B, H, W, C] batch into the normalised float
    batch with the same operations as the to-tensor step and those after it, so the values are bitwise the same.
    A preprocess without that step is kept whole: its output ships as it is and the batch part only stacks it.
    """
    steps = list(getattr(preprocess, "transforms", []))
    cut = next((i for i, step in enumerate(steps) if type(step).__name__ in _TO_TENSOR), None)
    if cut is None:
        return (lambda image: preprocess(image).numpy()), torch.from_numpy
    head, tail = steps[:cut], steps[cut + 1 :]

    def pixels(image: Image.Image) -> np.ndarray:
        for step in head:
            image = step(image)
        return np.asarray(image, dtype=np.uint8)

    def batch(images: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(images) if images.dtype != np.uint8 else _to_float(images)
        for step in tail:
            tensor = step(tensor)
        return tensor

    return pixels, batch


def _to_float(images: np.ndarray) -> torch.Tensor:
    """uint8 [B, H, W, C] -> float [B, C, H, W] in [0, 1], as torchvision's to_tensor does per image."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).contiguous().float().div(255)
