"""The test submission file (`test_predictions.json`) against what the C-STS authors' make_test_submission.py does
with it: `json.load`, sort the items by `int(key)`, assert exactly 4,732 of them, send the values in that order."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.packaged_models import resolve_model_path
from csts_pipeline.stages.train import evaluate as evaluate_stage
from csts_pipeline.stages.train.scoring import write_submission
from csts_pipeline.testing.train_sample import sample_rows

OFFICIAL_TEST_ROWS = 4732  # csts_test.csv: the count make_test_submission.py asserts


def read_as_the_authors_do(path: Path) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """make_test_submission.py's reading: keys and predictions sorted by the integer value of the key. Strict JSON
    (no NaN), as the server that receives the predictions needs."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    preds = json.loads(path.read_text(), parse_constant=refuse)
    keys, values = zip(*sorted(preds.items(), key=lambda item: int(item[0])))
    return keys, values


def test_submission_of_4732_rows_reads_back_in_row_order(tmp_path: Path) -> None:
    scores = np.random.default_rng(0).uniform(0, 1, OFFICIAL_TEST_ROWS).astype(np.float32)
    path = tmp_path / "test_predictions.json"
    write_submission(path, scores)
    keys, values = read_as_the_authors_do(path)
    assert len(keys) == OFFICIAL_TEST_ROWS
    assert keys == tuple(str(i) for i in range(OFFICIAL_TEST_ROWS))  # every row, none skipped or repeated
    assert values == pytest.approx(scores.tolist())
    assert list(json.loads(path.read_text())) == list(keys)  # written in row order, not "0", "1", "10", ...
    with pytest.raises(UserError, match="1 non-finite predicted scores \\(first at row 2\\)"):
        write_submission(tmp_path / "bad.json", np.array([0.1, 0.2, np.nan]))
    assert not (tmp_path / "bad.json").exists()


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 1-layer BERT (hidden 16) with all-MiniLM-L6-v2's tokenizer: scores 9,464 sentences in seconds."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-encoder")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("packaged:all-MiniLM-L6-v2"))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=32,
        max_position_embeddings=64,
        initializer_range=0.1,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_hidden_official_size_test_file_gives_a_complete_submission(tiny_encoder: Path, tmp_path: Path) -> None:
    """A test CSV laid out as the authors' (labels hidden as -1, 4,732 rows) scored by `evaluate`."""
    rows = [{**row, "label": -1} for row in sample_rows(OFFICIAL_TEST_ROWS // 2, seed=5)]
    rows = [{key: row[key] for key in ("sentence1", "sentence2", "condition", "label")} for row in rows]
    data = tmp_path / "csts_test.csv"
    pacsv.write_csv(pa.Table.from_pylist(rows), data)
    metrics_out = tmp_path / "eval" / "metrics.json"
    options = evaluate_stage.EvaluateOptions(
        model=str(tiny_encoder), data=data, device="cpu", metrics_out=metrics_out, max_length=48, batch_size=512
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: intra-op threads only spin
    try:
        metrics = evaluate_stage.run(options)["csts_test"]
    finally:
        torch.set_num_threads(threads)
    assert metrics["n"] == OFFICIAL_TEST_ROWS and metrics["spearman"] is None  # nothing to correlate with
    keys, values = read_as_the_authors_do(metrics_out.parent / "csts_test_predictions.json")
    assert keys == tuple(str(i) for i in range(OFFICIAL_TEST_ROWS))
    predictions = pq.read_table(metrics_out.parent / "predictions_csts_test.parquet")
    assert predictions["sentence1"].to_pylist() == [row["sentence1"] for row in rows]  # index i is file row i
    assert values == pytest.approx(predictions["score"].to_pylist())
