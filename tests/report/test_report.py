"""`csts-pipeline report`: the page opened in headless Chromium (every image loads from file://, the funnel's
numbers equal the stage records, the annotation summary equals the imports' tables, axe-core finds no serious or
critical violation, a phone screen cuts no table), the threshold bands on both sides of each bound, the near
misses against the filter's own rejected pairs, `--compare` of two runs with different thresholds, and thumbnails
from each image source kind.

The browser is required: a missing Chromium fails these tests (CI installs it with `make browser`)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.stages.annotate.layout import condition_task_id

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples" / "annotate"
SCREENSHOT = REPO / "docs" / "images" / "report.png"
BANDS_SCREENSHOT, COMPARE_SCREENSHOT = (
    SCREENSHOT.with_name("report_bands.png"),
    SCREENSHOT.with_name("report_compare.png"),
)


def redraw(path: Path) -> bool:
    """Whether the test draws the screenshot `path`: when it is missing, or always with CSTS_UPDATE_SCREENSHOTS=1."""
    return os.environ.get("CSTS_UPDATE_SCREENSHOTS") == "1" or not path.is_file()


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The sample run, plus the annotate worked example's steps in its annotate folder (docs/annotate.md)."""
    work = tmp_path_factory.mktemp("report") / "sample"
    cli("run", "--dataset", "sample", "--out", str(work))
    annotate = str(work / "annotate")
    kept = str(EXAMPLES / "kept.csv")
    cli("annotate", "export", "--stage", "conditions", "--input", kept, "--n", "8", "--out", annotate)
    cli("annotate", "import", "--stage", "conditions", "--results", str(EXAMPLES / "conditions_results.csv"),
        "--out", annotate)  # fmt: skip
    cli("annotate", "export", "--stage", "ratings", "--out", annotate)
    cli(
        "annotate",
        "import",
        "--stage",
        "ratings",
        "--results",
        str(EXAMPLES / "ratings_results.csv"),
        "--out",
        annotate,
    )
    audit_args = ("--labels", str(EXAMPLES / "audit_labels.csv"), "--reference", str(EXAMPLES / "audit_reference.csv"))
    cli("annotate", "audit", *audit_args, "--out", str(work / "annotate" / "audit"))
    return work


@pytest.fixture(scope="module")
def page(work) -> Path:
    output = cli("report", "--dataset", "sample", "--out", str(work))
    page = work / "report" / "index.html"
    assert str(page) in output
    return page


def records(work: Path) -> dict:
    return {stage: json.loads((work / stage / "_stage.json").read_text()) for stage in ("embed", "mine", "filter")}


def at(tree: dict, dotted: str):
    for key in dotted.split("."):
        tree = tree[key]
    return tree


