"""The filter stage end to end on a mine output built from real COCO captions: outputs and their schema, the
funnel and histograms, resume and no-op, threshold overrides (manifest and CLI), `--pairs` mode, bad input."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from typer.testing import CliRunner

import csts_pipeline.stages.filter.stage as stage
from csts_pipeline.cli import app
from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.executor import plan_fingerprint, staging_folder
from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.pipeline.records import read_record
from csts_pipeline.pipeline.schemas import CAPTIONS, KEPT_SCHEMA, REJECTED_SCHEMA
from csts_pipeline.pipeline.shards import shard_name, write_table
from csts_pipeline.stages.filter import scoring
from csts_pipeline.stages.filter.criteria import CRITERIA, Criteria, reference_pair_metrics
from csts_pipeline.stages.filter.pairs_file import score_file
from tests.conftest import reseal

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
COCO_CAPTIONS = DATA / "coco" / "captions_val2017_sample.json"
MINE_PARAMS = {"k": 6, "pairs": "unordered", "candidates_per_shard": 2000}
FILTER = {
    "max_iou": 0.12,
    "min_cosine": 0.4,
    "max_cosine": None,
    "min_ratio": 0.7,
    "min_length": 50,
    "text_encoder": "packaged:all-MiniLM-L6-v2",
    "text_pooling": "model",
    "text_batch_size": 64,
    "pairs_per_chunk": 1000,  # below the shard size, so shards are scored in several chunks
}


def write_manifest(folder: Path, **filter_overrides) -> Path:
    manifest = {
        "name": "filter-test",
        "work_dir": "work",
        "data": {"format": "coco", "captions": str(COCO_CAPTIONS), "images": "images"},
        "run": {"device": "cpu"},
        "mine": MINE_PARAMS,
        "filter": FILTER | filter_overrides,
    }
    path = folder / "manifest.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def write_candidates(path: Path, caption_1: np.ndarray, caption_2: np.ndarray, image_1, image_2, cosine) -> None:
    write_table(
        pa.table(
            {
                "pair_id": pa.array((caption_1 << 32) | caption_2, pa.int64()),
                "caption_id_1": pa.array(caption_1, pa.int64()),
                "caption_id_2": pa.array(caption_2, pa.int64()),
                "image_id_1": pa.array(image_1, pa.int64()),
                "image_id_2": pa.array(image_2, pa.int64()),
                "image_cosine": pa.array(cosine, pa.float32()),
            }
        ),
        path,
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A work folder holding a finished mine output over 60 real COCO images, its neighbours found from the mean
    MiniLM embedding of each image's captions, and the filter's embedding cache for those captions."""
    folder = tmp_path_factory.mktemp("template")
    manifest = load_manifest(write_manifest(folder))
    annotations = json.loads(COCO_CAPTIONS.read_text())["annotations"]
    image_ids = sorted({a["image_id"] for a in annotations})[:60]
    chosen = sorted((a for a in annotations if a["image_id"] in set(image_ids)), key=lambda a: a["id"])
    caption_ids = np.array([a["id"] for a in chosen], np.int64)
    owners = np.array([a["image_id"] for a in chosen], np.int64)
    texts = [a["caption"].strip() for a in chosen]
    mine_dir = manifest.work_dir / "mine"
    write_table(
        pa.table({"caption_id": caption_ids, "image_id": owners, "caption": pa.array(texts)}),
        mine_dir / CAPTIONS / shard_name(0),
    )
    sentences = list(dict.fromkeys(texts))
    embeddings, _ = scoring.sentence_embeddings(
        manifest.filter, sentences, device=torch.device("cpu"), cache_dir=manifest.work_dir / stage.EMBEDDING_CACHE
    )
    by_text = {text: row for row, text in enumerate(sentences)}
    images = np.stack([embeddings[[by_text[t] for t, o in zip(texts, owners) if o == i]].mean(0) for i in image_ids])
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    similarity = images @ images.T
    np.fill_diagonal(similarity, -2)
    neighbours = np.argsort(-similarity, axis=1)[:, : MINE_PARAMS["k"]]
    pairs = sorted({(min(i, j), max(i, j)) for i in range(len(image_ids)) for j in neighbours[i]})
    rows_1, rows_2, cosines = [], [], []
    for i, j in pairs:
        for a in np.flatnonzero(owners == image_ids[i]):
            for b in np.flatnonzero(owners == image_ids[j]):
                rows_1.append(a)
                rows_2.append(b)
                cosines.append(similarity[i, j])
    rows_1, rows_2 = np.array(rows_1), np.array(rows_2)
    for index, lo in enumerate(range(0, len(rows_1), MINE_PARAMS["candidates_per_shard"])):
        part = slice(lo, lo + MINE_PARAMS["candidates_per_shard"])
        write_candidates(
            mine_dir / "candidates" / shard_name(index),
            caption_ids[rows_1[part]],
            caption_ids[rows_2[part]],
            owners[rows_1[part]],
            owners[rows_2[part]],
            np.array(cosines[part]),
        )
    OutputFolder("mine", mine_dir, MINE_PARAMS, {"embed": "test"}).record_in_place({"candidate_pairs": len(rows_1)})
    return manifest.work_dir


