"""Weights files checked before a loader reads them, so a damaged one (a copy cut short, a download that stopped) is
one line naming the file and what is wrong, never the loader's traceback (`SafetensorError: incomplete metadata`,
`cannot reshape array`). Used by every model loader: train/evaluate's encoder, filter's text encoder, the local
language model (a folder or a `.gguf` file) and embed's CLIP checkpoint. Only headers are read: a check costs
milliseconds, not a pass over the weights.

- safetensors: an 8-byte header length, a JSON header, and tensors whose data offsets match their dtype and
  shape and cover the rest of the file exactly (what the safetensors loader demands);
- GGUF: the magic, a header that ends inside the file, and tensor data that the file holds to its end;
- a PyTorch zip checkpoint (`.bin`, `.pt`, `.pth`): a zip whose directory (at the file's end) can be read."""

from __future__ import annotations

import json
import math
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from csts_pipeline.pipeline.errors import UserError

SAFETENSORS_HEADER_MAX = 100_000_000  # bytes: the safetensors loader's own limit on its JSON header
DTYPE_BYTES = {
    **dict.fromkeys(("BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0"), 1),
    **dict.fromkeys(("U16", "I16", "F16", "BF16"), 2),
    **dict.fromkeys(("U32", "I32", "F32"), 4),
    **dict.fromkeys(("U64", "I64", "F64"), 8),
}
GGUF_MAGIC = b"GGUF"
GGUF_ALIGNMENT = 32  # the default of `general.alignment`
GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
WEIGHT_SUFFIXES = {".safetensors", ".gguf", ".bin", ".pt", ".pth"}


def check_weights(source: str | Path) -> None:
    """Raise a one-line UserError for the first damaged weights file of `source`: a weights file, or a model folder
    (its weights files and those one folder down, as sentence-transformers modules keep them). A name that is no
    local path (a hub name to download) is left to the loader."""
    path = Path(source).expanduser()
    for file in _weights_files(path):
        problem = weights_problem(file)
        if problem is not None:
            raise UserError(f"{file}: {problem}; the weights file is damaged (copy or download it again)")


def _weights_files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
    elif path.is_dir():
        for pattern in ("*", "*/*"):
            for file in sorted(path.glob(pattern)):
                hidden = any(part.startswith(".") for part in file.relative_to(path).parts)
                if file.suffix in WEIGHT_SUFFIXES and not hidden and file.is_file():
                    yield file


def weights_problem(file: Path) -> str | None:
    """What is wrong with one weights file, by its suffix (or its first bytes), or None when its header holds."""
    try:
        with file.open("rb") as handle:
            start = handle.read(4)
            handle.seek(0)
            if file.suffix == ".gguf" or start == GGUF_MAGIC:
                return gguf_problem(handle, file.stat().st_size)
            if file.suffix == ".safetensors":
                return safetensors_problem(handle, file.stat().st_size)
            if start.startswith(b"PK"):
                return _zip_problem(file)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc.__class__.__name__})"
    return None


def safetensors_problem(handle: IO[bytes], size: int) -> str | None:
    """A safetensors file's header against its size; None when every tensor's bytes are there and nothing else."""
    if size < 8:
        return f"{size} bytes: too short for a safetensors file (an 8-byte header length comes first)"
    (length,) = struct.unpack("<Q", handle.read(8))
    if length > min(size - 8, SAFETENSORS_HEADER_MAX):
        return f"a safetensors header of {length:,} bytes in a file of {size:,} bytes (truncated, or not safetensors)"
    try:
        header = json.loads(handle.read(length))
    except (ValueError, UnicodeDecodeError):
        return f"a safetensors header that is not JSON ({length:,} bytes)"
    if not isinstance(header, dict):
        return "a safetensors header that is not a JSON object"
    data = size - 8 - length
    end = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        problem = _tensor_problem(name, tensor, data)
        if problem is not None:
            return problem
        end = max(end, tensor["data_offsets"][1])
    if end != data:
        cut = "truncated" if end > data else "extra bytes after the last tensor"
        return f"its header says the tensor data is {end:,} bytes, the file holds {data:,} ({cut})"
    return None


