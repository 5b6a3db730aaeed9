"""C-STS models of Deshpande et al. (2023), Section 4.1, on any Hugging Face encoder (AutoModel/AutoTokenizer):

- cross: `s1 [SEP] s2 [SEP] c` in one sequence, pooled, a linear regression head;
- bi: `(s1, c)` and `(s2, c)` as tokenizer pairs through one shared encoder, the cosine of the two embeddings;
- tri: s1, s2 and c encoded separately, h(c, s_i) by Hadamard product or concatenation (+ a layer back to d), the
  cosine of h(c, s1) and h(c, s2).

Heads follow the authors' released code (utils/sts/modeling_encoders.py): optional `transform` (dropout, linear,
activation) after pooling; the tri-encoder's condition goes through a linear layer. A trained model is a folder:
the encoder and tokenizer as Hugging Face saves them, plus `csts_model.json` (the spec) and
`csts_heads.safetensors` (the head weights); any other folder or hub name is a base model.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.functional import cosine_similarity

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.packaged_models import hub_source, load_failure, resolve_model_path
from csts_pipeline.pipeline.weights import check_weights
from csts_pipeline.stages.train.data import PairData

ENCODINGS = ("cross", "bi", "tri")
OBJECTIVES = ("mse", "quad", "quad+mse")
POOLERS = ("cls-mlp", "cls", "mean")
TRI_HEADS = ("hadamard", "concat")
SPEC_FILE = "csts_model.json"
HEADS_FILE = "csts_heads.safetensors"


@dataclass
class EncoderSpec:
    """What a C-STS encoder is (its architecture; `ModelSpec` in pipeline/language_model is a language model to ask):
    saved with a trained model so evaluate rebuilds the same thing."""

    encoding: str = "bi"
    pooler: str = "cls"
    transform: bool = False
    tri_head: str = "hadamard"
    condition_only: bool = False
    sentences_only: bool = False
    max_length: int = 128
    base_model: str = ""
    objective: str | None = None  # what trained it; None for a base model scored zero-shot
    label_low: float | None = None  # the label range the trained scores are scaled to
    label_high: float | None = None

    def check(self) -> None:
        """Refuse combinations the models do not define, with the reason."""
        for value, allowed, option in (
            (self.encoding, ENCODINGS, "--encoding"),
            (self.pooler, POOLERS, "--pooler"),
            (self.tri_head, TRI_HEADS, "--tri-head"),
        ):
            if value not in allowed:
                raise UserError(f"{option} {value!r}: choose one of {', '.join(allowed)}")
        if self.objective is not None and self.objective not in OBJECTIVES:
            raise UserError(f"--objective {self.objective!r}: choose one of {', '.join(OBJECTIVES)}")
        if self.objective in ("quad", "quad+mse") and self.encoding == "cross":
            raise UserError(
                f"--objective {self.objective} needs --encoding bi or tri: the Quad loss compares the two sentence "
                "encodings under each condition, and a cross-encoder has a single joint encoding"
            )
        if (self.condition_only or self.sentences_only) and self.encoding != "cross":
            raise UserError("--condition-only and --sentences-only are cross-encoder ablations (--encoding cross)")
        if self.condition_only and self.sentences_only:
            raise UserError("--condition-only and --sentences-only exclude each other")
        if self.max_length < 8:
            raise UserError(f"--max-length {self.max_length}: too short for a sentence")


def model_pooling(path: str) -> str | None:
    """The pooling of a local sentence-transformers folder (mean for all-MiniLM-L6-v2), else None."""
    config = Path(path) / "1_Pooling" / "config.json"
    if not config.is_file():
        return None
    modes = json.loads(config.read_text())
    if modes.get("pooling_mode_mean_tokens"):
        return "mean"
    if modes.get("pooling_mode_cls_token"):
        return "cls"
    return None


def is_trained_model(name: str) -> bool:
    return (Path(resolve_model_path(name)) / SPEC_FILE).is_file()


@dataclass
class Tokenized:
    """Token ids of one split, once: `segments[s][row]` for each of the encoding's 1-3 input segments."""

    segments: list[list[list[int]]]
    token_types: list[list[list[int]]] | None
    lengths: np.ndarray  # the longest segment of each row, for length-sorted batching