@pytest.mark.slow
def test_the_page_loads_every_image_and_shows_the_funnel_of_the_records(work, page, browser):
    view = browser.new_page(viewport={"width": 1300, "height": 900})
    view.goto(page.as_uri(), wait_until="load")
    images = view.eval_on_selector_all(
        "img", "all => all.map(i => ({src: i.src, w: i.naturalWidth, h: i.naturalHeight, id: i.dataset.imageId}))"
    )
    thumbs = [image for image in images if image["id"]]
    assert len(images) >= len(thumbs) + 5 and len(thumbs) >= 16  # five figures, both images of the shown pairs
    for image in images:
        assert image["src"].startswith("file://"), image
        assert image["w"] > 0 and image["h"] > 0, f"{image['src']} did not load"
    assert all(max(image["w"], image["h"]) <= 256 for image in thumbs)

    shown = dict(view.eval_on_selector_all("[data-record]", "all => all.map(e => [e.dataset.record, e.textContent])"))
    found = records(work)
    wanted = {"embed.counts.images_in_dataset", "embed.counts.images_embedded", "mine.counts.image_pairs",
              "mine.counts.candidate_pairs", "filter.funnel.kept"}  # fmt: skip
    wanted |= {f"filter.funnel.criteria.{name}.rejected_in_order" for name in found["filter"]["funnel"]["order"]}
    assert wanted <= set(shown)
    for source, text in shown.items():
        assert int(text.replace(",", "")) == at(found, source), source
    assert int(shown["filter.funnel.kept"].replace(",", "")) == found["filter"]["counts"]["kept"]

    # the annotation summary: answers per worker as in the imported ratings
    ratings = pq.read_table(work / "annotate" / "ratings" / "ratings.parquet").column("worker_id").to_pylist()
    rows = view.eval_on_selector_all(
        "table[data-step=ratings] tbody tr", "rows => rows.map(r => Array.from(r.cells, c => c.textContent))"
    )
    assert {row[0]: int(row[1]) for row in rows} == dict(Counter(ratings))
    workers = pq.read_table(work / "annotate" / "ratings" / "workers.parquet").to_pylist()
    evidence = {w["worker_id"]: w.get("evidence") for w in workers if w.get("evidence")}  # the rater model's
    assert [row[2:] for row in rows] == [[evidence[row[0]]] if evidence else [] for row in rows]

    # the audit section: the figures of audit.json, each read from the key it names
    audit = json.loads((work / "annotate" / "audit" / "audit.json").read_text())
    shown = dict(
        view.eval_on_selector_all("[data-audit-key]", "all => all.map(e => [e.dataset.auditKey, e.textContent])")
    )
    assert view.locator("nav a[href='#audit']").count() == 1
    assert shown["matched"] == f"{audit['matched']:,}"
    assert shown["agreement.exact_agreement"] == f"{100 * audit['agreement']['exact_agreement']:.1f}%"
    assert shown["agreement.spearman"].startswith(f"{audit['agreement']['spearman']:.3f}")

    # the funnel's shares: of the candidate pairs, as the records give them
    candidates = found["filter"]["funnel"]["candidates"]
    kept_share = view.locator("tr.kept [data-share]").inner_text()
    assert kept_share == f"{100 * found['filter']['funnel']['kept'] / candidates:.1f}%"
    # every figure opens at full size: a link to its own file
    links = view.eval_on_selector_all("figure a", "all => all.map(a => [a.href, a.querySelector('img').src])")
    assert len(links) >= 5 and all(href == src for href, src in links)
    # the pairs carry the ids annotate gives their condition tasks
    ids = view.eval_on_selector_all(".pair code[title]", "all => all.map(c => [c.textContent, c.title])")
    assert ids and all(text == condition_task_id(int(title.split()[-1])) for text, title in ids)
    assert "Krippendorff's own rule" in view.inner_text("#reading-agreement")
    assert serious_violations(view) == []

    if redraw(SCREENSHOT):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        view.set_viewport_size({"width": 1300, "height": 1700})
        view.screenshot(path=str(SCREENSHOT))
    view.close()


def serious_violations(view) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    found = Axe().run(view).response["violations"]
    serious = [v for v in found if v["impact"] in ("serious", "critical")]
    return [f"{v['id']}: {[n['target'] for n in v['nodes']][:3]}" for v in serious]


@pytest.mark.slow
def test_on_a_phone_no_table_is_cut_and_the_page_passes_axe(page, browser):
    view = browser.new_page(viewport={"width": 390, "height": 844})
    view.goto(page.as_uri(), wait_until="load")
    assert view.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the screen
    cut = view.evaluate(
        "Array.from(document.querySelectorAll('td, th')).filter(c => c.getClientRects().length &&"
        " c.getBoundingClientRect().right > innerWidth + 0.5).map(c => c.textContent.trim().slice(0, 40))"
    )
    assert cut == []
    assert serious_violations(view) == []
    view.close()


