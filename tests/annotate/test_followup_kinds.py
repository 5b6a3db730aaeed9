"""`annotate export --stage ratings --more` routes people to the items of a kind of condition a language model
errs on (its kind weak, or its mean error there half a point or more), however narrow their posterior, until
people have rated them KIND_MIN_RATINGS times; the reason is written beside the batch and counted in its record.
Through the steps the CLI runs: `export --stage ratings`, `annotate rate` with a model answering chosen
distributions (testing.chosen_model), people's results files, `import --stage ratings --aggregate
model`, `export --more`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from csts_pipeline.stages.annotate.aggregation import model_workers
from csts_pipeline.stages.annotate.steps import followup
from csts_pipeline.testing.chosen_model import rate_with
from csts_pipeline.testing.command_path import People, first_batch, import_model, prepare_folder
from csts_pipeline.testing.simulate_models import SURE_FIVE, kernel

PAIRS = 60
COLOUR, NUMBER = "The colour of the main object.", "The number of people."  # every pair: high colour, low number


def routed(tmp_path: Path, five_on_colour: bool) -> tuple[dict, dict, dict]:
    """Two human ratings an item, a model close to the truth on the number conditions and, with
    `five_on_colour`, sure of 5 (q = 0.99) on every colour condition (else close to the truth there too); then
    `export --more`. The items table by item id, each routed item's reason, and the record."""
    pairs = [(f"A dog runs in field {i}.", f"A cat sits on mat {i}.") for i in range(PAIRS)]
    folder = tmp_path / "annotate"
    items = prepare_folder(pairs, folder, (COLOUR, NUMBER))
    rng = np.random.default_rng(0)
    truth = {item: float(rng.integers(1, 6)) for item in items}
    answers = {}
    for item, (_, kind) in items.items():
        close = kernel(np.array([truth[item] + rng.normal(0, 0.3)]), 0.6)[0]
        answers[item] = (SURE_FIVE if five_on_colour and kind == "high" else close, 0.05)
    rate_with(folder, "model", answers)
    people = People.around(truth, seed=0, spam=0.0, lenient=0.0, harsh=0.0)
    import_model(folder, [first_batch(folder, people, 2, tmp_path / "first.csv", 0)])
    record = followup.export_more(folder, force=True)
    with (folder / followup.RATINGS_MORE / followup.REASONS_FILE).open(newline="") as handle:
        reasons = {row["item_id"]: row["reason"] for row in csv.DictReader(handle)}
    table = pq.read_table(folder / "ratings" / "items.parquet").to_pylist()
    return {row["item_id"]: row for row in table}, reasons, record


def narrow(row: dict) -> bool:
    """No rule but the kind's would ask for this item: rated, posterior sd at most 0.5, no model contradicting."""
    if row["distribution"] is None:
        return False
    sd = followup.posterior_sd(np.array([row["distribution"]]))[0]
    return sd <= followup.MORE_ABOVE_SD and (row["model_log10_ratio"] or 0.0) <= followup.RATIO_ABOVE


def test_a_model_sure_of_five_on_colour_sends_the_colour_items_to_people(tmp_path: Path):
    items, reasons, record = routed(tmp_path, five_on_colour=True)
    colour = [i for i, row in items.items() if row["condition"] == COLOUR]
    few = [i for i in colour if items[i]["ratings"] < followup.KIND_MIN_RATINGS and items[i]["status"] == "kept"]
    assert len(few) >= 0.8 * len(colour)
    assert all(reasons.get(i) == "model_kind_error" for i in few), [reasons.get(i) for i in few]
    assert not any(items[i]["condition"] == NUMBER and r == "model_kind_error" for i, r in reasons.items())
    # the posterior alone would leave most of them: people-only posteriors of two agreeing ratings are narrow
    assert sum(narrow(items[i]) for i in few) >= 20
    assert record["reasons"]["model_kind_error"] == len([r for r in reasons.values() if r == "model_kind_error"])
    assert "of a kind of condition a model errs on" in followup.describe_more(record)
    kinds = json.loads((tmp_path / "annotate" / "ratings" / "agreement.json").read_text())
    model = kinds["model_workers"]["model_share"]["models"][0]
    assert [k["kind"] for k in model["kinds"] if k["weak"]] == ["colour"]
    assert "weak on colour" in model_workers.describe(model) and "--more asks people there" in model_workers.describe(
        model
    )


def test_without_the_kind_error_the_narrow_colour_items_are_left_alone(tmp_path: Path):
    items, reasons, record = routed(tmp_path, five_on_colour=False)
    assert "model_kind_error" not in record["reasons"]
    settled = [i for i, row in items.items() if row["condition"] == COLOUR and narrow(row)]
    assert len(settled) >= 20 and not set(settled) & set(reasons)


def kinds_table(conditions: list[str], ratings: list[int]) -> pa.Table:
    return pa.table({"item_id": [f"i{n}" for n in range(len(conditions))], "condition": conditions,
                     "ratings": ratings})  # fmt: skip


def test_a_kind_is_doubtful_when_weak_or_off_by_half_a_point_and_only_below_the_ratings_asked():
    conditions = ["The colour of the car.", "The number of dogs.", "The place.", "The weather.", "The colour."]
    items = kinds_table(conditions, [2, 2, 2, 2, followup.KIND_MIN_RATINGS])
    rows = pa.table({"item_id": items.column("item_id"), "worker_id": ["model:a"] * 5})

    def fit(kind: str, error: float, weak: bool = False) -> dict:
        return {"kind": kind, "answers": 10, "reliability": 0.2 if weak else 0.7, "error": error, "weak": weak}

    kinds = [fit("colour", 0.6), fit("number", -0.5), fit("place", 0.4), fit("time and weather", 0.0, weak=True)]
    models = [{"worker_id": "model:a", "left_out": False, "kinds": kinds}]
    assert followup.kind_doubt(items, rows, models).tolist() == [True, True, False, True, False]
    # a model left out whole changed no label: routing there is the people's alone
    assert not followup.kind_doubt(items, rows, [{**models[0], "left_out": True}]).any()
    # a model that did not answer an item leaves it alone
    assert not followup.kind_doubt(items, rows.slice(1, 0), models).any()
    # the summary, report and card name the kinds it errs on besides its weak ones
    share = {**models[0], "answers": 40, "reliability": 0.7, "replaced_ratings": 12.0}
    said = model_workers.describe(share)
    assert "errs on colour, number (colour: mean error +0.60 on 10; number: mean error -0.50 on 10)" in said, said
    assert "weak on time and weather" in said and "place" not in said