def _tensor_problem(name: str, tensor: Any, data: int) -> str | None:
    """What is wrong with one safetensors header entry: offsets, or a byte count its dtype and shape contradict."""
    try:
        begin, end = (int(value) for value in tensor["data_offsets"])
        shape, dtype = [int(n) for n in tensor["shape"]], str(tensor["dtype"])
    except (KeyError, TypeError, ValueError):
        return f"tensor {name!r}: a header entry without dtype, shape and two data offsets"
    if not 0 <= begin <= end:
        return f"tensor {name!r}: data offsets {begin}..{end} out of order"
    if dtype in DTYPE_BYTES and end - begin != math.prod(shape) * DTYPE_BYTES[dtype]:
        return f"tensor {name!r}: {end - begin:,} bytes for a {dtype} tensor of shape {shape}"
    if end > data:
        return f"tensor {name!r} ends at byte {end:,} of the data, the file holds {data:,} (truncated)"
    return None


class _Short(Exception):
    """The GGUF header ends before what it announces."""


def gguf_problem(handle: IO[bytes], size: int) -> str | None:
    """A GGUF file's header and tensor table against its size; None when the file holds every tensor's data."""
    reader = _GgufReader(handle, size)
    try:
        if reader.take(4) != GGUF_MAGIC:
            return "not a GGUF file (no GGUF magic at its start)"
        version = reader.unpack("<I")
        if version < 2:
            return f"GGUF version {version}: too old to load"
        tensors, fields = reader.unpack("<Q"), reader.unpack("<Q")
        alignment = GGUF_ALIGNMENT
        for _ in range(fields):
            key, value = reader.string(), reader.value(reader.unpack("<I"))
            if key == "general.alignment" and isinstance(value, int) and value > 0:
                alignment = value
        table = [reader.tensor_info() for _ in range(tensors)]
    except _Short as short:
        return f"{size:,} bytes: the GGUF header ends inside {short} (truncated)"
    start = -(-reader.position // alignment) * alignment
    end = max((offset + length for offset, length in table if length is not None), default=0)
    if start + end > size:
        return f"its GGUF header says the tensor data ends at byte {start + end:,}, the file has {size:,} (truncated)"
    return None


class _GgufReader:
    """Sequential reads of a GGUF header (little-endian, version 2 and 3), bounded by the file's size."""

    SCALARS = GGUF_SCALARS
    STRING, ARRAY = 8, 9

    def __init__(self, handle: IO[bytes], size: int):
        self.handle, self.size, self.position = handle, size, 0

    def take(self, count: int, what: str = "the header") -> bytes:
        if self.position + count > self.size:
            raise _Short(what)
        self.position += count
        return self.handle.read(count)

    def unpack(self, form: str, what: str = "the header") -> Any:
        return struct.unpack(form, self.take(struct.calcsize(form), what))[0]

    def string(self) -> str:
        return self.take(self.unpack("<Q", "a string"), "a string").decode("utf-8", "replace")

    def value(self, kind: int) -> Any:
        if kind in self.SCALARS:
            return self.unpack(self.SCALARS[kind], "a value")
        if kind == self.STRING:
            return self.string()
        if kind != self.ARRAY:
            raise _Short(f"a value of unknown type {kind}")
        item, count = self.unpack("<I", "an array"), self.unpack("<Q", "an array")
        if item in self.SCALARS:  # skipped whole: a vocabulary's scores need no parsing
            self.take(struct.calcsize(self.SCALARS[item]) * count, "an array")
            return None
        for _ in range(count):
            self.value(item)
        return None

    def tensor_info(self) -> tuple[int, int | None]:
        """(offset in the data, bytes) of one tensor; bytes None for a type this gguf package does not know."""
        self.string()
        dims = [self.unpack("<Q", "the tensor table") for _ in range(self.unpack("<I", "the tensor table"))]
        kind, offset = self.unpack("<I", "the tensor table"), self.unpack("<Q", "the tensor table")
        return offset, _tensor_bytes(kind, math.prod(dims))


def _tensor_bytes(kind: int, count: int) -> int | None:
    try:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ImportError, KeyError, ValueError):
        return None
    return count // block * size


def _zip_problem(file: Path) -> str | None:
    """A PyTorch zip checkpoint whose directory cannot be read (it sits at the end: a cut file loses it)."""
    try:
        with zipfile.ZipFile(file):
            return None
    except (zipfile.BadZipFile, EOFError) as exc:
        return f"a zip checkpoint that cannot be opened ({exc}; truncated?)"
