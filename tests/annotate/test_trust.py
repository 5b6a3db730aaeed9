"""Trust from evidence (aggregation/trust.py, labels/expert.py, aggregation/em/score_density.py), through the command
line: `annotate import --stage ratings --aggregate model` with a model among the raters, with and without
`--expert`. People answer around a known truth (testing.command_path.People, one or two ratings an item),
the model answers chosen distributions (testing.chosen_model)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import spearmanr
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.stages.annotate.aggregation.em import interval, score_density
from csts_pipeline.stages.annotate.labels import expert
from csts_pipeline.testing.chosen_model import rate_with
from csts_pipeline.testing.command_path import People, first_batch, prepare_folder, task_ids, write_results
from csts_pipeline.testing.simulate_models import kernel

PAIRS = 150
runner = CliRunner()


def folder_with(tmp_path: Path, model: str, seed: int = 0) -> tuple[Path, dict[str, float]]:
    """The conditions imported and the ratings exported for PAIRS pairs, a truth per item, and `annotate rate` by
    a model: "good" (close to the truth, sd 0.6) or "constant" (always 3, sure)."""
    pairs = [(f"A dog runs in field {i}.", f"A cat sits on mat {i}.") for i in range(PAIRS)]
    folder = tmp_path / "annotate"
    items = prepare_folder(pairs, folder)
    rng = np.random.default_rng(seed)
    truth = {item: float(rng.integers(1, 6)) for item in items}
    answers = {}
    for item in items:
        good = kernel(np.array([truth[item] + rng.normal(0, 0.3)]), 0.6)[0]
        answers[item] = (good if model == "good" else np.eye(5)[2] * 0.99 + 0.0025, 0.05)
    rate_with(folder, model, answers)
    return folder, truth


def import_ratings(folder: Path, results: Path, *extra: str | Path) -> str:
    args = ["annotate", "import", "--stage", "ratings", "--out", folder, "--aggregate", "model", "--force"]
    result = runner.invoke(app, [str(a) for a in [*args, "--results", results, *extra]])
    assert result.exit_code == 0, result.output
    return result.output


def labels(folder: Path) -> dict[str, float]:
    rows = pq.read_table(folder / "ratings" / "items.parquet").to_pylist()
    return {r["item_id"]: r["label"] for r in rows if r["label"] is not None}


def workers(folder: Path) -> dict[str, dict]:
    return {r["worker_id"]: r for r in pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()}


def rho(found: dict[str, float], truth: dict[str, float]) -> float:
    ids = sorted(found)
    return float(spearmanr([found[i] for i in ids], [truth[i] for i in ids]).statistic)


def test_one_person_an_item_without_evidence_weighs_people_and_model_alike(tmp_path: Path):
    """Nothing measures the people: they are pinned where they come out as reliable as the model, the summary
    says the weights were assumed, and every worker's evidence says so."""
    folder, truth = folder_with(tmp_path, "good")
    people = People.around(truth, seed=0, spam=0.0, lenient=0.0, harsh=0.0)
    said = import_ratings(folder, first_batch(folder, people, 1, tmp_path / "one.csv", 0))
    assert "weights assumed: nothing in the batch measures the people" in said
    found = workers(folder)
    model = found.pop("model:good")
    assert model["evidence"].startswith("agreement with people") and "assumed" in model["evidence"]
    assert all(w["evidence"].startswith("assumed: people pinned at reliability") for w in found.values())
    people_reliability = np.mean([w["reliability"] for w in found.values()])
    assert abs(people_reliability - model["reliability"]) < 0.15, (people_reliability, model["reliability"])
    assert not any(w["unreliable"] for w in found.values())  # an assumed reliability judges no one


