"""YAML manifests, validated with pydantic: one file per dataset under manifests/, overridable from the CLI. The
sections (data, run, embed, mine, filter, train) and the reading of a manifest file live here; where manifests
are and what their paths mean: pipeline.manifest_paths; the paper's training presets: stages.train.presets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from csts_pipeline.pipeline import storage
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest_paths import find_manifest, localise_urls, resolve_path
from csts_pipeline.pipeline.urls import is_url

DatasetFormat = Literal[
    "coco",
    "flickr30k-token",
    "flickr30k-csv",
    "flickr30k-karpathy",
    "sample",
    "webdataset",
    "parquet",
    "clip-retrieval",
]
ARCHIVE_FORMATS = ("webdataset", "parquet", "clip-retrieval")  # the images folder holds the captions too

SEED_MAX = 2**32 - 1  # numpy's legacy seeding (train's set_seed) takes 0 to 2**32 - 1


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML's `true` is not the number 1: a bool is accepted only where the field is a bool."""
        field = cls.model_fields[info.field_name] if info.field_name else None
        if isinstance(value, bool) and field is not None and "bool" not in str(field.annotation).lower():
            raise ValueError("a true/false value where a number or text is expected")
        return value


class DataConfig(_Section):
    format: DatasetFormat
    captions: Path | None = Field(
        None, description="caption file (COCO JSON, Flickr30K .token/.csv or Karpathy JSON); not for webdataset/parquet"
    )
    images: Path = Field(
        description="folder holding the image files (webdataset: the .tar shards; parquet: the .parquet files; "
        "clip-retrieval: the folder with img_emb/ and metadata/, whose embeddings replace embed's model)"
    )
    split: str | None = Field(None, description="Karpathy JSON only: keep this split (train/val/test)")
    image_column: str = Field("jpg", description="parquet: the column of image bytes")
    caption_columns: list[str] = Field(["txt"], min_length=1, description="parquet: caption column(s)")
    key_column: str | None = Field("key", description="parquet: the sample key column (null: file and row)")

    @model_validator(mode="after")
    def _caption_file_needed(self) -> DataConfig:
        if self.captions is None and self.format not in ARCHIVE_FORMATS:
            raise ValueError(f"data.captions is required for format {self.format}")
        return self


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
    decode: Literal["auto", "workers", "device", "nvimgcodec", "torchvision"] = Field(
        "auto",
        description="workers: PIL in DataLoader workers; device: batched decoding on the model's device, by "
        "nvImageCodec (hardware JPEG decoders) on CUDA where installed, else torchvision's decode_jpeg (nvJPEG on "
        "CUDA); nvimgcodec / torchvision: that device decoder; auto: device on CUDA, else workers",
    )
    precision: Literal["auto", "fp32", "fp16", "bf16"] = "auto"
    images_per_shard: int = Field(10_000, gt=0)
    dtype: Literal["float32", "float16"] = Field(
        "float32", description="stored embedding type: float16 halves the shards and mine's re-ranking reads"
    )


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
    query_batch: int = Field(8192, gt=0, description="queries per search call, and images per image-pairs shard")
    index: Literal["auto", "exact", "ivf", "ivf_sq8", "ivf_pq", "hnsw"] = Field(
        "auto",
        description="exact; ivf (FAISS IVF-Flat, GPU on CUDA), ivf_sq8 / ivf_pq (compressed, re-ranked exactly) or "
        "hnsw (FAISS HNSW), tuned to recall_target; auto: exact below exact_below images, else the most accurate "
        "IVF index that fits memory_budget (docs/mine.md)",
    )
    memory_budget: float = Field(
        8.0, gt=0, description="GiB the mine process may use: auto picks its index to fit (docs/mine.md)"
    )
    gpu_memory_budget: float | None = Field(
        None,
        gt=0,
        description="GiB the search may take on a CUDA device (an exact base, an IVF index there); default 90% of "
        "the device's memory (docs/mine.md)",
    )
    parts: int = Field(
        1, ge=1, description="Ray executor: the base split into this many parts, each indexed by its own Ray actor"
    )
    rerank: int = Field(
        8, ge=1, description="compressed indexes: k x rerank candidates per query, re-ranked with the full vectors"
    )
    by: Literal["image", "text"] = Field(
        "image",
        description="image: neighbours by CLIP image embedding; text: by the mean sentence embedding of each "
        "image's captions (filter.text_encoder), after SemEval-2017's pair selection",
    )
    exact_below: int = Field(200_000, gt=0, description="auto: exact search below this many images")
    recall_target: float = Field(0.95, gt=0, le=1, description="approximate: minimum recall@k on the sample")
    recall_sample: int = Field(1000, gt=0, description="approximate: query images whose recall is measured")
    seed: int = Field(0, ge=0, le=SEED_MAX, description="approximate: seed of the training and recall samples")
    ivf_lists: int | None = Field(None, gt=0, description="ivf: inverted lists (default about sqrt(N))")
    hnsw_m: int = Field(32, gt=1, description="hnsw: graph links per node")
    hnsw_ef_construction: int = Field(80, gt=0, description="hnsw: candidate list size while building")


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
    pairs_per_chunk: int = Field(262_144, gt=0)  # metric arrays of a chunk stay in cache and reuse freed memory
    keep_rejected: bool = Field(False, description="also write the rejected pairs, with the first criterion failed")
    full_report: bool = Field(
        False, description="compute the cosine for every candidate, not only those passing the cheaper criteria"
    )