@pytest.mark.slow
def test_each_threshold_band_shows_kept_and_rejected_pairs_spread_on_both_sides(work, page, browser):
    view = browser.new_page(viewport={"width": 1300, "height": 900})
    view.goto(page.as_uri(), wait_until="load")
    bands = view.eval_on_selector_all(
        ".band",
        """all => all.map(b => ({criterion: b.dataset.criterion, bound: +b.dataset.bound,
            minimum: b.dataset.minimum === "true",
            kept: Array.from(b.querySelectorAll("[data-side=kept]"), e => +e.dataset.value),
            rejected: Array.from(b.querySelectorAll("[data-side=rejected]"), e => +e.dataset.value)}))""",
    )
    if redraw(BANDS_SCREENSHOT):  # the IoU band: its heading and the first pairs of both sides
        heading, band = view.locator("h3[id^=near-iou]"), view.locator(".band[data-criterion=iou]")
        top, box = heading.bounding_box(), band.bounding_box()
        clip = {
            "x": box["x"],
            "y": top["y"],
            "width": box["width"],
            "height": min(900, box["y"] + box["height"] - top["y"]),
        }
        view.screenshot(path=str(BANDS_SCREENSHOT), clip=clip, full_page=True)
    view.close()
    criteria = records(work)["filter"]["params"]
    assert {band["criterion"] for band in bands} == {"length", "ratio", "iou", "simcse_cosine"}
    assert next(b["bound"] for b in bands if b["criterion"] == "iou") == criteria["max_iou"]
    for band in bands:
        assert len(band["kept"]) >= 2 and len(band["rejected"]) >= 2, band
        above, below = (band["kept"], band["rejected"]) if band["minimum"] else (band["rejected"], band["kept"])
        assert min(above) >= band["bound"] - 1e-6 and max(below) <= band["bound"] + 1e-6, band
        assert len(set(band["kept"])) > 1 and len(set(band["rejected"])) > 1, band  # spread, not one value
        assert band["kept"] == sorted(band["kept"]) and band["rejected"] == sorted(band["rejected"])


