"""The sentence encoder's GPU batching, run on the CPU: length-sorted batches come back in input order, the largest
batch that fits is found by halving on out-of-memory, and the CPU path keeps its results."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.text_encoder import encode_texts, gpu_batches, length_order, load_text_encoder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
MINILM = "packaged:all-MiniLM-L6-v2"
TEXTS = [
    "A dog runs on the beach.",
    "Two people",
    "A very long caption about a man riding a red bicycle down a hill past a bakery at dawn.",
    "",
    "Cat.",
    "A kitchen with a stove, a sink and a window over the garden.",
    "Two people",
    "A bus.",
]


class FakeOutOfMemory(RuntimeError):
    pass


class Recorder:
    """An encoder that records each batch and fails like a full GPU above `limit` texts (or on every batch)."""

    def __init__(self, limit: int = 10**9, error: type[Exception] = FakeOutOfMemory):
        self.limit, self.error, self.batches = limit, error, []

    def __call__(self, batch: list[str]) -> np.ndarray:
        self.batches.append(list(batch))
        if len(batch) > self.limit:
            raise self.error("CUDA out of memory")
        return np.array([[len(text), sum(map(ord, text)) % 997] for text in batch], np.float32)


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, FakeOutOfMemory)


def test_batches_are_sorted_longest_first_and_results_come_back_in_input_order():
    recorder = Recorder()
    out = gpu_batches(recorder, TEXTS, 3, _is_oom)
    assert np.array_equal(out, recorder(TEXTS))  # each text's own vector, in input order
    lengths = [len(text) for batch in recorder.batches[:-1] for text in batch]
    assert lengths == sorted(lengths, reverse=True)
    assert [len(batch) for batch in recorder.batches[:-1]] == [3, 3, 2]
    assert length_order(["ab", "abcd", "", "xy"]).tolist() == [1, 0, 3, 2]  # ties keep their order


def test_out_of_memory_halves_the_batch_until_it_fits_then_keeps_it():
    texts = [f"caption number {i} " * (1 + i % 5) for i in range(100)]
    recorder = Recorder(limit=24)
    out = gpu_batches(recorder, texts, 100, _is_oom)
    sizes = [len(batch) for batch in recorder.batches]
    assert sizes[:4] == [100, 50, 25, 12]  # the first (longest) batch finds the size ...
    assert set(sizes[4:]) <= {12, 100 % 12}  # ... that every later batch keeps
    assert np.array_equal(out, Recorder()(texts))
    with pytest.raises(UserError, match="out of GPU memory encoding one sentence"):
        gpu_batches(Recorder(limit=0), texts, 8, _is_oom)
    assert len(Recorder(limit=0).batches) == 0
    with pytest.raises(ValueError, match="out of memory"):  # not an out-of-memory error: raised as it is
        gpu_batches(Recorder(limit=0, error=ValueError), texts, 8, _is_oom)


def test_the_real_encoder_in_sorted_batches_equals_the_cpu_path():
    """MiniLM on the CPU: the GPU path's batching (sorted, small batches) gives each text the embedding the CPU
    path gives it, and the CPU path is sentence-transformers' own batching, unchanged."""
    model = load_text_encoder(MINILM, "model", torch.device("cpu"))
    cpu = encode_texts(model, TEXTS, 4)
    with torch.inference_mode():
        direct = model.encode(TEXTS, batch_size=4, convert_to_tensor=True, show_progress_bar=False)
    np.testing.assert_allclose(cpu, torch.nn.functional.normalize(direct.float(), dim=1).numpy(), atol=1e-6)

    def encode(batch: list[str]) -> np.ndarray:
        return encode_texts(model, batch, len(batch))

    sorted_batches = gpu_batches(encode, TEXTS, 3, _is_oom)
    np.testing.assert_allclose(sorted_batches, cpu, atol=2e-5)
    assert np.allclose(sorted_batches[1], sorted_batches[6])  # the duplicate text, from different batches