class RunConfig(_Section):
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N (checked before any work)")
    executor: Literal["local", "ray"] = Field(
        "local", description="local: units in this process; ray: units in Ray actors (the ray extra, docs/ray.md)"
    )
    ray_address: str | None = Field(
        None, description="with executor ray: None starts a local Ray, auto joins this machine's cluster, or an address"
    )

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
            raise ValueError("use auto, cpu, cuda or cuda:N")
        return value


PRECISION_HELP = "auto (bf16/fp16 autocast on CUDA, fp32 on CPU), fp32, fp16 or bf16."


class TrainConfig(_Section):
    """The `train` hyperparameters: one field each, with its default, bounds and description. The `train` command's
    options are made from these fields (option `--<name>`, or `cli_flag`; help: the description)."""

    model: str = Field(
        "packaged:all-MiniLM-L6-v2",
        description="HF model name or folder; packaged:all-MiniLM-L6-v2 (the default) ships.",
    )
    encoding: str = Field("bi", description="cross, bi (default) or tri.")
    objective: str = Field("mse", description="mse (default), quad or quad+mse (bi and tri only).")
    pooler: str = Field("auto", description="cls-mlp, cls or mean (default: the model's own pooling, else cls).")
    transform: bool = Field(False, description="Linear layer + activation after pooling.")
    tri_head: str = Field("hadamard", description="Tri-encoder h(c, s): hadamard (default) or concat.")
    margin: float = Field(1.0, ge=0, description="Quad loss margin (default 1.0).")
    strict_pairs: bool = Field(
        False, description="Quad: refuse tied labels and pairs without two rows (default: train on ties, drop those)."
    )
    select: str = Field(
        "best", description="Model kept and scored: best validation epoch (default) or last (paper presets)."
    )
    learning_rate: float = Field(
        2e-5, gt=0, description="Peak learning rate (AdamW).", json_schema_extra={"cli_flag": "lr"}
    )
    batch_size: int = Field(16, ge=1, description="Rows per batch (Quad: even, whole pairs).")
    grad_accum: int = Field(1, ge=1, description="Batches per optimizer step.")
    epochs: int = Field(3, ge=1, description="Training epochs.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many optimizer steps.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay (not on biases and norms).")
    warmup_ratio: float = Field(0.1, ge=0, lt=1, description="Linear warmup over this share of the steps.")
    max_grad_norm: float = Field(1.0, ge=0, description="Gradient clipping norm; 0 turns clipping off.")
    max_length: int = Field(128, ge=1, description="Tokens per encoded sequence.")
    seed: int = Field(
        42, ge=0, le=SEED_MAX, description="Random seed (initialisation and batch order), 0 to 4294967295."
    )
    precision: str = Field("auto", description=PRECISION_HELP)
    min_label: float | None = Field(None, description="Label scaled to 0 (default: 1, C-STS's lowest label).")
    max_label: float | None = Field(None, description="Label scaled to 1 (default: 5, C-STS's highest label).")
    condition_only: bool = Field(False, description="Ablation: the cross-encoder sees only the condition.")
    sentences_only: bool = Field(False, description="Ablation: the cross-encoder sees only the sentences.")
    eval_batch_size: int = Field(64, ge=1, description="Rows per batch when scoring.")

    @field_validator("precision")
    @classmethod
    def _known_precision(cls, value: str) -> str:
        if value not in ("auto", "fp32", "fp16", "bf16"):
            raise ValueError("use auto, fp32, fp16 or bf16")
        return value

    @field_validator("select")
    @classmethod
    def _known_selection(cls, value: str) -> str:
        if value not in ("best", "last"):
            raise ValueError("use best or last")
        return value

    @model_validator(mode="after")
    def _quad_batches_are_even(self) -> TrainConfig:
        if self.objective != "mse" and self.batch_size % 2:
            raise ValueError(f"--batch-size {self.batch_size}: the Quad objective needs an even batch (pairs of rows)")
        return self

    @staticmethod
    def cli_flag(name: str) -> str:
        """The command-line option of a field: `--lr` for learning_rate, else `--<name with dashes>`."""
        extra = TrainConfig.model_fields[name].json_schema_extra
        flag = extra.get("cli_flag") if isinstance(extra, dict) else None
        return f"--{flag or name.replace('_', '-')}"


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
    train: TrainConfig = TrainConfig()
    # data.captions / data.images given as URLs: their cache copies (the fields' values) are filled by fetch_inputs
    _input_urls: dict[str, str] = PrivateAttr(default_factory=dict)

    def fetch_inputs(self) -> None:
        """Copy the URL inputs into the cache, where the dataset readers find them; only the data commands call
        this, so that `train` or `annotate` with the same manifest downloads nothing."""
        for field, url in self._input_urls.items():
            storage.fetch(url, getattr(self.data, field))

    @model_validator(mode="after")
    def _cosine_bounds(self) -> Manifest:
        lo, hi = self.filter.min_cosine, self.filter.max_cosine
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"filter.min_cosine ({lo}) is above filter.max_cosine ({hi})")
        return self


