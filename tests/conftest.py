"""Shared fixtures: the trimmed real data in tests/data (see tests/data/README.md), small manifests over
generated images, the one headless Chromium of the browser tests, and a local Ray."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"  # trimmed from the full files by tests/data/make_fixtures.py
COCO_SAMPLE = TEST_DATA / "coco" / "captions_val2017_sample.json"
STSB_SAMPLE = TEST_DATA / "stsb"
TINY_CLIP = REPO / "csts_pipeline" / "stages" / "embed" / "resources" / "open_clip" / "csts-tiny-clip.json"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session's browser tests (HIT pages, report, Label Studio), through
    Playwright: `CSTS_CHROMIUM` or /usr/bin/chromium. A missing or broken browser fails them, never skips them
    (`make browser` installs one; CI does). Tests open their own context or page and close it."""
    from playwright.sync_api import Error, sync_playwright

    path = os.environ.get("CSTS_CHROMIUM", "/usr/bin/chromium")
    if not (shutil.which(path) or Path(path).is_file()):
        pytest.fail(
            f"no Chromium at {path}: install it (`make browser`, or `apt-get install chromium`) or set CSTS_CHROMIUM"
        )
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        except Error as exc:
            pytest.fail(f"Chromium at {path} does not start: {exc}")
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def coco_val_captions() -> Path:
    """417 COCO val2017 images with their 2,086 captions, in the official COCO JSON layout."""
    return COCO_SAMPLE


@pytest.fixture(scope="session")
def sample_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The generated sample (COCO JSON + JPEGs), made once per test session."""
    from csts_pipeline.stages.embed.readers.sample_data import ensure_sample

    root = tmp_path_factory.mktemp("sample")
    ensure_sample(root / "captions.json", root / "images")
    return root / "captions.json", root / "images"


def first_images(sample: tuple[Path, Path], count: int, folder: Path) -> dict:
    """The COCO JSON (as a dict) of the generated sample's first `count` images, their JPEGs copied into `folder`."""
    captions, images = sample
    coco = json.loads(captions.read_text())
    coco["images"] = coco["images"][:count]
    kept = {image["id"] for image in coco["images"]}
    coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] in kept]
    folder.mkdir(parents=True)
    for image in coco["images"]:
        shutil.copy(images / image["file_name"], folder / image["file_name"])
    return coco


def write_manifest(folder: Path, captions: Path, images: Path, **sections: dict) -> Path:
    """A manifest over the given COCO-format data with the tiny random CLIP; `sections` update its parts."""
    manifest = {
        "name": "test",
        "demo_encoders": True,
        "work_dir": str(folder / "work"),
        "data": {"format": "coco", "captions": str(captions), "images": str(images)},
        "run": {"device": "cpu"},
        "embed": {"model_config_path": str(TINY_CLIP), "batch_size": 16, "num_workers": 0, "images_per_shard": 50},
        "mine": {"k": 4, "candidates_per_shard": 2000},
        "filter": {
            "max_iou": 0.12,
            "min_cosine": 0.4,
            "min_ratio": 0.7,
            "min_length": 50,
            "text_encoder": "packaged:all-MiniLM-L6-v2",
            "text_pooling": "model",
        },
    }
    for section, values in sections.items():
        if isinstance(values, dict):
            manifest.setdefault(section, {}).update(values)
        else:
            manifest[section] = values
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "manifest.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def reseal(folder: Path) -> None:
    """Let a stage record list the files of an output edited by hand, as if its stage had written them."""
    from csts_pipeline.pipeline.records import describe_files, read_record, sealed, write_json

    write_json(folder / "_stage.json", sealed(read_record(folder) | {"output_files": describe_files(folder)}))


STAGES = ("embed", "mine", "filter")


def contents(work: Path, stages: tuple[str, ...] = STAGES) -> dict[str, object]:
    """Every table's rows (sorted, hashed) and every record's counts: what two equal runs share."""
    import hashlib
    import json

    import pyarrow.dataset as ds

    found: dict[str, object] = {}
    for stage in stages:
        folder = work / stage
        for table in sorted(p for p in folder.iterdir() if p.is_dir()):
            rows = sorted(map(repr, ds.dataset(table, format="parquet").to_table().to_pylist()))
            found[f"{stage}/{table.name}"] = hashlib.sha256("\n".join(rows).encode()).hexdigest()
        found[f"{stage}/counts"] = json.loads((folder / "_stage.json").read_text())["counts"]
    return found


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray of 2 CPUs on loopback, for one test module."""
    from csts_pipeline.pipeline.ray_executor import LOOPBACK_ONLY

    for name, value in LOOPBACK_ONLY.items():  # before Ray is imported: a local Ray on loopback only
        os.environ.setdefault(name, value)
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()
