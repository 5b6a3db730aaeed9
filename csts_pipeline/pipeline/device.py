"""Device selection shared by every stage that runs a model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from csts_pipeline.pipeline.errors import UserError

if TYPE_CHECKING:  # torch loads with the first model, not with the command line
    import torch


def resolve_device(spec: str = "auto") -> torch.device:
    """'auto' picks CUDA when present; asking for CUDA without a GPU is a user error, not a crash later on."""
    import torch

    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise UserError(f"unknown device {spec!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {spec}: no CUDA GPU is available on this machine (use --device cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s) present")
    elif device.type != "cpu":
        raise UserError(f"unsupported device {spec!r}; use auto, cpu, cuda or cuda:N")
    return device


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """Half precision on CUDA by default (bf16 where supported); full precision on the CPU."""
    import torch

    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