def test_an_expert_sample_measures_the_people_and_names_itself(tmp_path: Path):
    """`--expert` in both forms a re-annotation arrives in: the batch's item ids, or C-STS rows matched by their
    text; the summary and workers.parquet name it, agreement.json counts the rows that met no item."""
    folder, truth = folder_with(tmp_path, "good")
    people = People.around(truth, seed=0, spam=0.0, lenient=0.0, harsh=0.0)
    results = first_batch(folder, people, 1, tmp_path / "one.csv", 0)
    ids = task_ids(folder / "ratings_tasks")[:40]
    by_id = tmp_path / "expert.csv"
    by_id.write_text("item_id,label\n" + "".join(f"{i},{truth[i]:g}\n" for i in ids) + "nowhere,3\n")
    said = import_ratings(folder, results, "--expert", by_id)
    assert "weights measured from the batch's evidence: people by the items of known label" in said
    assert "assumed" not in said.split("weights measured")[1].splitlines()[0]
    found = workers(folder)
    people = [w for name, w in found.items() if not name.startswith("model:")]
    assert all("measured pooled on the items of known label" in w["evidence"] for w in people)
    assert sum("expert sample" in w["evidence"] for w in people) >= len(people) // 2
    agreement = json.loads((folder / "ratings" / "agreement.json").read_text())
    assert agreement["expert"]["items"] == 40 and agreement["expert"]["unmatched_rows"] == 1
    assert agreement["model_workers"]["ambiguity_sd_from"] == "the items of known label"
    rated = labels(folder)
    assert all(abs(rated[i] - truth[i]) < 1e-9 for i in ids if i in rated) and len(set(ids) & set(rated)) >= 35
    tasks = {t["item_id"]: t for t in map(json.loads, (folder / "ratings_tasks" / "tasks.jsonl").open())}
    by_text = tmp_path / "expert-csts.csv"
    with by_text.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sentence1", "sentence2", "condition", "label"])
        writer.writerows([tasks[i]["sentence1"].upper(), tasks[i]["sentence2"], tasks[i]["condition"], truth[i]]
                         for i in ids)  # fmt: skip
    import_ratings(folder, results, "--expert", by_text)
    again = json.loads((folder / "ratings" / "agreement.json").read_text())["expert"]
    assert again["items"] == 40 and again["matched_by"] == "sentence1, sentence2 and condition"


def test_an_expert_json_lines_file_splits_at_newlines_only(tmp_path: Path):
    """A JSON string may hold U+2028 (a Unicode line separator) unescaped: each row stays one row."""
    path = tmp_path / "expert.jsonl"
    rows = [{"sentence1": "A dog\u2028runs.", "sentence2": "A cat.", "condition": "The animal.", "label": 4}] * 2
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    assert expert.read_table_file(path).to_pylist() == rows


def test_a_bad_expert_file_is_one_line(tmp_path: Path):
    folder, truth = folder_with(tmp_path, "good")
    people = People.around(truth, seed=0, spam=0.0, lenient=0.0, harsh=0.0)
    results = first_batch(folder, people, 1, tmp_path / "one.csv", 0)
    base = ["annotate", "import", "--stage", "ratings", "--out", str(folder), "--results", str(results)]
    cases = {
        "item_id,score\na,3\n": "no column label",
        "item_id,label\nnowhere,3\n": "none of its 1 row(s) matches an item",
        f"item_id,label\n{task_ids(folder / 'ratings_tasks')[0]},7\n": "row 1: label 7 is not on the scale",
    }
    for n, (text, words) in enumerate(cases.items()):
        path = tmp_path / f"bad-{n}.csv"
        path.write_text(text)
        result = runner.invoke(app, [*base, "--aggregate", "model", "--expert", str(path)])
        assert result.exit_code != 0 and words in result.output and str(path) in result.output, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    result = runner.invoke(app, [*base, "--expert", str(path)])
    assert result.exit_code != 0 and "--expert: only with --aggregate model" in result.output


