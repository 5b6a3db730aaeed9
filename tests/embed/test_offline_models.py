"""Offline, a hub model name is settled in seconds: the local cache's copy, or a one-line error saying how to get
the model; never minutes of connection retries."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch

from csts_pipeline.pipeline import packaged_models
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.packaged_models import hub_source, resolve_model_path

FAKE = "csts-pipeline-tests/no-such-model"


@pytest.fixture
def hub_reachable(monkeypatch: pytest.MonkeyPatch):
    """No offline variables: the probe decides. The returned list sets what the probe answers."""
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(variable, raising=False)
    answer = [False]
    probed: list[tuple[str, int]] = []

    def fake(host: str, port: int) -> bool:
        probed.append((host, port))
        return answer[0]

    monkeypatch.setattr(packaged_models, "_reachable", fake)
    return answer, probed


def _assert_fast_one_line(error: pytest.ExceptionInfo, started: float) -> str:
    assert time.perf_counter() - started < 5
    message = str(error.value)
    assert "\n" not in message
    assert "not in the local Hugging Face cache" in message and f"hf download {FAKE}" in message
    return message


def test_hf_hub_offline_fails_fast_with_one_line_for_the_text_encoder(monkeypatch: pytest.MonkeyPatch):
    from csts_pipeline.stages.filter.text import load_text_encoder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(packaged_models, "_reachable", lambda *_: pytest.fail("no probe when HF_HUB_OFFLINE is set"))
    for pooling in ("model", "cls_pooler"):
        started = time.perf_counter()
        with pytest.raises(UserError) as error:
            load_text_encoder(FAKE, pooling, torch.device("cpu"))
        message = _assert_fast_one_line(error, started)
        assert "HF_HUB_OFFLINE is set" in message and "--text-encoder" in message


def test_a_failed_probe_fails_fast_with_one_line_for_train_and_evaluate(hub_reachable):
    from csts_pipeline.stages.train.models import EncoderSpec, load_model

    _, probed = hub_reachable
    started = time.perf_counter()
    with pytest.raises(UserError) as error:
        load_model(FAKE, EncoderSpec(encoding="bi"))
    message = _assert_fast_one_line(error, started)
    assert "huggingface.co:443 cannot be reached" in message
    assert probed == [("huggingface.co", 443)]


def test_online_names_and_local_paths_go_to_the_loader_unchanged(hub_reachable, tmp_path: Path):
    answer, probed = hub_reachable
    answer[0] = True
    assert hub_source(FAKE, "model", "x") == FAKE
    assert hub_source(str(tmp_path), "model", "x") == str(tmp_path)  # a folder: no probe
    assert hub_source("packaged:all-MiniLM-L6-v2", "model", "x") == resolve_model_path("packaged:all-MiniLM-L6-v2")
    assert hub_source("/nonexistent/model", "model", "x") == "/nonexistent/model"  # the loader reports it
    assert probed == [("huggingface.co", 443)]


def test_the_probe_goes_to_the_proxy_or_the_configured_endpoint(monkeypatch: pytest.MonkeyPatch):
    for variable in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HF_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    assert packaged_models._probe_target() == ("huggingface.co", 443)
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.example:8080")
    assert packaged_models._probe_target() == ("mirror.example", 8080)
    monkeypatch.setenv("HTTPS_PROXY", "proxy.example:3128")
    assert packaged_models._probe_target() == ("proxy.example", 3128)


def test_the_probe_gives_up_quickly_on_an_unreachable_host():
    packaged_models._reachable.cache_clear()
    started = time.perf_counter()
    assert packaged_models._reachable("127.0.0.1", 9) is False  # discard port: refused at once
    assert time.perf_counter() - started < 3
    packaged_models._reachable.cache_clear()


def test_a_model_in_the_local_cache_still_loads_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A hub-cache layout (refs/main -> snapshots/<commit>/) holding the packaged MiniLM under a hub name."""
    from huggingface_hub import constants

    from csts_pipeline.stages.filter.text import encode_texts, load_text_encoder

    name = "csts-pipeline-tests/cached-minilm"
    repo = tmp_path / "models--csts-pipeline-tests--cached-minilm"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(resolve_model_path("packaged:all-MiniLM-L6-v2"), repo / "snapshots" / commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    assert hub_source(name, "model", "x") == str(repo / "snapshots" / commit)
    model = load_text_encoder(name, "model", torch.device("cpu"))
    assert encode_texts(model, ["A dog runs."], 4).shape == (1, 384)


def test_the_cli_prints_one_line_and_exits_2(tmp_path: Path, sample_dataset: tuple[Path, Path]):
    import os
    import subprocess
    import sys

    from tests.conftest import REPO, write_manifest

    manifest = write_manifest(tmp_path, *sample_dataset)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sentence1,sentence2\nA dog runs on the beach.,A dog plays in the sand.\n")
    args = ["filter", "--manifest", str(manifest), "--pairs", str(pairs), "--out", str(tmp_path / "scored.csv")]
    result = subprocess.run(
        [sys.executable, "-m", "csts_pipeline", *args, "--text-encoder", FAKE],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and f"hf download {FAKE}" in result.stderr
