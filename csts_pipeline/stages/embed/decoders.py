"""JPEG decoders of embed's `device` path: a batch of file bytes in, CHW uint8 RGB tensors on the device out.

- `NvImageCodecDecoder`: nvImageCodec (`nvidia.nvimgcodec`, wheels `nvidia-nvimgcodec-cu13` and `nvidia-nvjpeg`),
  one batched call per batch on the GPU's hardware JPEG decoders where it has them (A100, H100), else nvJPEG's
  CUDA backend: torchvision's nvJPEG path runs on the CUDA cores only, which bounded embed at 1,681 images/s on an
  H100 (docs/performance.md).
- `TorchvisionDecoder`: `torchvision.io.decode_jpeg` on the device (nvJPEG's CUDA backend on a GPU, libjpeg on the
  CPU): the reference, and what a machine without nvImageCodec gets.

Both answer `decode_batch(data) -> [tensor or None]`: None where this decoder cannot decode a file (a PNG, a CMYK
JPEG, a broken file), which `decode_all` then hands to PIL one by one, so every file is decoded or reported.
`device_decoder` picks one for `embed.decode` on a device.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from csts_pipeline.pipeline.errors import UserError

NVIMGCODEC = "nvimgcodec"
TORCHVISION = "torchvision"


class JpegDecoder(Protocol):
    name: str

    def decode_batch(self, data: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """[3, H, W] uint8 RGB on the device per file, in order; None where this decoder could not decode it."""
        ...


class TorchvisionDecoder:
    """`torchvision.io.decode_jpeg` on `device`: the batch in one call, file by file when the batch fails."""

    name = TORCHVISION

    def __init__(self, device: torch.device):
        self.device = device

    def decode_batch(self, data: list[torch.Tensor]) -> list[torch.Tensor | None]:
        from torchvision.io import ImageReadMode, decode_jpeg

        try:
            return list(decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device))
        except RuntimeError:
            pass
        out: list[torch.Tensor | None] = []
        for item in data:
            try:
                out.append(decode_jpeg(item, mode=ImageReadMode.RGB, device=self.device))
            except RuntimeError:
                out.append(None)
        return out


class NvImageCodecDecoder:
    """nvImageCodec on a CUDA device: backends tried in order, hardware decoders first (`HW_GPU_ONLY`), then
    nvJPEG's CUDA backend (`GPU_ONLY`); a GPU without hardware decoders, or a library that refuses the hardware
    backend, decodes with the CUDA one. Planar RGB output, so each image is [3, H, W] as torchvision's; EXIF
    orientation is not applied, as neither the PIL nor the torchvision path applies it. `module` is
    `nvidia.nvimgcodec` (`nvimgcodec_module`), or a stand-in for tests that run without a GPU."""

    name = NVIMGCODEC

    def __init__(self, device: torch.device, module: Any):
        self.module, self.device = module, device
        kinds = module.BackendKind
        self.backends: list[str] = []
        self.decoder = None
        for backends in ([kinds.HW_GPU_ONLY, kinds.GPU_ONLY], [kinds.GPU_ONLY]):
            try:
                self.decoder = module.Decoder(
                    device_id=device.index or 0, backends=[module.Backend(kind) for kind in backends]
                )
            except RuntimeError:
                continue
            self.backends = [str(kind).rsplit(".", 1)[-1] for kind in backends]
            break
        if self.decoder is None:
            raise RuntimeError("nvImageCodec: no GPU decoder backend could be created")
        self.params = module.DecodeParams(
            apply_exif_orientation=False, color_spec=module.ColorSpec.SRGB, sample_format=module.SampleFormat.P_RGB
        )

    def decode_batch(self, data: list[torch.Tensor]) -> list[torch.Tensor | None]:
        streams, positions = [], []
        for position, item in enumerate(data):
            try:
                streams.append(self.module.CodeStream(item.numpy()))
            except (RuntimeError, ValueError):  # not an image format the library knows
                continue
            positions.append(position)
        out: list[torch.Tensor | None] = [None] * len(data)
        if not streams:
            return out
        stream = torch.cuda.current_stream(self.device).cuda_stream if self.device.type == "cuda" else 0
        decoded = self.decoder.decode(streams, params=self.params, cuda_stream=stream)
        for position, image in zip(positions, decoded):
            if image is not None:
                tensor = torch.from_dlpack(image)
                out[position] = tensor if tensor.shape[0] == 3 else None  # planar RGB, else PIL decides
        return out


def nvimgcodec_module() -> Any:
    """`nvidia.nvimgcodec` where its wheels are installed, else None; it needs a GPU only to decode."""
    try:
        from nvidia import nvimgcodec
    except ImportError:
        return None
    return nvimgcodec


def device_decoder(setting: str, device: torch.device) -> JpegDecoder:
    """The decoder of `embed.decode` on `device`: `device` (and `auto`) takes nvImageCodec on a CUDA device where
    it is installed and starts, else torchvision; `nvimgcodec` and `torchvision` ask for one (nvimgcodec fails in
    one line without its wheels). On the CPU `device` is torchvision's libjpeg: nvImageCodec's backends here are
    GPU ones."""
    if setting == TORCHVISION or (setting != NVIMGCODEC and device.type != "cuda"):
        return TorchvisionDecoder(device)
    module = nvimgcodec_module()
    if setting == NVIMGCODEC:
        if module is None:
            raise UserError(
                "embed.decode=nvimgcodec needs nvImageCodec: pip install nvidia-nvimgcodec-cu13 nvidia-nvjpeg "
                "(or -cu12 for CUDA 12), or use embed.decode: device"
            )
        return NvImageCodecDecoder(device, module)
    if module is not None:
        try:
            return NvImageCodecDecoder(device, module)
        except RuntimeError:  # no decoder backend on this GPU: the torchvision path still works
            pass
    return TorchvisionDecoder(device)