def test_a_constant_model_carries_no_information_and_changes_no_label(tmp_path: Path):
    """A model that answers 3 to everything agrees with nothing: left out whole, the people's labels stand, with
    one and with two ratings an item."""
    for per_item in (1, 2):
        alone_dir, truth = folder_with(tmp_path / f"alone-{per_item}", "constant")
        people = People.around(truth, seed=1)
        results = first_batch(alone_dir, people, per_item, tmp_path / f"r{per_item}.csv", 1)
        said = import_ratings(alone_dir, results)
        assert "no information in model:constant" in said
        model = workers(alone_dir)["model:constant"]
        assert model["evidence"].startswith("no information") and model["unreliable"]
        with_model = labels(alone_dir)
        (alone_dir / "model_ratings").rename(tmp_path / f"away-{per_item}")
        import_ratings(alone_dir, results)
        people_only = labels(alone_dir)
        assert abs(rho(with_model, truth) - rho(people_only, truth)) <= 0.01
        assert max(abs(with_model[i] - people_only[i]) for i in people_only) < 1e-6


def test_the_score_density_recovers_a_score_s_means_and_orders_them():
    """With the true labels known (one-hot weights), the M-step gives each label's mean normal score; reversed
    evidence still comes out in the labels' order."""
    rng = np.random.default_rng(0)
    t = rng.integers(1, 6, 4000)
    score = 0.5 * t + rng.normal(0, 0.4, len(t))
    z = score_density.normal_scores(score, np.zeros(len(t), np.int64))
    assert abs(z.mean()) < 1e-9 and abs(z.std() - 1) < 0.05
    params = score_density.m_step(z, np.zeros(len(t), np.int64), np.eye(5)[t - 1], 1)[0]
    expected = [z[t == k].mean() for k in range(1, 6)]
    assert np.allclose(params[:5], expected, atol=0.01) and np.all(np.diff(params[:5]) > 0)
    prior = np.bincount(t, minlength=6)[1:] / len(t)
    assert abs(score_density.reliability(params, prior) - np.corrcoef(t, z)[0, 1]) < 0.02
    flipped = score_density.m_step(-z, np.zeros(len(t), np.int64), np.eye(5)[t - 1], 1)[0]
    assert np.all(np.diff(flipped[:5]) >= 0)


def test_an_expert_sample_calibrates_the_intervals_the_model_made_too_sharp(tmp_path: Path):
    """People who share each item's misreading (sd 0.7) while the import assumes they do not (`--ambiguity-sd
    0`): the posterior is too sure of itself. The expert sample's items, judged from their answers alone, set the
    intervals' threshold, so that on the other items the intervals cover the truth about 90% of the time; the
    summary and agreement.json say what set them."""
    pairs = [(f"A dog runs in field {i}.", f"A cat sits on mat {i}.") for i in range(PAIRS)]
    folder = tmp_path / "annotate"
    items = prepare_folder(pairs, folder)
    rng = np.random.default_rng(5)
    truth = {item: float(rng.integers(1, 6)) for item in items}
    people = People.around(truth, seed=1, spam=0.0, lenient=0.0, harsh=0.0, ambiguity=0.7)
    results = first_batch(folder, people, 2, tmp_path / "two.csv", 1)
    ids = task_ids(folder / "ratings_tasks")
    sample = set(ids[::3])
    expert_file = tmp_path / "expert.csv"
    expert_file.write_text("item_id,label\n" + "".join(f"{i},{truth[i]:g}\n" for i in sorted(sample)))

    def coverage() -> float:
        rows = pq.read_table(folder / "ratings" / "items.parquet").to_pylist()
        rows = [r for r in rows if r["item_id"] in truth and r["item_id"] not in sample and r["label"] is not None]
        return float(np.mean([r["interval_low"] <= truth[r["item_id"]] <= r["interval_high"] for r in rows]))

    said = import_ratings(folder, results, "--ambiguity-sd", "0")
    assert "own posterior mass (no items of known label" in said
    alone = coverage()
    said = import_ratings(folder, results, "--ambiguity-sd", "0", "--expert", expert_file)
    calibrated = coverage()
    assert alone < 0.84 and 0.85 <= calibrated <= 0.96, (alone, calibrated)
    assert f"90% intervals calibrated on {len(sample)} items of known label" in said
    agreement = json.loads((folder / "ratings" / "agreement.json").read_text())
    assert agreement["model_workers"]["interval_calibrated_on"] == len(sample)


