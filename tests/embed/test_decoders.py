"""embed's device decoders: nvImageCodec's logic on the CPU through a stand-in module with the library's small
interface (what it is fed, what it returns, the backend fallback, the choice), and on a GPU with the library."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.embed import decoders
from csts_pipeline.stages.embed.decoders import NvImageCodecDecoder, TorchvisionDecoder, device_decoder
from csts_pipeline.stages.embed.images import DevicePreprocess
from tests.embed.test_images import encoder, photos  # noqa: F401  (fixtures)

JPEG, PNG = b"\xff\xd8\xff", b"\x89PNG"


class FakeNvImageCodec:
    """`nvidia.nvimgcodec` as far as NvImageCodecDecoder uses it: GPU backends decode JPEG only (PIL stands in
    for the hardware), so a PNG comes back None; a CodeStream of bytes no codec knows raises. Records every
    decode call's batch size and the backends each Decoder was made with."""

    def __init__(self, refuse_hardware: bool = False, refuse_all: bool = False):
        self.BackendKind = SimpleNamespace(HW_GPU_ONLY="BackendKind.HW_GPU_ONLY", GPU_ONLY="BackendKind.GPU_ONLY")
        self.ColorSpec = SimpleNamespace(SRGB="srgb")
        self.SampleFormat = SimpleNamespace(P_RGB="planar-rgb")
        self.calls: list[int] = []
        self.made: list[list[str]] = []
        self.refuse_hardware, self.refuse_all = refuse_hardware, refuse_all
        fake = self

        class Decoder:
            def __init__(self, device_id: int, backends: list):
                kinds = [backend.kind for backend in backends]
                if fake.refuse_all or (fake.refuse_hardware and fake.BackendKind.HW_GPU_ONLY in kinds):
                    raise RuntimeError("backend not available")
                fake.made.append(kinds)

            def decode(self, streams, params, cuda_stream=0):
                assert (params.color_spec, params.sample_format, params.apply_exif_orientation) == (
                    "srgb",
                    "planar-rgb",
                    False,
                )
                fake.calls.append(len(streams))
                return [fake.decode_one(stream.data) for stream in streams]

        self.Decoder = Decoder

    @staticmethod
    def Backend(kind):
        return SimpleNamespace(kind=kind)

    @staticmethod
    def DecodeParams(**params):
        return SimpleNamespace(**params)

    @staticmethod
    def CodeStream(array: np.ndarray):
        data = array.tobytes()
        if not data.startswith((JPEG, PNG)):
            raise RuntimeError("unknown code stream")
        return SimpleNamespace(data=data)

    @staticmethod
    def decode_one(data: bytes):
        if not data.startswith(JPEG):
            return None
        try:
            with Image.open(io.BytesIO(data)) as image:
                return np.ascontiguousarray(np.asarray(image.convert("RGB")).transpose(2, 0, 1))  # has __dlpack__
        except OSError:
            return None


def _bytes(paths: list[Path]) -> list[torch.Tensor]:
    return [torch.from_numpy(np.fromfile(path, np.uint8)) for path in paths]


def test_nvimgcodec_gets_one_batch_of_code_streams_and_returns_planar_rgb_or_none(photos):  # noqa: F811
    fake = FakeNvImageCodec()
    decoder = NvImageCodecDecoder(torch.device("cpu"), fake)
    text = torch.frombuffer(bytearray(b"not an image at all"), dtype=torch.uint8)
    out = decoder.decode_batch([*_bytes(photos), text])
    # bytes no codec knows never reach the decoder (no code stream); the rest go in one call
    assert fake.calls == [len(photos)]
    assert fake.made == [["BackendKind.HW_GPU_ONLY", "BackendKind.GPU_ONLY"]]
    assert decoder.backends == ["HW_GPU_ONLY", "GPU_ONLY"]
    assert [item is None for item in out] == [False] * 4 + [True] * 3  # PNG, broken JPEG, text: None
    for path, image in zip(photos[:4], out[:4]):
        with Image.open(path) as reference:
            expected = torch.from_numpy(np.array(reference.convert("RGB"))).permute(2, 0, 1)
        assert image.dtype == torch.uint8 and image.shape == expected.shape
        assert torch.equal(image, expected)


