"""Regenerate the trimmed test data (tests/data/) and the README's STS-B sample (docs/examples/stsb/) from the full
files in ../shared/data. Only this script needs ../shared; the tests read what it wrote, which is committed.

    python tests/data/make_fixtures.py            # from the repository root

Deterministic: the same full files give byte-identical outputs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
HERE = Path(__file__).resolve().parent
EXAMPLES = REPO / "docs" / "examples" / "stsb"

COCO_FIRST_IMAGES = 250  # the lowest image ids: tests take the first 60 (filter) and 160 (annotate) of them
COCO_TRICKY_CAPTIONS = 200  # plus the images of the first captions with an apostrophe or a digit (pair filter)
STSB_ROWS = {"train": 200, "dev": 200, "test": 200}  # per file, for the tests
STSB_EXAMPLE_ROWS = 300  # docs/examples/stsb/sts-test-sample.csv, the README's evaluate example
USTS_C_PAIRS = 40  # bench/annotate/test_usts_crowd.py, test_peers.py: their benches on a slice of USTS-C


def tricky(caption: str) -> bool:
    return "'" in caption or any(ch.isdigit() for ch in caption)


def trim_coco(source: Path, target: Path) -> None:
    """The official COCO caption JSON (info, licenses, images, annotations), cut to a few hundred images with all
    their captions; images and annotations keep the source's order and fields."""
    full = json.loads(source.read_text(encoding="utf-8"))
    annotations = full["annotations"]
    keep = set(sorted({a["image_id"] for a in annotations})[:COCO_FIRST_IMAGES])
    keep |= {a["image_id"] for a in [a for a in annotations if tricky(a["caption"])][:COCO_TRICKY_CAPTIONS]}
    trimmed = {key: value for key, value in full.items() if key not in ("images", "annotations")}
    trimmed["images"] = [image for image in full["images"] if image["id"] in keep]
    trimmed["annotations"] = [a for a in annotations if a["image_id"] in keep]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(trimmed, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{target}: {len(trimmed['images'])} images, {len(trimmed['annotations'])} captions")


def trim_stsb(source: Path, target: Path, rows: int) -> None:
    """`rows` lines spread evenly over the file (which is ordered by genre), byte for byte as in the source."""
    lines = source.read_bytes().splitlines(keepends=True)
    step = len(lines) / rows
    chosen = [lines[int(i * step)] for i in range(rows)]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"".join(chosen))
    extra = sum(line.count(b"\t") > 6 for line in chosen)
    print(f"{target}: {len(chosen)} of {len(lines)} rows ({extra} with extra fields)")


def trim_usts(source: Path, target: Path, pairs: int) -> None:
    """`pairs` entries of a USTS JSON file spread evenly over it (the file is ordered by source), every field as
    in the source, in the source's layout (an object keyed by pair id, indent 4, the Chinese text as is)."""
    full = json.loads(source.read_text(encoding="utf-8"))
    keys = list(full)
    step = len(keys) / pairs
    trimmed = {keys[int(i * step)]: full[keys[int(i * step)]] for i in range(pairs)}
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(trimmed, ensure_ascii=False, indent=4) + "\n", encoding="utf-8")
    print(f"{target}: {len(trimmed)} of {len(keys)} pairs")


def main() -> None:
    if not SHARED.is_dir():
        raise SystemExit(f"full data not found at {SHARED}")
    trim_coco(SHARED / "coco" / "captions_val2017.json", HERE / "coco" / "captions_val2017_sample.json")
    for name, rows in STSB_ROWS.items():
        trim_stsb(SHARED / "stsb" / f"sts-{name}.csv", HERE / "stsb" / f"sts-{name}.csv", rows)
    trim_stsb(SHARED / "stsb" / "sts-test.csv", EXAMPLES / "sts-test-sample.csv", STSB_EXAMPLE_ROWS)
    for folder in (HERE / "stsb", EXAMPLES):
        for name in ("LICENSE.txt", "readme.txt"):
            shutil.copyfile(SHARED / "stsb" / name, folder / name)
    shutil.copyfile(SHARED / "nltk_stopwords_english.txt", HERE / "nltk_stopwords_english.txt")
    trim_usts(SHARED / "usts" / "ustsc_train.json", HERE / "usts" / "ustsc_train.json", USTS_C_PAIRS)
    shutil.copyfile(SHARED / "usts" / "LICENSE", HERE / "usts" / "LICENSE")


if __name__ == "__main__":
    main()