def test_the_calibrated_mass_widens_freely_and_narrows_only_on_evidence():
    """Split conformal on 5-label posteriors: where the known labels are wider than the posteriors, the runs
    cover at least 90% of them and not all; where the posteriors are right, the 90% mass stands on 20 items whose
    runs cover 19 (as a 90% coverage would by chance) and gives way on 400 that its runs all cover."""
    rng = np.random.default_rng(0)
    posterior = rng.dirichlet(np.full(5, 0.3), 400)
    wide = np.array([rng.choice(5, p=p**0.5 / (p**0.5).sum()) for p in posterior])  # wider than the posterior
    mass = interval.calibrated_mass(posterior, wide, 0.9)
    assert mass is not None and mass > 0.9
    low, high = interval.credible_interval(posterior, mass)
    covered = (low <= wide + 1) & (wide + 1 <= high)
    assert 0.9 <= covered.mean() < 0.95, covered.mean()
    own_low, own_high = interval.credible_interval(posterior, 0.9)
    assert ((own_low <= wide + 1) & (wide + 1 <= own_high)).mean() < 0.9  # what calibration repaired
    assert interval.calibrated_mass(posterior[:10], wide[:10], 0.9) is None
    sharp = np.argmax(posterior, axis=1)  # the mode is always right: the own runs cover every label
    short = int(np.flatnonzero(own_high - own_low < 4)[0])  # an item whose run leaves a label out
    outside = 0 if own_low[short] > 1 else 4
    rows = np.r_[short, np.setdiff1d(np.arange(20), [short])[:19]]
    labels = np.r_[outside, sharp[rows[1:]]]  # 19 of 20 covered: what a 90% coverage gives by chance
    assert interval.calibrated_mass(posterior[rows], labels, 0.9) is None
    narrowed = interval.calibrated_mass(posterior, sharp, 0.9)
    assert narrowed is not None and narrowed < 0.9


def test_each_item_s_interval_is_its_own_run_closest_to_the_mass():
    posterior = np.array([[0.0, 0.02, 0.1, 0.8, 0.08], [0.0, 0.0, 0.03, 0.97, 0.0], [0.3, 0.4, 0.3, 0.0, 0.0]])
    low, high = interval.credible_interval(posterior, 0.9)
    assert low.tolist() == [3, 4, 1] and high.tolist() == [4, 4, 3]


def take_qualification(folder: Path, workers: list[str], off: int, tmp_path: Path) -> None:
    """`annotate export/import --stage qualification` in the batch's folder: every worker writes passing
    conditions and rates the test's items `off` points from their gold (towards the middle of the scale)."""
    result = runner.invoke(app, ["annotate", "export", "--stage", "qualification", "--out", str(folder), "--force"])
    assert result.exit_code == 0, result.output
    (test,) = map(json.loads, (folder / "qualification_tasks" / "tasks.jsonl").open())
    rated = [i for i in test["items"] if i["kind"] == "rate"]
    written = [i for i in test["items"] if i["kind"] == "write"]
    rows = []
    for worker in workers:
        row = {"test_id": test["test_id"], "worker_id": worker, "assignment_id": f"A-{worker}"}
        for n, _ in enumerate(written, start=1):
            row |= {f"condition_high_{n}": "The place.", f"condition_low_{n}": "The weather."}
        for n, item in enumerate(rated, start=1):
            gold = item["gold_rating"]
            answer = int(float(gold)) + (off if float(gold) < 3 else -off) if gold[:1].isdigit() else None
            row |= {f"rating_{n}": str(answer)} if answer else {f"not_pertinent_{n}": "true"}
        rows.append(row)
    path = tmp_path / f"qualification-{off}.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    args = ["annotate", "import", "--stage", "qualification", "--results", str(path), "--out", str(folder)]
    result = runner.invoke(app, [*args, "--max-rating-error", "2", "--force"])
    assert result.exit_code == 0, result.output