def test_without_hardware_decoders_nvimgcodec_uses_the_cuda_backend_and_without_either_torchvision(monkeypatch):
    fake = FakeNvImageCodec(refuse_hardware=True)
    decoder = NvImageCodecDecoder(torch.device("cpu"), fake)
    assert decoder.backends == ["GPU_ONLY"] and fake.made == [["BackendKind.GPU_ONLY"]]
    broken = FakeNvImageCodec(refuse_all=True)
    with pytest.raises(RuntimeError, match="no GPU decoder backend"):
        NvImageCodecDecoder(torch.device("cpu"), broken)
    monkeypatch.setattr(decoders, "nvimgcodec_module", lambda: broken)
    assert isinstance(device_decoder("device", torch.device("cuda")), TorchvisionDecoder)


def test_the_device_decoder_is_nvimgcodec_on_cuda_where_installed_and_torchvision_elsewhere(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(decoders, "nvimgcodec_module", lambda: FakeNvImageCodec())
    assert device_decoder("device", cuda).name == "nvimgcodec"
    assert device_decoder("auto", cuda).name == "nvimgcodec"
    assert device_decoder("device", cpu).name == "torchvision"  # the CPU default stays libjpeg
    assert device_decoder("torchvision", cuda).name == "torchvision"
    assert device_decoder("nvimgcodec", cpu).name == "nvimgcodec"
    monkeypatch.setattr(decoders, "nvimgcodec_module", lambda: None)
    assert device_decoder("device", cuda).name == "torchvision"
    with pytest.raises(UserError, match="nvidia-nvimgcodec-cu13"):
        device_decoder("nvimgcodec", cuda)


def test_nvimgcodec_batches_go_through_the_same_preprocess_and_fallback_as_torchvision(photos, encoder):  # noqa: F811
    """PNG: decoded by PIL after nvImageCodec returned None; the broken file: reported, not raised; the pixels
    equal the torchvision path's up to the two JPEG decoders' rounding."""
    cpu = torch.device("cpu")
    config = encoder.preprocess_config
    nv_rows, nv_batch, nv_failed = DevicePreprocess(config, cpu, NvImageCodecDecoder(cpu, FakeNvImageCodec()))(
        _bytes(photos)
    )
    tv_rows, tv_batch, tv_failed = DevicePreprocess(config, cpu, TorchvisionDecoder(cpu))(_bytes(photos))
    assert nv_rows == tv_rows == [0, 1, 2, 3, 4]
    assert [row for row, _ in nv_failed] == [row for row, _ in tv_failed] == [5]
    assert "unreadable image" in nv_failed[0][1]
    assert nv_batch.shape == tv_batch.shape
    assert (nv_batch - tv_batch).abs().mean() < 0.05


@pytest.mark.skipif(
    not torch.cuda.is_available() or decoders.nvimgcodec_module() is None, reason="needs CUDA and nvImageCodec"
)
def test_nvimgcodec_on_the_gpu_decodes_as_pil_does(photos):  # noqa: F811
    device = torch.device("cuda")
    decoder = device_decoder("device", device)
    assert decoder.name == "nvimgcodec"
    out = decoder.decode_batch(_bytes(photos))
    assert out[4] is None or out[4].shape == (3, 200, 300)  # a PNG: PIL's, unless a GPU backend took it
    assert out[5] is None
    for path, image in zip(photos[:4], out[:4]):
        with Image.open(path) as reference:
            expected = torch.from_numpy(np.array(reference.convert("RGB"))).permute(2, 0, 1)
        assert image.device.type == "cuda" and image.shape == expected.shape
        assert (image.cpu().float() - expected.float()).abs().mean() < 2.0  # IDCT and upsampling rounding