class CstsModel(nn.Module):
    """One encoder and the heads of `spec.encoding`; `forward` returns one similarity score per row."""

    def __init__(self, backbone: nn.Module, tokenizer, spec: EncoderSpec):
        super().__init__()
        spec.check()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.spec = spec
        config = backbone.config
        hidden = int(config.hidden_size)
        # As the authors' heads: the config's classifier_dropout when it sets one, else hidden_dropout_prob.
        dropout = getattr(config, "classifier_dropout", None)
        if dropout is None:
            dropout = getattr(config, "hidden_dropout_prob", 0.1)
        dropout = float(dropout or 0.0)
        activation = _activation(getattr(config, "hidden_act", "gelu"))
        self.cls_mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) if spec.pooler == "cls-mlp" else None
        if self.cls_mlp is not None:
            _copy_pretrained_pooler(backbone, self.cls_mlp[0])
        self.transform = (
            nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, hidden), activation) if spec.transform else None
        )
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, 1)) if spec.encoding == "cross" else None
        self.condition_transform = (
            nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, hidden)) if spec.encoding == "tri" else None
        )
        self.concat_transform = (
            nn.Sequential(nn.Dropout(dropout), nn.Linear(2 * hidden, hidden), activation)
            if spec.encoding == "tri" and spec.tri_head == "concat"
            else None
        )

    @property
    def n_segments(self) -> int:
        return {"cross": 1, "bi": 2, "tri": 3}[self.spec.encoding]

    def tokenize(self, data: PairData) -> Tokenized:
        """Token ids for every row, computed once per split (not per epoch)."""
        s1, s2 = data.column("sentence1"), data.column("sentence2")
        condition = data.column("condition") if data.has_condition else None
        spec = self.spec
        if spec.encoding == "cross":
            sep = self.tokenizer.sep_token
            if sep is None:
                raise UserError(f"{spec.base_model}: the tokenizer has no separator token for a cross-encoder")
            if spec.condition_only:
                if condition is None:
                    raise UserError(f"{data.source}: --condition-only needs a condition column")
                texts = condition
            elif spec.sentences_only or condition is None:
                texts = [f"{a} {sep} {b}" for a, b in zip(s1, s2)]
            else:
                texts = [f"{a} {sep} {b} {sep} {c}" for a, b, c in zip(s1, s2, condition)]
            encoded = [self._encode(texts)]
        elif spec.encoding == "bi":
            encoded = [self._encode(s1, condition), self._encode(s2, condition)]
        else:
            if condition is None:
                raise UserError(f"{data.source}: a tri-encoder needs a condition; this data has none")
            encoded = [self._encode(s1), self._encode(s2), self._encode(condition)]
        segments = [e["input_ids"] for e in encoded]
        token_types = [e["token_type_ids"] for e in encoded] if "token_type_ids" in encoded[0] else None
        lengths = np.max([[len(ids) for ids in segment] for segment in segments], axis=0)
        return Tokenized(segments, token_types, lengths)

    def _encode(self, first: list[str], second: list[str] | None = None) -> dict:
        limit = min(self.spec.max_length, self.tokenizer.model_max_length)
        return self.tokenizer(first, second, truncation=True, max_length=limit, padding=False)

    def collate(self, tokenized: Tokenized, rows: np.ndarray) -> dict[str, torch.Tensor]:
        """Segments stacked segment-major ([s1 rows; s2 rows; c rows]) and padded to the batch's longest."""
        sequences = [segment[row] for segment in tokenized.segments for row in rows]
        width = max(len(ids) for ids in sequences)
        pad = self.tokenizer.pad_token_id or 0
        input_ids = np.full((len(sequences), width), pad, dtype=np.int64)
        mask = np.zeros((len(sequences), width), dtype=np.int64)
        for i, ids in enumerate(sequences):
            input_ids[i, : len(ids)] = ids
            mask[i, : len(ids)] = 1
        batch = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask)}
        if tokenized.token_types is not None:
            types = np.zeros((len(sequences), width), dtype=np.int64)
            for i, ids in enumerate(segment[row] for segment in tokenized.token_types for row in rows):
                types[i, : len(ids)] = ids
            batch["token_type_ids"] = torch.from_numpy(types)
        return batch

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
        features = self._pool(hidden, attention_mask)
        if self.spec.encoding == "cross":
            if self.transform is not None:
                features = self.transform(features)
            return self.classifier(features).reshape(-1).float()
        if self.spec.encoding == "bi":
            if self.transform is not None:
                features = self.transform(features)
            first, second = features.chunk(2)
            return cosine_similarity(first.float(), second.float(), dim=-1)
        first, second, condition = features.chunk(3)
        condition = self.condition_transform(condition)
        if self.transform is not None:
            first, second = self.transform(first), self.transform(second)
        if self.concat_transform is not None:
            first = self.concat_transform(torch.cat([first, condition], dim=-1))
            second = self.concat_transform(torch.cat([second, condition], dim=-1))
        else:
            first, second = first * condition, second * condition
        return cosine_similarity(first.float(), second.float(), dim=-1)

    def _pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.spec.pooler == "mean":
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0)
        cls = hidden[:, 0]
        return self.cls_mlp(cls) if self.cls_mlp is not None else cls

    def head_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items() if not k.startswith("backbone.")}

    def save(self, folder: Path) -> None:
        """Atomically: written as `.folder.partial`, then swapped in, so a crash never leaves half a model."""
        import transformers
        from safetensors.torch import save_file

        tmp = folder.with_name(f".{folder.name}.partial")
        shutil.rmtree(tmp, ignore_errors=True)
        transformers.logging.disable_progress_bar()
        try:
            self.backbone.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
        finally:
            transformers.logging.enable_progress_bar()
        save_file(self.head_state(), str(tmp / HEADS_FILE))
        (tmp / SPEC_FILE).write_text(json.dumps(asdict(self.spec), indent=2) + "\n")
        old = folder.with_name(f".{folder.name}.old")
        if folder.exists():
            os.replace(folder, old)
        os.replace(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)


