"""The Ray executor: the same tables as the local executor, a rerun that does nothing, a killed actor replaced
(Ray Data) or resumed from (actor pool), and a one-line error without Ray. One local Ray serves the module
(2 CPUs, no dashboard)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.cluster import ClusterStage
from csts_pipeline.pipeline.failpoints import FAILPOINT, FAILPOINT_ONCE
from csts_pipeline.pipeline.stage import Stage
from tests.conftest import STAGES, contents


def record(work: Path, stage: str) -> dict:
    return json.loads((work / stage / "_stage.json").read_text())


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, ray_session) -> Path:
    """The sample through the local executor: the tables every Ray run must equal."""
    os.environ["TQDM_DISABLE"] = "1"
    work = tmp_path_factory.mktemp("local") / "work"
    invoke("run", "--dataset", "sample", "--out", str(work), "--executor", "local")
    return work


def seeded(local_run: Path, folder: Path) -> Path:
    """A work folder holding only the local run's sentence-embedding cache, so filter does not encode again."""
    work = folder / "work"
    shutil.copytree(local_run / "text_embeddings", work / "text_embeddings")
    return work


@pytest.fixture(scope="module")
def ray_run(local_run: Path, tmp_path_factory) -> Path:
    work = seeded(local_run, tmp_path_factory.mktemp("ray"))
    invoke("run", "--dataset", "sample", "--out", str(work), "--executor", "ray")
    return work


@pytest.mark.slow
def test_ray_tables_equal_the_local_executors(local_run: Path, ray_run: Path):
    assert contents(ray_run) == contents(local_run)
    for stage in STAGES:
        assert record(ray_run, stage)["executor"]["kind"] == "ray"
        assert record(local_run, stage)["executor"] == {"kind": "local"}
    assert not [p for p in ray_run.glob(".*") if p.is_dir()]  # no staging folder outlives the run


@pytest.mark.slow
def test_a_rerun_under_ray_is_a_no_op(ray_run: Path):
    before = {stage: (ray_run / stage / "_stage.json").stat().st_mtime_ns for stage in STAGES}
    result = invoke("run", "--dataset", "sample", "--out", str(ray_run), "--executor", "ray")
    assert result.output.count("up to date") == len(STAGES)
    assert before == {stage: (ray_run / stage / "_stage.json").stat().st_mtime_ns for stage in STAGES}


@pytest.mark.slow
def test_a_killed_embed_actor_fails_the_run_and_the_next_resumes(
    local_run: Path, tmp_path: Path, monkeypatch, ray_session, capfd: pytest.CaptureFixture
):
    """embed on Ray Data: the CLIP actor serving the second shard is killed once, which fails the run (the actors
    run without restarts, so Ray logs no error-level line about their object-store arguments: docs/ray.md).
    Nothing is committed; the next run resumes the staging folder and ends with the local executor's tables."""
    import ray.exceptions

    work = seeded(local_run, tmp_path)
    flag = tmp_path / "killed"
    monkeypatch.setenv(FAILPOINT, "embed:unit:embeddings/part-00001.parquet")  # forwarded to the actors
    monkeypatch.setenv(FAILPOINT_ONCE, str(flag))
    killed = CliRunner().invoke(app, ["embed", "--dataset", "sample", "--out", str(work), "--executor", "ray"])
    assert isinstance(killed.exception, ray.exceptions.ActorDiedError) and flag.is_file(), killed.output
    assert not (work / "embed").exists() and (work / ".embed.next" / "_started.json").is_file()
    capfd.readouterr()
    invoke("embed", "--dataset", "sample", "--out", str(work), "--executor", "ray")
    assert "constructor arguments in the object store" not in capfd.readouterr().err
    assert record(work, "embed")["resumed"] is True
    assert contents(work, ("embed",)) == contents(local_run, ("embed",))


