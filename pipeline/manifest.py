"""YAML manifests, validated with pydantic: one file per dataset under manifests/, overridable from the CLI."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.errors import UserError

# The manifests users see and edit live in the repository's top-level manifests/; setup.py copies them into the
# wheel as pipeline/manifests/, so an installed copy finds them too (docs/manifests.md).
_PACKAGE_MANIFESTS = Path(__file__).resolve().parent / "manifests"
_SOURCE_MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"
PACKAGE_PREFIX = "package:"  # `package:stages.embed/resources/x.json`: a file shipped inside an installed package


def bundled_manifest_dir() -> Path:
    """The manifests that come with the code: the installed package's copy, else the source checkout's."""
    return _PACKAGE_MANIFESTS if _PACKAGE_MANIFESTS.is_dir() else _SOURCE_MANIFESTS


DatasetFormat = Literal["coco", "flickr30k-token", "flickr30k-csv", "flickr30k-karpathy", "sample"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataConfig(_Section):
    format: DatasetFormat
    captions: Path = Field(description="caption file (COCO JSON, Flickr30K .token/.csv or Karpathy JSON)")
    images: Path = Field(description="folder holding the image files")
    split: str | None = Field(None, description="Karpathy JSON only: keep this split (train/val/test)")


class EmbedConfig(_Section):
    model: str = Field("ViT-B-32", description="open_clip model name")
    pretrained: str | None = Field("openai", description="open_clip pretrained tag or local checkpoint path")
    model_config_path: Path | None = Field(
        None,
        description="model config JSON (open_clip layout; package:PKG/PATH for a file inside an installed package); "
        "registered and built with random weights",
    )
    batch_size: int = Field(256, gt=0)
    num_workers: int = Field(8, ge=0)
    decode: Literal["auto", "workers", "device"] = Field(
        "auto",
        description="workers: PIL in DataLoader workers; device: batched decode_jpeg on the model's device "
        "(nvJPEG on CUDA); auto: device on CUDA, else workers",
    )
    precision: Literal["auto", "fp32", "fp16", "bf16"] = "auto"
    images_per_shard: int = Field(10_000, gt=0)


class MineConfig(_Section):
    k: int = Field(64, gt=0, description="neighbours per image, self excluded")
    pairs: Literal["unordered", "ordered"] = Field(
        "unordered",
        description="unordered: (i, j) and (j, i) kept once with image_id_1 < image_id_2; ordered: both",
    )
    knn: Literal["faiss", "torch"] = Field(
        "faiss", description="exact search by FAISS IndexFlatIP (GPU index on CUDA) or chunked torch.mm + topk"
    )
    candidates_per_shard: int = Field(4_000_000, gt=0)
    query_batch: int = Field(8192, gt=0, description="queries per FAISS search call")


class FilterConfig(_Section):
    max_iou: float | None = Field(None, ge=0, le=1)
    min_cosine: float | None = Field(None, ge=-1, le=1, description="minimum SimCSE cosine similarity")
    max_cosine: float | None = Field(None, ge=-1, le=1, description="maximum SimCSE cosine similarity")
    min_ratio: float | None = Field(None, ge=0, le=1)
    min_length: int | None = Field(None, ge=0)
    text_encoder: str = Field(
        "princeton-nlp/sup-simcse-roberta-large",
        description="sentence-transformers model name or path; 'packaged:all-MiniLM-L6-v2' for the demo model",
    )
    text_pooling: Literal["cls", "cls_pooler", "mean", "model"] = Field(
        "cls_pooler",
        description="cls: the CLS state; cls_pooler: the CLS state through the checkpoint's pooler (dense + tanh), "
        "as SimCSE's own tool; mean; model: a sentence-transformers model's own pooling",
    )
    text_batch_size: int = Field(256, gt=0)
    pairs_per_chunk: int = Field(2_000_000, gt=0)
    keep_rejected: bool = Field(False, description="also write the rejected pairs, with the first criterion failed")
    full_report: bool = Field(
        False, description="compute the cosine for every candidate, not only those passing the cheaper criteria"
    )


class RunConfig(_Section):
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N")


class Manifest(_Section):
    name: str
    description: str = ""
    demo_encoders: bool = Field(False, description="true when the encoders are random or demo models")
    work_dir: Path
    data: DataConfig
    run: RunConfig = RunConfig()
    embed: EmbedConfig = EmbedConfig()
    mine: MineConfig = MineConfig()
    filter: FilterConfig = FilterConfig()

    @model_validator(mode="after")
    def _cosine_bounds(self) -> Manifest:
        lo, hi = self.filter.min_cosine, self.filter.max_cosine
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"filter.min_cosine ({lo}) is above filter.max_cosine ({hi})")
        return self


def find_manifest(dataset: str | None, path: Path | None) -> tuple[Path, bool]:
    """The manifest file, and whether it is a bundled one. `--manifest PATH` takes any file; `--dataset NAME`
    means ./manifests/NAME.yaml when the current folder has it, else the bundled NAME.yaml."""
    if path is not None:
        return path, False
    if dataset is None:
        raise UserError("give --dataset NAME or --manifest PATH")
    local = Path.cwd() / "manifests" / f"{dataset}.yaml"
    if local.is_file():
        return local, False
    bundled = bundled_manifest_dir() / f"{dataset}.yaml"
    if bundled.is_file():
        return bundled, True
    folders = (Path.cwd() / "manifests", bundled_manifest_dir())
    known = ", ".join(sorted({p.stem for folder in folders for p in folder.glob("*.yaml")}))
    raise UserError(f"unknown dataset {dataset!r}: no manifests/{dataset}.yaml, here or bundled; known: {known}")


def manifest_path(dataset: str | None, path: Path | None) -> Path:
    """`--dataset coco` means manifests/coco.yaml (here, else bundled); `--manifest PATH` takes any file."""
    return find_manifest(dataset, path)[0]


def open_manifest(dataset: str | None, path: Path | None, overrides: dict[str, Any] | None = None) -> Manifest:
    """What the CLI loads: a bundled manifest's relative paths (work_dir, data) resolve against the current
    folder, never into the installed package; any other manifest's against its own folder (see load_manifest)."""
    found, bundled = find_manifest(dataset, path)
    return load_manifest(found, overrides, base=Path.cwd() if bundled else None)