def load_model(name: str, spec: EncoderSpec | None = None) -> CstsModel:
    """A trained C-STS model (its saved spec and heads), or a base encoder built as `spec` describes."""
    path = resolve_model_path(name)
    saved = Path(path) / SPEC_FILE
    if saved.is_file():
        known = {f.name for f in fields(EncoderSpec)}
        spec = EncoderSpec(**{k: v for k, v in json.loads(saved.read_text()).items() if k in known})
    elif spec is None:
        raise UserError(f"{name}: not a trained C-STS model (no {SPEC_FILE}); give the model's encoding")
    else:
        spec.base_model = spec.base_model or name
    spec.check()
    backbone, tokenizer = _load_encoder(name, path)
    model = CstsModel(backbone, tokenizer, spec)
    if saved.is_file():
        from safetensors.torch import load_file

        heads = Path(path) / HEADS_FILE
        if not heads.is_file():
            raise UserError(f"{heads}: missing; the model folder is incomplete")
        check_weights(heads)
        missing, unexpected = model.load_state_dict(load_file(str(heads)), strict=False)
        missing = [key for key in missing if not key.startswith("backbone.")]
        if missing or unexpected:
            raise UserError(f"{heads}: head weights do not match the spec (missing {missing}, unexpected {unexpected})")
    return model


def _load_encoder(name: str, path: str):
    source = hub_source(path, "model", "give that local folder as the model") if path == name else path
    check_weights(source)  # a damaged weights file: one line naming it, not the loader's traceback
    import transformers
    from transformers import AutoModel, AutoTokenizer

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # "pooler weights newly initialised" is expected, not news
    transformers.logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        backbone = AutoModel.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise load_failure("model", name, exc, "give a local folder") from None
    finally:
        transformers.logging.set_verbosity(verbosity)
        transformers.logging.enable_progress_bar()
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"{name}: needs a fast (Rust) tokenizer")
    return backbone, tokenizer


def _activation(name: object) -> nn.Module:
    from transformers.activations import ACT2FN

    if isinstance(name, str) and name in ACT2FN:
        return ACT2FN[name]
    return nn.GELU()


def _copy_pretrained_pooler(backbone: nn.Module, dense: nn.Linear) -> None:
    """CLS-with-MLP starts from the checkpoint's own pooler (BERT's and SimCSE's dense + tanh) when it has one."""
    pretrained = getattr(getattr(backbone, "pooler", None), "dense", None)
    if isinstance(pretrained, nn.Linear) and pretrained.weight.shape == dense.weight.shape:
        with torch.no_grad():
            dense.weight.copy_(pretrained.weight)
            dense.bias.copy_(pretrained.bias)