@pytest.mark.slow
def test_an_actor_dying_in_a_unit_resumes_to_the_same_tables(local_run: Path, tmp_path: Path, monkeypatch, ray_session):
    """mine's expansion units on the actor pool: the actor of the last candidate shard is killed, nothing is
    committed, and the rerun (reusing whatever shards the driver had recorded) ends with the local tables."""
    work = seeded(local_run, tmp_path)
    shutil.copytree(local_run / "embed", work / "embed")
    monkeypatch.setenv(FAILPOINT, "mine:unit:candidates/part-00001.parquet")
    failed = CliRunner().invoke(app, ["mine", "--dataset", "sample", "--out", str(work), "--executor", "ray"])
    assert failed.exit_code != 0 and isinstance(failed.exception, ray_session.exceptions.RayActorError)
    assert not (work / "mine").exists() and (work / ".mine.next").is_dir()
    monkeypatch.delenv(FAILPOINT)
    invoke("mine", "--dataset", "sample", "--out", str(work), "--executor", "ray")
    assert record(work, "mine")["resumed"] is True
    assert contents(work, ("embed", "mine")) == contents(local_run, ("embed", "mine"))


def test_pool_size_follows_the_stage_resources(ray_session):
    from csts_pipeline.pipeline.ray_executor import RayExecutor
    from csts_pipeline.pipeline.stage import Resources

    class Heavy(Stage):
        resources = Resources(cpus=2, gpus=1)

    executor = RayExecutor()
    options = executor.actor_options(Heavy(Path(".")))
    assert options == {"num_cpus": 2, "num_gpus": 0}  # no GPU in this cluster
    assert executor.pool_size(options, pending=10) == 1
    assert executor.pool_size({"num_cpus": 1, "num_gpus": 0}, pending=10) == 2
    assert executor.pool_size({"num_cpus": 1, "num_gpus": 0}, pending=1) == 1


class _WithModel(ClusterStage):
    worker_state = ("model",)


def test_a_pickled_stage_leaves_its_worker_state_behind(tmp_path: Path):
    stage = _WithModel(tmp_path)
    stage.model, stage.pairs = object(), [1, 2]
    copy = pickle.loads(pickle.dumps(stage))
    assert copy.pairs == [1, 2] and not hasattr(copy, "model")


def test_without_ray_the_ray_executor_is_a_one_line_error(monkeypatch, tmp_path: Path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if it were not installed
    result = CliRunner().invoke(app, ["run", "--dataset", "sample", "--out", str(tmp_path), "--executor", "ray"])
    assert result.exit_code == 2
    assert "pip install 'csts-pipeline[ray]'" in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1


def test_a_local_ray_stays_on_loopback(ray_session):
    import ray

    assert ray.util.get_node_ip_address() == "127.0.0.1"


@pytest.mark.slow
def test_filter_encodes_its_sentences_as_ray_tasks(ray_session, tmp_path: Path, monkeypatch):
    """Distinct sentences in blocks, one Ray task each: one block gives the local encoding's very bits (same
    batches, same thread count); several blocks the same vectors up to float rounding. The cache is filled."""
    import numpy as np
    import torch

    from csts_pipeline.pipeline.manifest import FilterConfig
    from csts_pipeline.pipeline.ray_executor import RayExecutor, RayTasks
    from csts_pipeline.stages.filter import scoring

    config = FilterConfig(text_encoder="packaged:all-MiniLM-L6-v2", text_pooling="model")
    texts = [f"a photo of {i} dogs {'on a red sofa ' * (i % 4)}" for i in range(40)]
    cpu, tasks = torch.device("cpu"), RayTasks(RayExecutor())
    local, _ = scoring.sentence_embeddings(config, texts, device=cpu)
    whole, info = scoring.sentence_embeddings(
        config, texts, device=cpu, cache_dir=tmp_path / "cache", tasks=tasks, device_setting="cpu"
    )
    np.testing.assert_array_equal(whole, local)
    assert info["encoded"] and np.array_equal(np.load(info["cache"]), local)
    monkeypatch.setattr(scoring, "ENCODE_BLOCK", 16)
    blocks, _ = scoring.sentence_embeddings(
        config, texts, device=cpu, cache_dir=None, tasks=tasks, device_setting="cpu"
    )
    np.testing.assert_allclose(blocks, local, atol=1e-5)
