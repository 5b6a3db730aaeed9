"""Sentence encoders shared by the stages that embed captions (filter's SimCSE cosine, mine --by text):
sentence-transformers models loaded offline-aware (pipeline.packaged_models), L2-normalised outputs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.packaged_models import hub_source, load_failure

if TYPE_CHECKING:
    import torch


def _dimension(module, current: str, before_v6: str) -> int:
    """An embedding width through the method name of sentence-transformers >= 6, or of older releases."""
    return int((getattr(module, current, None) or getattr(module, before_v6))())


def _pooler_layer(transformer, dimension: int, name: str):
    """The checkpoint's own pooler (dense + tanh over the CLS state) as a sentence-transformers Dense module."""
    try:
        from sentence_transformers.sentence_transformer.modules import Dense
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Dense  # type: ignore[no-redef]

    dense = getattr(getattr(transformer.auto_model, "pooler", None), "dense", None)
    if dense is None:
        raise UserError(f"text encoder {name!r} has no pooler layer; use text_pooling cls instead of cls_pooler")
    import torch

    weight, bias = dense.weight.detach().clone(), dense.bias.detach().clone()
    return Dense(dimension, dimension, activation_function=torch.nn.Tanh(), init_weight=weight, init_bias=bias)


def load_text_encoder(name: str, pooling: str, device: torch.device):
    """A SentenceTransformer on `device` (fp16 on CUDA). `pooling` 'model' keeps the model's own pooling;
    'cls' or 'mean' put that pooling over the raw transformer; 'cls_pooler' passes the CLS state through the
    checkpoint's pooler layer (dense + tanh), which is how SimCSE's own tool embeds sentences (`pooler_output`)."""
    source = hub_source(name, "text encoder", "set filter.text_encoder / --text-encoder to that local folder")
    from sentence_transformers import SentenceTransformer  # after: offline, fail before a slow import

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling, Transformer  # type: ignore[no-redef]

    try:
        if pooling == "model":
            model = SentenceTransformer(source, device=str(device))
        else:
            transformer = Transformer(source)
            dimension = _dimension(transformer, "get_embedding_dimension", "get_word_embedding_dimension")
            modules = [transformer, Pooling(dimension, pooling_mode="cls" if pooling == "cls_pooler" else pooling)]
            if pooling == "cls_pooler":
                modules.append(_pooler_layer(transformer, dimension, name))
            model = SentenceTransformer(modules=modules, device=str(device))
    except (OSError, ValueError) as exc:
        raise load_failure(
            "text encoder", name, exc, "set filter.text_encoder / --text-encoder to a local folder"
        ) from None
    model.eval()
    if device.type == "cuda":
        model.half()
    return model


def encode_texts(model, texts: list[str], batch_size: int, progress: bool = False) -> np.ndarray:
    """L2-normalised float32 sentence embeddings, [len(texts), D]. sentence-transformers batches the texts
    sorted by length (little padding) and returns them in input order."""
    if not texts:
        dimension = _dimension(model, "get_embedding_dimension", "get_sentence_embedding_dimension")
        return np.zeros((0, dimension), np.float32)
    import torch

    with torch.inference_mode():
        embeddings = model.encode(texts, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=progress)
        return torch.nn.functional.normalize(embeddings.float(), dim=1).cpu().numpy()