@pytest.fixture
def work(template, tmp_path) -> Path:
    """A fresh copy of the template's work folder; tests find their manifest beside it."""
    shutil.copytree(template, tmp_path / "work")
    return tmp_path / "work"


def manifest_for(work: Path, **filter_overrides):
    return load_manifest(write_manifest(work.parent, **filter_overrides))


def no_encoder(*args, **kwargs):
    raise AssertionError("the text encoder must not be loaded here")


def read_folder(folder: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(folder.glob("part-*.parquet"))])


# --- outputs --------------------------------------------------------------------------------------------------------


def test_stage_writes_kept_and_rejected_pairs_that_follow_the_criteria(work, monkeypatch):
    monkeypatch.setattr(scoring, "load_text_encoder", no_encoder)  # the cache holds every caption's embedding
    manifest = manifest_for(work, keep_rejected=True)
    record = stage.run(manifest)
    out = work / "filter"
    candidates = read_folder(work / "mine" / "candidates")
    assert [p.name for p in sorted((out / "kept").glob("*.parquet"))] == [
        p.name for p in sorted((work / "mine" / "candidates").glob("*.parquet"))
    ]
    kept, rejected = read_folder(out / "kept"), read_folder(out / "rejected")
    assert kept.schema.remove_metadata() == KEPT_SCHEMA
    assert rejected.schema.remove_metadata() == REJECTED_SCHEMA
    assert kept.num_rows > 0 and rejected.num_rows > 0
    assert kept.num_rows + rejected.num_rows == candidates.num_rows
    assert sorted(kept["pair_id"].to_pylist() + rejected["pair_id"].to_pylist()) == sorted(
        candidates["pair_id"].to_pylist()
    )

    # every written row agrees with the reference computed from its two sentences and their own embeddings (from
    # the cache, as the stage read them): never with the row's own cosine
    criteria = Criteria.from_config(manifest.filter)
    sentences, _ = scoring.unique_texts(read_folder(work / "mine" / "captions")["caption"].to_pylist())
    vectors, info = scoring.sentence_embeddings(
        manifest.filter, sentences, device=torch.device("cpu"), cache_dir=work / "text_embeddings"
    )
    assert not info["encoded"]
    embedding = dict(zip(sentences, vectors.astype(np.float64)))
    references = []
    for table, is_kept in ((kept, True), (rejected, False)):
        for row in table.to_pylist():
            pair = (row["sentence1"], row["sentence2"])
            expected = reference_pair_metrics(*pair, embedding[pair[0]], embedding[pair[1]])
            assert row["length"] == expected["length"]
            assert row["iou"] == np.float32(expected["iou"]) and row["ratio"] == np.float32(expected["ratio"])
            if row["simcse_cosine"] is None:  # not computed: a cheaper criterion had rejected the pair
                expected["simcse_cosine"] = float("nan")
                assert row["failed"] in ("length", "ratio", "iou")
            else:
                assert row["simcse_cosine"] == pytest.approx(expected["simcse_cosine"], abs=1e-6)
            assert criteria.first_failed(expected) == (None if is_kept else row["failed"])
            references.append(expected)
    assert kept["simcse_cosine"].null_count == 0

    funnel = record["funnel"]
    assert record["counts"]["candidates"] == candidates.num_rows == funnel["candidates"]
    assert funnel["kept"] == kept.num_rows
    in_order = {name: funnel["criteria"][name]["rejected_in_order"] for name in CRITERIA}
    assert in_order == {name: rejected["failed"].to_pylist().count(name) for name in CRITERIA}
    for name in CRITERIA:
        alone = sum(bool(criteria.fails(name, metrics[name])) for metrics in references)
        assert funnel["criteria"][name]["rejected_alone"] == alone, name
    assert in_order["iou"] < funnel["criteria"]["iou"]["rejected_alone"]
    # without --full-report the cosine is computed on the cheap criteria's survivors only
    assert funnel["criteria"]["simcse_cosine"]["rejected_alone"] == in_order["simcse_cosine"]
    computed = kept.num_rows + rejected["simcse_cosine"].drop_null().__len__()
    assert funnel["cosine_evaluated"] == computed < candidates.num_rows

    histograms = json.loads((out / "histograms.json").read_text())
    for name in ("length", "ratio", "iou"):
        assert sum(histograms[name]["before"]) == candidates.num_rows
    for name in CRITERIA:
        assert sum(histograms[name]["after"]) == kept.num_rows
    assert sum(histograms["simcse_cosine"]["before"]) == funnel["cosine_evaluated"]
    assert (out / "histograms.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = stage.funnel_table(manifest, record)
    assert "filter funnel" in printed and "simcse_cosine >= 0.4" in printed and "--full-report" in printed


def test_full_report_computes_the_cosine_for_every_candidate(work, monkeypatch):
    monkeypatch.setattr(scoring, "load_text_encoder", no_encoder)
    funnel = stage.run(manifest_for(work, full_report=True))["funnel"]
    cosine = funnel["criteria"]["simcse_cosine"]
    assert funnel["cosine_evaluated"] == funnel["candidates"]
    assert cosine["rejected_alone"] > cosine["rejected_in_order"]
    assert funnel["cosine_scope"] == "all candidates"
    assert sum(funnel["histograms"]["simcse_cosine"]["before"]) == funnel["candidates"]


# --- resume, no-op, reruns with other thresholds --------------------------------------------------------------------


def test_rerun_is_a_no_op_and_the_cli_prints_the_funnel_again(work):
    manifest = manifest_for(work)
    first = stage.run(manifest)
    mtimes = {p: p.stat().st_mtime_ns for p in (work / "filter").rglob("*") if p.is_file()}
    assert stage.run(manifest) == {"status": "up-to-date", "folder": str(work / "filter")}
    assert {p: p.stat().st_mtime_ns for p in (work / "filter").rglob("*") if p.is_file()} == mtimes
    result = CliRunner().invoke(app, ["filter", "--manifest", str(write_manifest(work.parent))])
    assert result.exit_code == 0, result.output
    assert result.output.count("up to date") == 1
    assert f"filter funnel: {first['funnel']['candidates']:,} candidate pairs" in result.output


def test_resume_after_a_crash_redoes_only_the_unfinished_shards(work, monkeypatch):
    manifest = manifest_for(work)
    real = stage.FilterStage.process
    calls: list[str] = []

    def crash_on_second_shard(self, unit, staging):
        calls.append(unit.key)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated crash")
        return real(self, unit, staging)

    monkeypatch.setattr(stage.FilterStage, "process", crash_on_second_shard)
    with pytest.raises(KeyboardInterrupt):
        stage.run(manifest)
    assert not (work / "filter").exists()  # nothing committed
    staging = staging_folder(stage.FilterStage(manifest))
    assert [p.name for p in (staging / "kept").glob("*.parquet")] == [shard_name(0)]
    before = (staging / "kept" / shard_name(0)).stat().st_mtime_ns

    calls.clear()
    monkeypatch.setattr(stage.FilterStage, "process", lambda self, u, s: (calls.append(u.key), real(self, u, s))[1])
    second = stage.run(manifest)
    assert second["resumed"] and second["units_reused"] == 1 and shard_name(0) not in " ".join(calls)
    assert (work / "filter" / "kept" / shard_name(0)).stat().st_mtime_ns == before
    assert not staging.exists() and not list((work / "filter").rglob(".*"))
    clean = stage.run(manifest, force=True)
    assert second["funnel"] == clean["funnel"] and second["fingerprint"] == clean["fingerprint"]


@pytest.mark.parametrize("damage", ["vanished", "replaced"])
def test_a_resumed_run_redoes_a_finished_shard_that_vanished_or_changed(work, monkeypatch, damage):
    """A finished unit is reused only while its shards are in the staging folder as it wrote them: the resumed run
    commits what a clean run does, and the record's counts are the rows of its files."""
    manifest = manifest_for(work, keep_rejected=True)
    real = stage.FilterStage.process
    calls: list[str] = []

    def crash_on_third_shard(self, unit, staging):
        calls.append(unit.key)
        if len(calls) == 3:
            raise KeyboardInterrupt("simulated crash")
        return real(self, unit, staging)

    monkeypatch.setattr(stage.FilterStage, "process", crash_on_third_shard)
    with pytest.raises(KeyboardInterrupt):
        stage.run(manifest)
    staging = staging_folder(stage.FilterStage(manifest))
    if damage == "vanished":
        (staging / "kept" / shard_name(0)).unlink()
    else:  # the same name, other rows: the rejected shard of another unit
        shutil.copy(staging / "rejected" / shard_name(1), staging / "rejected" / shard_name(0))
    monkeypatch.setattr(stage.FilterStage, "process", real)
    resumed = stage.run(manifest)
    assert resumed["units_reused"] == 1
    kept = {name: pq.read_table(work / "filter" / "kept" / name).num_rows for name in (shard_name(0), shard_name(1))}
    clean = stage.run(manifest, force=True)
    assert resumed["counts"] == clean["counts"] and resumed["funnel"] == clean["funnel"]
    assert kept == {name: pq.read_table(work / "filter" / "kept" / name).num_rows for name in kept}
    assert resumed["counts"]["kept"] == pq.read_table(work / "filter" / "kept").num_rows


def test_a_missing_upstream_shard_is_refused_with_one_line(work):
    (work / "mine" / "candidates" / shard_name(1)).unlink()
    with pytest.raises(UserError, match=r"part-00001.parquet: missing.*`csts-pipeline mine --force`"):
        stage.run(manifest_for(work))


def test_other_thresholds_rerun_without_encoding_again(work, monkeypatch):
    first = stage.run(manifest_for(work))
    monkeypatch.setattr(scoring, "load_text_encoder", no_encoder)
    second = stage.run(manifest_for(work, max_iou=0.3))
    assert second["fingerprint"] != first["fingerprint"]
    assert second["text_encoder"]["encoded"] is False
    assert second["funnel"]["criteria"]["iou"]["rule"] == "iou <= 0.3"
    assert second["counts"]["kept"] >= first["counts"]["kept"]


def test_a_criterion_switched_off_in_the_manifest_loads_no_encoder(work, monkeypatch):
    shutil.rmtree(work / stage.EMBEDDING_CACHE)
    monkeypatch.setattr(scoring, "load_text_encoder", no_encoder)
    record = stage.run(manifest_for(work, min_cosine=None))
    kept = read_folder(work / "filter" / "kept")
    assert kept["simcse_cosine"].null_count == kept.num_rows > 0
    assert record["funnel"]["criteria"]["simcse_cosine"]["rule"] == "off"
    assert record["params"]["text_encoder"] is None


def test_manifest_overrides_reach_the_criteria_and_the_fingerprint(work):
    path = write_manifest(work.parent)

    def fingerprint_of(manifest):
        filter_stage = stage.FilterStage(manifest)
        plan = filter_stage.plan()
        return plan, plan_fingerprint(filter_stage, plan)

    _, base_fingerprint = fingerprint_of(load_manifest(path))
    override, override_fingerprint = fingerprint_of(
        load_manifest(path, {"filter.max_iou": 0.5, "filter.min_length": 40})
    )
    assert override.params["max_iou"] == 0.5 and override.params["min_length"] == 40
    assert override_fingerprint != base_fingerprint
    assert fingerprint_of(load_manifest(path, {"filter.pairs_per_chunk": 7}))[1] == base_fingerprint
    with pytest.raises(UserError, match="max_iou"):
        load_manifest(path, {"filter.max_iou": 1.5})
    with pytest.raises(UserError, match="min_cosine"):
        load_manifest(path, {"filter.min_cosine": 0.9, "filter.max_cosine": 0.5})


# --- the CLI --------------------------------------------------------------------------------------------------------


def test_cli_overrides_thresholds_and_switches_criteria_off(work, monkeypatch):
    monkeypatch.setattr(scoring, "load_text_encoder", no_encoder)
    manifest = write_manifest(work.parent)
    args = ["filter", "--manifest", str(manifest), "--max-iou", "0.3", "--min-cosine", "none", "--min-length", "40"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "filter funnel" in result.output and "filter: done" in result.output
    params = read_record(work / "filter")["params"]
    assert (params["max_iou"], params["min_cosine"], params["min_length"], params["min_ratio"]) == (0.3, None, 40, 0.7)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-iou", "lots"], "--max-iou 'lots': give a number"),
        (["--max-iou", "1.5"], "filter.max_iou"),
        (["--pairs", "x.csv"], "--pairs needs --out"),
    ],
)
def test_cli_bad_options_are_one_line_errors(work, args, message):
    result = CliRunner().invoke(app, ["filter", "--manifest", str(write_manifest(work.parent)), *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


# --- --pairs mode ---------------------------------------------------------------------------------------------------


@pytest.fixture
def stsb_csv(tmp_path) -> Path:
    """150 STS-B dev pairs as a CSV with the columns sentence1, sentence2 (and the gold score)."""
    source = DATA / "stsb" / "sts-dev.csv"
    rows = [line.split("\t") for line in source.read_text(encoding="utf-8").splitlines()[:150]]
    path = tmp_path / "stsb.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["score", "sentence1", "sentence2"])
        writer.writerows([row[4], row[5], row[6]] for row in rows)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_pairs_mode_scores_any_sentence_pairs(work, stsb_csv, suffix):
    out = work.parent / f"scored{suffix}"
    args = ["filter", "--manifest", str(write_manifest(work.parent)), "--pairs", str(stsb_csv), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "filter funnel: 150 candidate pairs" in result.output
    if suffix == ".parquet":
        scored = pq.read_table(out)
    else:
        from pyarrow import csv as pacsv

        scored = pacsv.read_csv(out, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
    assert scored.column_names == ["score", "sentence1", "sentence2", *CRITERIA, "kept", "failed"]
    assert scored.num_rows == 150 and scored["simcse_cosine"].null_count == 0
    criteria = Criteria(min_length=50, min_ratio=0.7, max_iou=0.12, min_cosine=0.4)
    for row in scored.to_pylist():
        expected = reference_pair_metrics(row["sentence1"], row["sentence2"], None, None)
        assert row["length"] == expected["length"] and row["iou"] == pytest.approx(expected["iou"], abs=1e-6)
        failed = criteria.first_failed({**expected, "simcse_cosine": row["simcse_cosine"]})
        assert row["kept"] is (failed is None) and row["failed"] == failed
    assert not (work / "filter").exists()  # --pairs mode writes only --out


def test_pairs_mode_with_the_cosine_off_loads_no_encoder(work, stsb_csv, monkeypatch):
    monkeypatch.setattr(scoring, "load_text_encoder", no_encoder)
    out = work.parent / "scored.parquet"
    args = ["--manifest", str(write_manifest(work.parent)), "--pairs", str(stsb_csv), "--out", str(out)]
    result = CliRunner().invoke(app, ["filter", *args, "--min-cosine", "none", "--min-length", "none"])
    assert result.exit_code == 0, result.output
    scored = pq.read_table(out)
    assert scored["simcse_cosine"].null_count == 150
    assert set(scored["failed"].drop_null().to_pylist()) <= {"ratio", "iou"}


def test_pairs_mode_bad_files(work, tmp_path):
    manifest = load_manifest(write_manifest(work.parent))
    with pytest.raises(UserError, match="pairs file not found"):
        score_file(manifest, tmp_path / "missing.csv", tmp_path / "out.parquet")
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("text_a,text_b\nA dog.,A cat.\n")
    with pytest.raises(UserError, match=r"missing column\(s\) sentence1, sentence2"):
        score_file(manifest, wrong, tmp_path / "out.parquet")
    with pytest.raises(UserError, match=r"give a \.csv or \.parquet"):
        score_file(manifest, wrong, tmp_path / "out.txt")
    nulls = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"sentence1": ["A dog.", None], "sentence2": ["A cat.", "A cow."]}), nulls)
    with pytest.raises(UserError, match="1 row"):
        score_file(manifest, nulls, tmp_path / "out.parquet")


def test_pairs_mode_does_not_keep_blank_sentences_at_cosine_1(work):
    """Two blank sentences embed alike (cosine 1) and would pass with the cheap criteria off: they are not scored,
    but listed as failed `blank`, counted apart from the funnel."""
    pairs, out = work.parent / "blank.parquet", work.parent / "scored.parquet"
    first = ["A dog runs along the beach.", "", "   ", "A man rides a horse."]
    second = ["A dog runs on the sand.", "", "A cat sleeps.", "A man rides a horse."]
    pq.write_table(pa.table({"id": [1, 2, 3, 4], "sentence1": first, "sentence2": second}), pairs)
    args = ["filter", "--manifest", str(write_manifest(work.parent)), "--pairs", str(pairs), "--out", str(out)]
    off = ["--min-length", "none", "--min-ratio", "none", "--max-iou", "none"]
    result = CliRunner().invoke(app, [*args, *off])
    assert result.exit_code == 0, result.output
    assert "filter funnel: 2 candidate pairs" in result.output
    assert "2 pairs with a blank sentence not scored (failed: blank)" in result.output.splitlines()
    [done] = [line for line in result.output.splitlines() if line.startswith("scored ")]
    assert done.startswith("scored 4 pairs in ") and done.endswith(f"2 kept -> {out}")
    scored = pq.read_table(out)
    assert scored["id"].to_pylist() == [1, 2, 3, 4] and scored["sentence1"].to_pylist() == first
    assert scored["kept"].to_pylist() == [True, False, False, True]
    assert scored["failed"].to_pylist() == [None, "blank", "blank", None]
    assert scored["simcse_cosine"].to_pylist()[1:3] == [None, None]
    assert scored["simcse_cosine"][3].as_py() == pytest.approx(1.0, abs=1e-5)


# --- bad input ------------------------------------------------------------------------------------------------------


def test_missing_mine_output_names_the_stage_to_run(tmp_path):
    with pytest.raises(UserError, match="run `csts-pipeline mine` first"):
        stage.run(load_manifest(write_manifest(tmp_path)))


def test_mine_output_from_other_parameters_is_refused(work):
    manifest = load_manifest(write_manifest(work.parent), {"mine.k": 12})
    with pytest.raises(UserError, match=r"mine.k=6 but the manifest says 12"):
        stage.run(manifest)


def test_mine_output_older_than_embed_is_refused(work):
    (work / "embed").mkdir()
    OutputFolder("embed", work / "embed", {}, {}).record_in_place({})
    stale = r"mine: stale: the embed output it was computed from has changed since; rerun `csts-pipeline mine`"
    with pytest.raises(UserError, match=stale):
        stage.run(manifest_for(work))


def test_empty_candidate_shards_give_empty_kept_shards(work):
    empty = np.array([], np.int64)
    write_candidates(work / "mine" / "candidates" / shard_name(99), empty, empty, empty, empty, empty)
    reseal(work / "mine")
    record = stage.run(manifest_for(work, keep_rejected=True))
    assert pq.read_table(work / "filter" / "kept" / shard_name(99)).num_rows == 0
    assert pq.read_table(work / "filter" / "rejected" / shard_name(99)).num_rows == 0
    assert record["counts"]["shards"] == len(list((work / "mine" / "candidates").glob("*.parquet")))


def test_no_candidate_shards_is_an_error(work):
    shutil.rmtree(work / "mine" / "candidates")
    reseal(work / "mine")
    with pytest.raises(UserError, match="no candidate shards"):
        stage.run(manifest_for(work))


def test_unknown_caption_ids_and_broken_shards_are_errors(work):
    manifest = manifest_for(work)
    shard = work / "mine" / "candidates" / shard_name(0)
    ids = np.array([1], np.int64)
    write_candidates(shard, ids, ids, ids, ids, np.array([0.5]))
    reseal(work / "mine")
    with pytest.raises(UserError, match="caption_id 1 is not in"):
        stage.run(manifest)
    pq.write_table(pa.table({"pair_id": ids}), shard)
    reseal(work / "mine")
    with pytest.raises(UserError, match=r"missing column\(s\) caption_id_1"):
        stage.run(manifest)
    shard.write_bytes(b"not parquet at all")  # a damaged file: its size no longer matches the record
    with pytest.raises(UserError, match="the mine output is incomplete"):
        stage.run(manifest)


# --- the whole sample ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_run_sample_runs_embed_mine_and_filter(tmp_path):
    result = CliRunner().invoke(app, ["run", "--dataset", "sample", "--out", str(tmp_path / "sample")])
    assert result.exit_code == 0, result.output
    assert "embed: done" in result.output and "mine: done" in result.output and "filter: done" in result.output
    assert "filter funnel" in result.output
    record = read_record(tmp_path / "sample" / "filter")
    assert record["counts"]["kept"] > 0
    status = CliRunner().invoke(app, ["status", "--dataset", "sample", "--out", str(tmp_path / "sample")])
    assert "filter   done" in status.output