def test_compare_with_a_run_of_another_shape_says_what_it_lacks(work, tmp_path):
    """A filter record without `funnel` (an older version's run) was a KeyError traceback; now one line naming the
    record and what it lacks."""
    from csts_pipeline.pipeline.records import read_record, sealed, write_json

    other = tmp_path / "older"
    shutil.copytree(work, other, ignore=shutil.ignore_patterns("annotate", "report*"))
    found = read_record(other / "filter")
    found.pop("funnel")
    write_json(other / "filter" / "_stage.json", sealed(found))
    args = ["report", "--dataset", "sample", "--out", str(work), "--page", str(tmp_path / "p.html"), "--compare"]
    result = CliRunner().invoke(app, [*args, str(other)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"report --compare {other}: its filter record ({other / 'filter' / '_stage.json'}) has no `funnel`" in (
        " ".join(result.output.split())
    ), result.output


@pytest.mark.slow
def test_compare_shows_two_runs_with_different_thresholds_side_by_side(work, browser, tmp_path):
    other = tmp_path / "stricter"
    shutil.copytree(work, other, ignore=shutil.ignore_patterns("annotate", "report*"))
    cli("filter", "--dataset", "sample", "--out", str(other), "--max-iou", "0.08", "--keep-rejected")
    out = tmp_path / "compare.html"
    printed = cli("report", "--dataset", "sample", "--out", str(other), "--page", str(out), "--compare", str(work))
    assert f"compared with {work}" in printed and "filter/rejected/" in printed
    view = browser.new_page(viewport={"width": 1300, "height": 900})
    view.goto(out.as_uri(), wait_until="load")
    rows = view.eval_on_selector_all(
        "table[data-compare=funnel] tbody tr", "rows => rows.map(r => Array.from(r.cells, c => c.textContent))"
    )
    kept = {label: (this, theirs) for label, this, theirs, _ in rows}["kept pairs"]
    stricter, base = records(other)["filter"]["funnel"]["kept"], records(work)["filter"]["funnel"]["kept"]
    assert kept == (f"{stricter:,}", f"{base:,}") and stricter < base
    thresholds = view.eval_on_selector_all(
        "table[data-compare=thresholds] tbody tr", "rows => rows.map(r => Array.from(r.cells, c => c.textContent))"
    )
    assert ["iou", "iou <= 0.08", f"iou <= {records(work)['filter']['params']['max_iou']}"] in thresholds
    images = view.eval_on_selector_all("#compare img", "all => all.map(i => i.naturalWidth)")
    assert len(images) == 4 and all(images)
    if redraw(COMPARE_SCREENSHOT):
        view.locator("#compare").screenshot(path=str(COMPARE_SCREENSHOT))
    view.close()
    for given, message in ((tmp_path / "nowhere", "not a folder"), (tmp_path, "no finished embed output here")):
        args = ["report", "--dataset", "sample", "--out", str(other), "--compare", str(given)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_near_misses_from_a_candidate_sample_match_the_filters_rejected_pairs(work, tmp_path):
    """The default path (a sample of mine's candidates scored with the filter's functions) finds, for each
    criterion, the same nearest distances as the filter's own rejected pairs (--keep-rejected)."""
    from csts_pipeline.pipeline.manifest import open_manifest
    from csts_pipeline.report.funnel import read_records
    from csts_pipeline.report.samples import criteria_of, near_misses

    sampled = near_misses(work, read_records(work), 5, 10**6, 0)  # larger than the run: every candidate
    assert "candidate pairs" in sampled.source
    copy = tmp_path / "copy"
    shutil.copytree(work, copy, ignore=shutil.ignore_patterns("annotate", "report*"))
    cli("filter", "--dataset", "sample", "--out", str(copy), "--keep-rejected")
    stored = near_misses(copy, read_records(copy), 5, 10**6, 0)
    assert "filter/rejected/" in stored.source
    criteria = criteria_of(read_records(copy)["filter"])
    assert set(sampled.pairs) == set(stored.pairs) == set(criteria.active())
    rejected = pq.read_table(copy / "filter" / "rejected").to_pandas()
    for name in criteria.active():
        low, high = criteria.bounds(name)
        values = rejected.loc[rejected.failed == name, name].to_numpy(np.float64)
        beyond = np.sort(low - values if low is not None else values - high)[:5]  # the filter's rejects, by hand
        assert len(beyond) and (beyond > 0).all()
        for found in (sampled, stored):
            shown = [pair[name] for pair in found.pairs[name]]
            assert np.sort(low - np.array(shown) if low is not None else np.array(shown) - high) == pytest.approx(
                beyond, abs=1e-6
            ), name
            assert [p["distance"] for p in found.pairs[name]] == pytest.approx(list(beyond), abs=1e-6), name
    assert open_manifest("sample", None).filter.min_cosine == criteria.min_cosine


@pytest.mark.slow
def test_a_rerun_replaces_the_page_and_its_files_whole(work, page):
    stale = page.with_name("index_files") / "stale.png"
    stale.write_bytes(b"left from an older report")
    cli("report", "--dataset", "sample", "--out", str(work), "--near", "2")
    assert not stale.exists() and (page.with_name("index_files") / "thumbs").is_dir()
    assert not [p for p in page.parent.glob(".index_files*") if p.suffix != ".lock"]  # no staging or old folder


def test_the_audit_section_reads_a_finished_audit_only(tmp_path):
    from csts_pipeline.report.audit import audit_summary
    from csts_pipeline.report.build import render

    annotate = tmp_path / "annotate"
    assert audit_summary(annotate) is None
    (annotate / "audit").mkdir(parents=True)
    (annotate / "audit" / "audit.json").write_text("{}")  # no stage record: not a finished audit
    assert audit_summary(annotate) is None
    labels, reference = EXAMPLES / "audit_labels.csv", EXAMPLES / "audit_reference.csv"
    cli("annotate", "audit", "--labels", str(labels), "--reference", str(reference), "--out", str(annotate / "audit"))
    found = json.loads((annotate / "audit" / "audit.json").read_text())
    summary = audit_summary(annotate)
    figures = {key: value for key, _, value in summary["figures"]}
    assert figures["matched"] == str(found["matched"])
    assert figures["rejected_by_reference"] == str(found["rejected_by_reference"])
    assert figures["agreement.differ_by_2_or_more"] == f"{100 * found['agreement']['differ_by_2_or_more']:.1f}%"
    low, high = found["agreement"]["interval_95"]["pearson"]
    assert figures["agreement.pearson"] == f"{found['agreement']['pearson']:.3f} ({low:.3f} to {high:.3f})"
    assert [k[0] for k in summary["kinds"]] == list(found["by_condition_kind"])
    assert summary["disputed"] == found["most_disputed"][:5]
    # and in the page: the section, escaped, with its nav link
    html = render(page_context(audit=summary))
    assert '<section id="audit">' in html and 'href="#audit"' in html
    assert html.count("data-audit-key=") == len(summary["figures"])
    assert '<section id="audit">' not in render(page_context(audit=None))


def page_context(**given) -> dict:
    """The least context the template renders: an empty run with only what `given` sets."""
    context = {"name": "t", "demo_encoders": False, "work_dir": "w", "made": "now", "funnel": [], "cosine_scope": "",
               "figures": [], "kept": [], "kept_metric": "", "kept_total": 0, "bands": [], "near_source": "",
               "cosine_note": "", "criteria": {}, "thumbs": {}, "files": "f", "thumb_size": 1, "annotations": None,
               "compare": None}  # fmt: skip
    return context | given


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give --dataset NAME or --manifest PATH"),
        (("--dataset", "sample", "--out", "{tmp}"), "no finished embed output here"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, message):
    result = CliRunner().invoke(app, ["report", *(arg.format(tmp=tmp_path) for arg in args)])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def _picture(width: int = 600, height: int = 400) -> bytes:
    image = Image.new("RGB", (width, height), (200, 40, 40))
    out = io.BytesIO()
    image.save(out, "JPEG")
    return out.getvalue()


def test_thumbnails_from_a_folder_a_webdataset_tar_and_a_parquet_column(tmp_path):
    from csts_pipeline.pipeline.manifest import DataConfig
    from csts_pipeline.report.thumbnails import image_sources, make_thumbnail

    data = _picture()
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.jpg").write_bytes(data)
    (tmp_path / "shards").mkdir()
    with tarfile.open(tmp_path / "shards" / "00000.tar", "w") as tar:
        for name, blob in (("000001.jpg", _picture(30, 30)), ("000007.jpg", data), ("000007.txt", b"a red square")):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    (tmp_path / "parquet").mkdir()
    table = pa.table({"key": ["1", "2"], "jpg": [_picture(30, 30), data], "txt": ["x", "y"]})
    pq.write_table(table, tmp_path / "parquet" / "part.parquet")
    kinds = {
        "coco": (DataConfig(format="coco", captions=tmp_path / "c.json", images=tmp_path / "folder"), "a.jpg"),
        "webdataset": (DataConfig(format="webdataset", images=tmp_path / "shards"), "00000.tar/000007.jpg"),
        "parquet": (DataConfig(format="parquet", images=tmp_path / "parquet"), "part.parquet#1"),
    }
    for kind, (config, name) in kinds.items():
        sources = image_sources(config, {5: name})
        assert set(sources) == {5}, kind
        out = tmp_path / f"{kind}.jpg"
        assert make_thumbnail(sources[5], out)
        with Image.open(out) as thumb:
            assert thumb.size == (256, 171), kind  # the longer side at 256, the shape kept
            assert np.abs(np.asarray(thumb, np.int16)[85, 128] - (200, 40, 40)).max() < 12, kind
    assert not make_thumbnail(tmp_path / "folder" / "missing.jpg", tmp_path / "none.jpg")