def _describe(error: dict[str, Any]) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"unknown key {key!r}"
    if error["type"] == "missing":
        return f"missing key {key!r}"
    allowed = error.get("ctx", {}).get("expected")
    detail = f"allowed: {allowed}" if allowed else error["msg"].lower()
    return f"bad value for {key!r} ({error.get('input')!r}): {detail}"


def load_manifest(path: Path, overrides: dict[str, Any] | None = None, base: Path | None = None) -> Manifest:
    """Read, validate and apply dotted-key overrides such as {"mine.k": 64}. Relative paths written in the
    manifest resolve against `base`, by default the manifest's folder, or its parent when that folder is called
    `manifests`. Override values that are `Path`s come from the command line and, as in every CLI, resolve
    against the current folder. `package:PKG/REL` names a file shipped inside an installed package."""
    if not path.is_file():
        raise UserError(f"{path}: manifest not found")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a manifest must be a mapping of keys to values")
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section = raw
        *parents, leaf = dotted.split(".")
        for part in parents:
            section = section.setdefault(part, {})
        section[leaf] = str(_resolve(Path.cwd(), value)) if isinstance(value, Path) else value
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe(e) for e in exc.errors())
        raise UserError(f"{path}: {problems}") from None
    if base is None:
        folder = path.resolve().parent
        base = folder.parent if folder.name == "manifests" else folder
    manifest.work_dir = _resolve(base, manifest.work_dir)
    manifest.data.captions = _resolve(base, manifest.data.captions)
    manifest.data.images = _resolve(base, manifest.data.images)
    if manifest.embed.model_config_path is not None:
        manifest.embed.model_config_path = _resolve(base, manifest.embed.model_config_path)
    return manifest


def _resolve(base: Path, value: Path) -> Path:
    if str(value).startswith(PACKAGE_PREFIX):
        return package_file(str(value))
    value = value.expanduser()
    return value if value.is_absolute() else (base / value)


def package_file(spec: str) -> Path:
    """`package:stages.embed/resources/open_clip/x.json` -> that file inside the installed package (a regular
    folder, not a zip: the package is installed as files)."""
    package, _, relative = spec.removeprefix(PACKAGE_PREFIX).partition("/")
    if not package or not relative:
        raise UserError(f"{spec!r}: expected {PACKAGE_PREFIX}PACKAGE/PATH, e.g. {PACKAGE_PREFIX}stages.embed/x.json")
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError:
        raise UserError(f"{spec!r}: no Python package {package!r}") from None
    return Path(str(root.joinpath(*relative.split("/"))))
