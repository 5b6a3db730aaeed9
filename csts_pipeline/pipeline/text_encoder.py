"""Sentence encoders shared by the stages that embed captions (filter's SimCSE cosine, mine --by text):
sentence-transformers models loaded offline-aware (pipeline.packaged_models), L2-normalised outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.packaged_models import hub_source, load_failure
from csts_pipeline.pipeline.weights import check_weights

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
    """A SentenceTransformer on `device` (bf16 on CUDA, fp16 on a GPU without bf16). `pooling` 'model' keeps the
    model's own pooling; 'cls' or 'mean' put that pooling over the raw transformer; 'cls_pooler' passes the CLS
    state through the checkpoint's pooler layer (dense + tanh), which is how SimCSE's own tool embeds sentences
    (`pooler_output`)."""
    source = hub_source(name, "text encoder", "set filter.text_encoder / --text-encoder to that local folder")
    check_weights(source)  # a damaged weights file: one line naming it, not the loader's traceback
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
    if device.type == "cuda":  # bf16 where the GPU has it (the range of float32: no overflow), else fp16
        from csts_pipeline.pipeline.device import autocast_dtype

        model.to(autocast_dtype(device, "auto"))
    return model


GPU_BATCH_CEILING = 4096  # sentences: the first batch tried on a GPU (halved on out-of-memory)


def encode_texts(model, texts: list[str], batch_size: int, progress: bool = False) -> np.ndarray:
    """L2-normalised float32 sentence embeddings, [len(texts), D], in input order. On the CPU, sentence-transformers
    batches `batch_size` texts sorted by length (little padding). On a GPU, `gpu_batches` feeds it the largest
    batch that fits, longest texts first."""
    if not texts:
        dimension = _dimension(model, "get_embedding_dimension", "get_sentence_embedding_dimension")
        return np.zeros((0, dimension), np.float32)
    import torch

    def encode(batch: list[str], size: int, show: bool = False) -> np.ndarray:
        with torch.inference_mode():
            embeddings = model.encode(batch, batch_size=size, convert_to_tensor=True, show_progress_bar=show)
            return torch.nn.functional.normalize(embeddings.float(), dim=1).cpu().numpy()

    if getattr(model, "device", torch.device("cpu")).type != "cuda":
        return encode(texts, batch_size, progress)
    return gpu_batches(
        lambda batch: encode(batch, len(batch)), texts, max(batch_size, GPU_BATCH_CEILING), out_of_memory
    )


def out_of_memory(exc: BaseException) -> bool:
    """A CUDA out-of-memory error (its memory given back to the device), not any other failure."""
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        torch.cuda.empty_cache()
        return True
    return False


def length_order(texts: list[str]) -> np.ndarray:
    """Positions of `texts`, longest first (stable): batches of like lengths pad little, and the first batch is
    the one that needs the most memory, so a batch that fits it fits every later one."""
    lengths = np.fromiter((len(text) for text in texts), np.int64, len(texts))
    return np.argsort(-lengths, kind="stable")


def gpu_batches(
    encode: Callable[[list[str]], np.ndarray],
    texts: list[str],
    batch: int,
    is_out_of_memory: Callable[[BaseException], bool],
) -> np.ndarray:
    """`encode` over `texts` in length-sorted batches of `batch`, halved on out-of-memory until a batch fits (a
    bounded search: at most log2(batch) halvings); the embeddings come back in input order."""
    order = length_order(texts)
    out: np.ndarray | None = None
    lo = 0
    while lo < len(order):
        rows = order[lo : lo + batch]
        try:
            vectors = encode([texts[row] for row in rows])
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            if batch == 1:
                raise UserError("out of GPU memory encoding one sentence; use a smaller filter.text_encoder") from None
            batch //= 2
            continue
        if out is None:
            out = np.empty((len(texts), vectors.shape[1]), np.float32)
        out[rows] = vectors
        lo += len(rows)
    assert out is not None
    return out