def _duplicate_key(node: yaml.Node | None, at: str = "") -> str | None:
    """The first key given twice in one mapping of a YAML node tree (`k: 8` then `k: 9`), with its dotted name and
    lines; YAML's loaders keep the last silently, a manifest refuses it."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value in node.value:
            key, line = str(key_node.value), key_node.start_mark.line + 1
            dotted = f"{at}.{key}" if at else key
            if key in seen:
                return f"key {dotted!r} given twice (lines {seen[key]} and {line}); keep one"
            seen[key] = line
            if found := _duplicate_key(value, dotted):
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            if found := _duplicate_key(item, f"{at}[{index}]"):
                return found
    return None


def open_manifest(dataset: str | None, path: str | Path | None, overrides: dict[str, Any] | None = None) -> Manifest:
    """What the CLI loads: a bundled manifest's relative paths (work_dir, data) resolve against the current
    folder, never into the installed package; any other manifest's against its own folder (see load_manifest).
    A manifest given as a URL is copied into the cache, and its relative paths resolve against its URL folder."""
    if is_url(path):
        url = str(path)
        local = storage.fetch(url, storage.input_copy(url, is_file=True))
        return load_manifest(local, overrides, base_url=url.rsplit("/", 1)[0])
    found, bundled = find_manifest(dataset, Path(path) if path is not None else None)
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


def load_manifest(
    path: Path, overrides: dict[str, Any] | None = None, base: Path | None = None, base_url: str | None = None
) -> Manifest:
    """Read, validate and apply dotted-key overrides such as {"mine.k": 64}. Relative paths written in the
    manifest resolve against `base`, by default the manifest's folder, or its parent when that folder is called
    `manifests`. Override values that are `Path`s come from the command line and, as in every CLI, resolve
    against the current folder. `package:PKG/REL` names a file shipped inside an installed package. work_dir,
    data.captions and data.images may be URLs (pipeline.storage); `base_url` is a remote manifest's folder."""
    if not path.is_file():
        raise UserError(f"{path}: manifest not found")
    try:
        text = path.read_text(encoding="utf-8")
        duplicate = _duplicate_key(yaml.compose(text, Loader=yaml.SafeLoader))
        raw = yaml.safe_load(text) or {}
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if duplicate:
        raise UserError(f"{path}: {duplicate}")
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a manifest must be a mapping of keys to values")
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section = raw
        *parents, leaf = dotted.split(".")
        for part in parents:
            if section.get(part) is None:  # `mine:` (null) in the file: an empty section the override fills
                section[part] = {}
            section = section[part]
            if not isinstance(section, dict):
                raise UserError(f"{path}: '{part}' must be a mapping of keys to values, to set {dotted}")
        section[leaf] = str(resolve_path(Path.cwd(), value)) if isinstance(value, Path) else value
    inputs = localise_urls(raw, base_url)
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe(dict(e)) for e in exc.errors())
        raise UserError(f"{path}: {problems}") from None
    manifest._input_urls = inputs
    if base is None:
        folder = path.resolve().parent
        base = folder.parent if folder.name == "manifests" else folder
    manifest.work_dir = resolve_path(base, manifest.work_dir)
    if manifest.work_dir.is_file():
        raise UserError(f"{manifest.work_dir}: a file, not a folder; work_dir (--out) names the folder of the outputs")
    if manifest.data.captions is not None:
        manifest.data.captions = resolve_path(base, manifest.data.captions)
    manifest.data.images = resolve_path(base, manifest.data.images)
    if manifest.embed.model_config_path is not None:
        manifest.embed.model_config_path = resolve_path(base, manifest.embed.model_config_path)
    return manifest