def test_the_qualification_test_measures_the_people_where_nothing_else_does(tmp_path: Path):
    """One person an item and no gold or sample: the people's answers on the qualification test's rating items
    (their gold known) measure the people's noise, so their weights are measured, not assumed; people who were
    exact on the test come out more reliable than the same people a point off on it."""
    folder, truth = folder_with(tmp_path, "good")
    people = People.around(truth, seed=0, spam=0.0, lenient=0.0, harsh=0.0)
    results = first_batch(folder, people, 1, tmp_path / "one.csv", 0)
    reliability = {}
    for off in (0, 1):
        take_qualification(folder, list(people.kind), off, tmp_path)
        said = import_ratings(folder, results)
        assert "weights measured from the batch's evidence: people by the items of known label (with" in said
        found = workers(folder)
        found.pop("model:good")
        assert all("qualification test" in w["evidence"] and "assumed" not in w["evidence"] for w in found.values())
        reliability[off] = np.mean([w["reliability"] for w in found.values()])
        test = json.loads((folder / "ratings" / "agreement.json").read_text())["qualification_test"]
        assert test["workers"] == len(people.kind) and test["ratings"] == test["items"] * test["workers"]
    assert reliability[0] > reliability[1] + 0.05, reliability


def repeat_sample_results(folder: Path, truth: dict[str, float], out: Path, repeated: int) -> Path:
    """One person an item, and `repeated` items rated by two more (the C-STS paper's agreement sample)."""
    people = People.around(truth, seed=0, spam=0.25, lenient=0.15, harsh=0.15)
    three = first_batch(folder, people, 3, out.with_name("three.csv"), 0)
    with three.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    sample = set(task_ids(folder / "ratings_tasks")[:repeated])
    seen: set[str] = set()
    kept = []
    for row in rows:
        if row["item_id"] in sample or row["item_id"] not in seen:
            kept.append(row)
        seen.add(row["item_id"])
    return write_results(out, kept)


def test_a_sparse_repeat_sample_beside_a_model_pins_the_people_at_their_agreement_there(tmp_path: Path):
    """One person an item with 40 items rated three times, and a model: the repeats measure the people (the
    summary says so), pinned at their agreement on the repeated items, pooled (the value in each person's evidence
    and agreement.json), not fitted freely against the model on the items one person rated; with an expert sample
    too, its items measure them; every item rated three times, each person is fitted on their own."""
    folder, truth = folder_with(tmp_path, "good")
    said = import_ratings(folder, repeat_sample_results(folder, truth, tmp_path / "sample.csv", 40))
    assert "weights measured from the batch's evidence: people by their repeats" in said
    people = [w for name, w in workers(folder).items() if not name.startswith("model:")]
    assert all("measured pooled by their agreement on the items two or more rated" in w["evidence"] for w in people)
    trust = json.loads((folder / "ratings" / "agreement.json").read_text())["model_workers"]["trust"]
    assert trust["people_pooled"] and 0.05 <= trust["people_reliability"] <= 0.99
    assert all(f"(reliability {trust['people_reliability']:.2f})" in w["evidence"] for w in people)
    sample = tmp_path / "expert.csv"  # items of known label measure the people better than a few repeats
    sample.write_text(
        "item_id,label\n" + "".join(f"{i},{truth[i]:g}\n" for i in task_ids(folder / "ratings_tasks")[-40:])
    )
    said = import_ratings(folder, tmp_path / "sample.csv", "--expert", sample)
    assert "weights measured from the batch's evidence: people by the items of known label" in said
    import_ratings(folder, repeat_sample_results(folder, truth, tmp_path / "all.csv", len(truth)))
    people = [w for name, w in workers(folder).items() if not name.startswith("model:")]
    assert not any("pooled" in w["evidence"] for w in people)
