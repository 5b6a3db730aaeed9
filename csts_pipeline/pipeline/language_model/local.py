"""A local causal language model through transformers: a Hugging Face name (offline-aware, pipeline.packaged_models),
a model folder, or a `.gguf` file (transformers' GGUF loading, dequantised; needs the `gguf` package). Questions are
batched, left-padded with explicit positions, so a batch gives what one prompt at a time gives."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.checksums import file_digest
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.language_model.base import (
    TOP_K,
    Answer,
    Cost,
    LanguageModel,
    Messages,
    read_logprobs,
    reading,
)
from csts_pipeline.pipeline.packaged_models import hub_source, load_failure
from csts_pipeline.pipeline.records import fingerprint
from csts_pipeline.pipeline.weights import check_weights

log = logging.getLogger(__name__)


def _source(name: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """What to hand from_pretrained, its keyword arguments, and the model's identity (id, file hash or revision)."""
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise UserError(f"{name}: model file not found")
        check_weights(path)  # a damaged weights file: one line naming it, not the loader's traceback
        identity = {"model": path.name, "file_hash": file_digest(path)}
        return str(path.parent), {"gguf_file": path.name}, identity
    if path.exists():
        if not (path / "config.json").is_file():
            raise UserError(f"{name}: not a model folder (no config.json) nor a .gguf file")
        check_weights(path)
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        return str(path), {}, {"model": path.name, "file_hash": fingerprint({p.name: file_digest(p) for p in files})}
    source = hub_source(name, "model", "give --model a local folder or .gguf file")
    check_weights(source)  # a folder of the local cache (a hub name to download is left to the loader)
    return source, {}, {"model": name, "revision": Path(source).name if Path(source).exists() else None}


class LocalModel(LanguageModel):
    """A causal LM and its tokenizer on one device."""

    def __init__(self, name: str, device: str = "auto", batch_size: int = 8):
        from csts_pipeline.pipeline.device import resolve_device

        self.source, self._kwargs, self._identity = _source(name)
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.given = name
        self.name = Path(self._identity["model"]).name.removesuffix(".gguf")
        self.cost = Cost()
        self._loaded: tuple[Any, Any] | None = None
        self._token_text: dict[int, str] = {}

    def load(self) -> None:
        """Load the weights (on the first question: a step with nothing to ask never loads them)."""
        if self._loaded is None:
            model, tokenizer = _load(self.given, self.source, self._kwargs)
            self._loaded = model.to(self.device).eval(), tokenizer

    @property
    def model(self) -> Any:
        return self._weights()[0]

    @property
    def tokenizer(self) -> Any:
        return self._weights()[1]

    def _weights(self) -> tuple[Any, Any]:
        self.load()
        assert self._loaded is not None
        return self._loaded

    @property
    def identity(self) -> dict[str, Any]:
        """Known without loading the weights: the file's hash, the folder's config hash or the hub revision."""
        return {"kind": "local", **self._identity, "reading": {"mode": "logprobs", **reading()}}

    def _texts(self, prompts: Sequence[Messages | str]) -> list[str]:
        """Chats through the model's chat template (the assistant's turn opened); strings as they are."""
        texts = []
        for prompt in prompts:
            if isinstance(prompt, str):
                texts.append(prompt)
            elif self.tokenizer.chat_template is None:
                raise UserError(f"model {self.name!r} has no chat template; use an instruct (chat) model")
            else:
                texts.append(self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True))
        return texts

    def _batch(self, texts: list[str], special: bool = False) -> dict[str, Any]:
        """Left-padded ids with positions counted from each text's first token; `special`: the tokenizer adds its
        special tokens (raw text; a chat template writes its own)."""
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        batch = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=special)
        mask = batch["attention_mask"]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        found = {"input_ids": batch["input_ids"], "attention_mask": mask, "position_ids": positions}
        return {k: v.to(self.device) for k, v in found.items()} | {"_tokens": int(mask.sum()), "_n": len(texts)}

    def token_text(self, token: int) -> str:
        if token not in self._token_text:
            self._token_text[token] = self.tokenizer.decode([token])
        return self._token_text[token]

    def option_probs(self, chats: list[Messages], options: Sequence[str]) -> list[Answer]:
        """The options' share of the top-20 next-token probabilities, read as a server's are (`read_logprobs`)."""
        import torch

        if self.model.config.is_encoder_decoder:
            raise UserError(f"model {self.name!r}: answers are read from a causal (decoder-only) model")
        found: list[Answer] = []
        texts = self._texts(chats)
        with self.cost.timed(), torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self._batch(texts[start : start + self.batch_size])
                tokens, n = batch.pop("_tokens"), batch.pop("_n")
                logits = self.model(**batch).logits[:, -1, :].double()
                logprobs = torch.log_softmax(logits, dim=-1).cpu()
                self.cost.add(n, tokens, n)
                for row in logprobs:
                    found.append(self._read(row, options))
        return found

    def _read(self, row: Any, options: Sequence[str]) -> Answer:
        top = row.topk(TOP_K)
        return read_logprobs([(self.token_text(int(t)), float(v)) for v, t in zip(top.values, top.indices)], options)

    def generate(self, prompts: list[Messages | str], max_tokens: int) -> list[str]:
        import torch

        answers: list[str] = []
        texts = self._texts(prompts)
        tokenizer, decoder_only = self.tokenizer, not self.model.config.is_encoder_decoder
        raw = all(isinstance(prompt, str) for prompt in prompts)
        eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
        with self.cost.timed(), torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self._batch(texts[start : start + self.batch_size], special=raw)
                tokens, n = batch.pop("_tokens"), batch.pop("_n")
                batch.pop("position_ids")  # generate keeps its own positions from the mask
                pad = tokenizer.pad_token_id
                out = self.model.generate(
                    **batch, max_new_tokens=max_tokens, do_sample=False, pad_token_id=pad, eos_token_id=eos
                )
                new = out[:, batch["input_ids"].shape[1] :] if decoder_only else out
                self.cost.add(n, tokens, int((new != pad).sum()))
                answers.extend(self.tokenizer.batch_decode(new, skip_special_tokens=True))
        return answers


def _load(name: str, source: str, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """The model and tokenizer, or a one-line UserError naming the model."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        encoder_decoder = AutoConfig.from_pretrained(source, **kwargs).is_encoder_decoder
        model = (AutoModelForSeq2SeqLM if encoder_decoder else AutoModelForCausalLM).from_pretrained(source, **kwargs)
    except ImportError as exc:  # a .gguf file without the gguf package
        raise UserError(f"cannot load model {name!r}: {str(exc).splitlines()[0]}") from None
    except (OSError, ValueError, KeyError) as exc:
        raise load_failure("model", name, exc, "give --model a local folder or .gguf file") from None
    if not (encoder_decoder or model.can_generate()):
        raise UserError(f"model {name!r}: not a generative model (causal or sequence-to-sequence)")
    return model, tokenizer
