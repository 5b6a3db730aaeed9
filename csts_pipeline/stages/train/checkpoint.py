"""Resume checkpoints of `train` without pickle: one safetensors file holding every tensor (model weights,
optimizer moments, RNG states) and, in its metadata, a JSON document holding everything else (optimizer groups,
scheduler and scaler settings, the run's progress) with references to the tensors.

Loading one runs no code, whoever wrote the file: safetensors holds only raw tensor bytes and JSON holds only
strings, numbers, lists and mappings. Written atomically (`.<name>.tmp`, then renamed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.shards import write_atomic

FORMAT = 1
_TENSOR = "__tensor__"  # {"__tensor__": key}: the tensor stored under `key`
_ITEMS = "__items__"  # {"__items__": [[key, value], ...]}: a mapping whose keys are not all strings (optimizer state)


class _Packer:
    """Turns a tree of mappings, sequences, numbers and tensors into JSON plus a flat name -> tensor mapping."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._storages: set[int] = set()

    def pack(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return {_TENSOR: self._add(value)}
        if isinstance(value, dict):
            if all(isinstance(key, str) for key in value):
                return {key: self.pack(item) for key, item in value.items()}
            return {_ITEMS: [[key, self.pack(item)] for key, item in value.items()]}
        if isinstance(value, list | tuple):
            return [self.pack(item) for item in value]
        if value is None or isinstance(value, bool | int | float | str):
            return value
        raise TypeError(f"checkpoint: cannot store a {type(value).__name__}")

    def _add(self, tensor: torch.Tensor) -> str:
        key = f"t{len(self.tensors)}"
        tensor = tensor.detach()
        storage = tensor.untyped_storage().data_ptr()
        if storage in self._storages and tensor.numel():  # safetensors refuses tensors that share memory
            tensor = tensor.clone()
        self._storages.add(storage)
        self.tensors[key] = tensor.contiguous()
        return key


def _unpack(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, dict):
        if set(value) == {_TENSOR}:
            return tensors[value[_TENSOR]]
        if set(value) == {_ITEMS}:
            return {key: _unpack(item, tensors) for key, item in value[_ITEMS]}
        return {key: _unpack(item, tensors) for key, item in value.items()}
    if isinstance(value, list):
        return [_unpack(item, tensors) for item in value]
    return value


def save_checkpoint(path: Path, content: dict[str, Any]) -> None:
    """Write `content` (state dicts, numbers, tensors) to `path` atomically."""
    packer = _Packer()
    document = {"format": FORMAT, "content": packer.pack(content)}
    blob = save(packer.tensors, metadata={"checkpoint": json.dumps(document)})
    write_atomic(path, lambda handle: handle.write(blob))


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The content `save_checkpoint` wrote, its tensors on `device`."""
    try:
        with safe_open(str(path), framework="pt", device=str(device)) as reader:
            document = json.loads((reader.metadata() or {})["checkpoint"])
            tensors = {key: reader.get_tensor(key) for key in reader.keys()}  # noqa: SIM118 (not a dict)
        if document.get("format") != FORMAT:
            raise ValueError(f"format {document.get('format')!r}, expected {FORMAT}")
        return _unpack(document["content"], tensors)
    except (SafetensorError, OSError, KeyError, ValueError) as exc:
        raise UserError(f"{path}: not a readable train checkpoint ({exc}); --force starts afresh") from None


def rng_states() -> dict[str, object]:
    """The CPU and CUDA generators' states, for a resume that continues the same random streams."""
    states: dict[str, object] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng(states: dict) -> None:
    torch.set_rng_state(states["cpu"].cpu())
    if "cuda" in states and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([state.cpu() for state in states["cuda"]])
