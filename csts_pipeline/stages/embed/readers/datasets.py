"""Dataset readers: COCO captions JSON and Flickr30K in its three common formats.

Every reader returns a `Corpus`: images with a stable integer `image_id` and a file path, captions with a
stable integer `caption_id`, and the list of what was skipped and why. Nothing is dropped silently: a row that
cannot be used is either a `UserError` (the file as a whole is wrong) or a counted, reported `Skip`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
from collections import Counter
from pathlib import Path, PurePosixPath

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import DataConfig
from csts_pipeline.stages.embed.readers.archives import (
    Member,
    read_clip_retrieval,
    read_parquet_images,
    read_webdataset,
)
from csts_pipeline.stages.embed.readers.corpus import (
    MAX_CAPTION_ID,
    MAX_IMAGE_ID,
    MAX_NAME_BYTES,
    Corpus,
    Skip,
    escapes_folder,
)


def read_dataset(config: DataConfig, check_files: bool = True) -> Corpus:
    """Read the manifest's dataset; with `check_files`, images whose file is missing are skipped (reported)."""
    if config.format in ("webdataset", "parquet", "clip-retrieval"):
        return _read_archive(config)
    if config.format == "sample":
        from csts_pipeline.stages.embed.readers.sample_data import ensure_sample

        ensure_sample(config.captions, config.images)
    if not config.captions.is_file():
        raise UserError(f"{config.captions}: caption file not found")
    if check_files and not config.images.is_dir():
        raise UserError(f"{config.images}: image folder not found")
    readers = {
        "coco": read_coco,
        "sample": read_coco,
        "flickr30k-token": read_flickr_token,
        "flickr30k-csv": read_flickr_csv,
        "flickr30k-karpathy": lambda path: read_flickr_karpathy(path, config.split),
    }
    corpus = readers[config.format](config.captions)
    corpus.image_root = config.images
    _drop_escaping_files(corpus)
    if check_files:
        _drop_missing_files(corpus)
    _merge_same_files(corpus, resolve=check_files)
    _drop_images_without_captions(corpus)
    return corpus


def _read_archive(config: DataConfig) -> Corpus:
    """WebDataset shards, Parquet files holding the images, or clip-retrieval embeddings (readers/archives.py)."""
    if not config.images.exists():
        raise UserError(f"{config.images}: not found")
    if config.format == "webdataset":
        rows, no_image = read_webdataset(config.images)
    elif config.format == "clip-retrieval":
        rows, no_image = read_clip_retrieval(config.images, config.caption_columns, config.key_column), []
    else:
        rows = read_parquet_images(config.images, config.image_column, config.caption_columns, config.key_column)
        no_image = []
    corpus = archive_corpus(rows)
    corpus.skips += [Skip("line", key, "sample without an image") for key in no_image]
    corpus.image_root = config.images
    _drop_images_without_captions(corpus)
    return corpus


def archive_corpus(rows: list[tuple[str, str, Member, list]]) -> Corpus:
    """Ids for (key, name, member, captions) rows in key order: numeric keys as image ids, else their rank;
    caption ids are the rank of (image, caption number)."""
    keys = [row[0] for row in rows]
    dupes = [key for key, n in Counter(keys).items() if n > 1]
    if dupes:
        raise UserError(f"duplicate sample keys, e.g. {dupes[:3]}")
    numeric = all(key.isdigit() and int(key) <= 2**62 for key in keys)
    if numeric:
        _check_numeric_keys(keys)
    corpus = Corpus(members=[])
    caption_id = 0
    for rank, (key, name, member, texts) in enumerate(rows):
        image_id = int(key) if numeric else rank
        corpus.image_ids.append(image_id)
        corpus.file_names.append(name)
        corpus.members.append(member)
        for n, raw in enumerate(texts):
            text, problem = _caption_text(raw)
            if problem:
                corpus.skips.append(Skip("caption", f"{name}#{n}", problem))
            else:
                corpus.caption_ids.append(caption_id)
                corpus.caption_image_ids.append(image_id)
                corpus.captions.append(text)
            caption_id += 1
    if caption_id > MAX_CAPTION_ID:
        raise UserError(f"{caption_id} captions: more than caption ids can hold ({MAX_CAPTION_ID})")
    order = sorted(range(len(corpus.image_ids)), key=corpus.image_ids.__getitem__)
    corpus.image_ids = [corpus.image_ids[i] for i in order]
    corpus.file_names = [corpus.file_names[i] for i in order]
    corpus.members = [corpus.members[i] for i in order]
    return corpus


def _check_numeric_keys(keys: list[str]) -> None:
    """Numeric keys become image ids, so `0` and `000000000` would silently be one image: refuse them."""
    seen: dict[int, str] = {}
    for key in keys:
        other = seen.setdefault(int(key), key)
        if other != key:
            raise UserError(f"sample keys {other!r} and {key!r} are the same image id {int(key)}; make them unique")


def read_coco(path: Path) -> Corpus:
    """The official COCO captions JSON (`images`, `annotations`), read through pycocotools."""
    from pycocotools.coco import COCO

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not {"images", "annotations"} <= data.keys():
        raise UserError(f"{path}: not a COCO captions file (needs 'images' and 'annotations' lists)")
    for key, required in (("images", ("id", "file_name")), ("annotations", ("id", "image_id", "caption"))):
        if not isinstance(data[key], list):
            raise UserError(f"{path}: '{key}' must be a list")
        _check_entries(path, key, data[key], required)
        ids = Counter(entry["id"] for entry in data[key])
        dupes = [i for i, n in ids.items() if n > 1]
        if dupes:
            raise UserError(f"{path}: duplicate {key} ids, e.g. {dupes[:3]}")
    coco = COCO()
    coco.dataset = data
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress to stdout
        coco.createIndex()

    corpus = Corpus()
    for image_id in sorted(coco.imgs):
        corpus.image_ids.append(image_id)
        corpus.file_names.append(coco.imgs[image_id]["file_name"])
    known = set(corpus.image_ids)
    for ann_id in sorted(coco.anns):
        ann = coco.anns[ann_id]
        text, problem = _caption_text(ann["caption"])
        if ann["image_id"] not in known:
            corpus.skips.append(Skip("caption", str(ann_id), "unknown image_id"))
        elif problem:
            corpus.skips.append(Skip("caption", str(ann_id), problem))
        elif not 0 <= ann_id <= MAX_CAPTION_ID:
            raise UserError(f"{path}: caption id {ann_id} is outside 0..{MAX_CAPTION_ID}")
        else:
            corpus.caption_ids.append(ann_id)
            corpus.caption_image_ids.append(ann["image_id"])
            corpus.captions.append(text)
    return corpus


def _check_entries(path: Path, key: str, entries: list, required: tuple[str, ...]) -> None:
    """Every entry is an object with the required keys, and its ids are integers: else a one-line UserError
    naming the entry's position, the key and the file."""
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UserError(f"{path}: {key}[{index}] is not an object")
        for name in required:
            if name not in entry:
                raise UserError(f"{path}: {key}[{index}] has no '{name}' key")
        for name in ("id", "image_id"):
            if name in required and (not isinstance(entry[name], int) or isinstance(entry[name], bool)):
                raise UserError(f"{path}: {key}[{index}].{name} is {entry[name]!r}, not an integer")
            if name in required and not -MAX_IMAGE_ID - 1 <= entry[name] <= MAX_IMAGE_ID:
                raise UserError(f"{path}: {key}[{index}].{name} is {entry[name]}, outside the 64-bit integer range")
        if "file_name" in required and not isinstance(entry["file_name"], str):
            raise UserError(f"{path}: {key}[{index}].file_name is {entry['file_name']!r}, not a string")


def _caption_text(value: object) -> tuple[str, str | None]:
    """The stripped caption, or the reason it is skipped: null, not a string, or empty."""
    if value is None:
        return "", "caption is null"
    if not isinstance(value, str):
        return "", "caption is not a string"
    text = value.strip()
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "", "caption is not valid Unicode (a lone surrogate)"
    return text, None if text else "empty caption"


_TOKEN_LINE = re.compile(r"^(?P<name>[^#\t]+)#(?P<n>\d+)\t(?P<text>.*)$")


def read_flickr_token(path: Path) -> Corpus:
    """`results_20130124.token`: one `name.jpg#n<TAB>caption` per line."""
    rows, skips = [], []
    for lineno, line in enumerate(_utf8_text(path).split("\n"), start=1):  # not splitlines: U+2028 in a caption
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        match = _TOKEN_LINE.match(line)
        if match is None:
            skips.append(Skip("line", f"{path.name}:{lineno}", "malformed line (expected name.jpg#n<TAB>caption)"))
            continue
        rows.append((match["name"].strip(), int(match["n"]), match["text"], f"{path.name}:{lineno}"))
    return _flickr_corpus(path, rows, skips)


def _utf8_text(path: Path) -> str:
    """The whole file as UTF-8 text; other bytes are a one-line error naming the file and the byte offset."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); convert it to UTF-8") from None


def read_flickr_csv(path: Path) -> Corpus:
    """`results.csv` (the Kaggle copy): header `image_name| comment_number| comment`, fields split by '|'."""
    rows, skips = [], []
    with io.StringIO(_utf8_text(path), newline="") as handle:
        reader = csv.reader(handle, delimiter="|")
        header = [h.strip() for h in next(reader, [])]
        if header[:3] != ["image_name", "comment_number", "comment"]:
            raise UserError(f"{path}: expected the header 'image_name| comment_number| comment', got {header}")
        for lineno, fields in enumerate(reader, start=2):
            if not fields or not "".join(fields).strip():
                continue
            ref = f"{path.name}:{lineno}"
            if len(fields) < 3 or not fields[1].strip().isdigit():
                skips.append(Skip("line", ref, "malformed line (expected image_name| comment_number| comment)"))
                continue
            rows.append((fields[0].strip(), int(fields[1]), "|".join(fields[2:]), ref))
    return _flickr_corpus(path, rows, skips)


def read_flickr_karpathy(path: Path, split: str | None = None) -> Corpus:
    """Karpathy's `dataset_flickr30k.json`: images with `filename`, `split` and `sentences[].raw`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise UserError(f"{path}: not a Karpathy split file (needs an 'images' list)")
    rows, skips = [], []
    for index, image in enumerate(data["images"]):
        if not isinstance(image, dict):
            raise UserError(f"{path}: images[{index}] is not an object")
        for key in ("filename", "sentences"):
            if key not in image:
                raise UserError(f"{path}: images[{index}] has no '{key}' key")
        if not isinstance(image["filename"], str) or not isinstance(image["sentences"], list):
            raise UserError(f"{path}: images[{index}] needs a string 'filename' and a list of 'sentences'")
        if split is not None and image.get("split") != split:
            continue
        for n, sentence in enumerate(image["sentences"]):
            if not isinstance(sentence, dict) or "raw" not in sentence:
                raise UserError(f"{path}: images[{index}].sentences[{n}] has no 'raw' key")
            rows.append((image["filename"], n, sentence["raw"], f"{image['filename']}#{n}"))
    return _flickr_corpus(path, rows, skips)


def _flickr_corpus(path: Path, rows: list[tuple[str, int, object, str]], skips: list[Skip]) -> Corpus:
    """Shared by the three Flickr formats, so one image gets the same ids from any of them: image_id is the
    numeric file stem (Flickr photo id) and caption_id the rank of (image_id, caption number)."""
    if not rows:
        raise UserError(f"{path}: no captions found")
    seen: dict[tuple[str, int], str] = {}
    entries = []
    stems: dict[int, str] = {}
    for name, n, text, ref in rows:
        stem = Path(name).stem
        if not stem.isdigit():
            raise UserError(f"{path}: image name {name!r} ({ref}) is not a numeric Flickr id")
        if (name, n) in seen:
            raise UserError(f"{path}: duplicate caption {name}#{n} at {ref} and {seen[(name, n)]}")
        seen[(name, n)] = ref
        image_id = int(stem)
        if stems.setdefault(image_id, name) != name:
            raise UserError(f"{path}: file names {stems[image_id]!r} and {name!r} share the id {image_id}")
        entries.append((image_id, n, text, ref))
    entries.sort(key=lambda entry: entry[:2])
    corpus = Corpus(skips=skips)
    for image_id in sorted(stems):
        corpus.image_ids.append(image_id)
        corpus.file_names.append(stems[image_id])
    for caption_id, (image_id, _, raw, ref) in enumerate(entries):
        text, problem = _caption_text(raw)
        if problem:
            corpus.skips.append(Skip("caption", ref, problem))
            continue
        corpus.caption_ids.append(caption_id)
        corpus.caption_image_ids.append(image_id)
        corpus.captions.append(text)
    return corpus


def _drop_escaping_files(corpus: Corpus) -> None:
    keep = [not escapes_folder(name) for name in corpus.file_names]
    for ok, image_id, name in zip(keep, corpus.image_ids, corpus.file_names):
        if not ok:
            corpus.skips.append(Skip("image", f"{image_id} ({name})", "file name outside the image folder"))
    _keep_images(corpus, keep)


def _drop_missing_files(corpus: Corpus) -> None:
    """Images whose file is missing, whose name no file can have, or which (through a symlink) lie outside the
    image folder are skipped, each with its reason."""
    root = corpus.image_root.resolve()
    reasons = [_file_problem(root, name) for name in corpus.file_names]
    for reason, image_id, name in zip(reasons, corpus.image_ids, corpus.file_names):
        if reason:
            shown = name if len(name) <= 80 else f"{name[:60]}...({len(name)} characters)"
            corpus.skips.append(Skip("image", f"{image_id} ({shown})", reason))
    _keep_images(corpus, [reason is None for reason in reasons])


def _file_problem(root: Path, name: str) -> str | None:
    if any(len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for part in PurePosixPath(name).parts):
        return "file name too long"
    path = root / name
    try:
        if not path.is_file():
            return "image file not found"
        if not path.resolve().is_relative_to(root):
            return "file outside the image folder (a symlink)"
    except (OSError, ValueError) as exc:
        return f"image file not readable ({exc.__class__.__name__})"
    return None


SAME_FILE = "same file as an earlier image id; its captions go to that one"


def _merge_same_files(corpus: Corpus, resolve: bool) -> None:
    """Two image ids naming one file (by its resolved path, or its normalised name) are one image: it is embedded
    once, under the first id, which takes the other's captions; the other id is a reported skip naming both."""
    first: dict[str, int] = {}
    merged: dict[int, int] = {}
    for image_id, name in zip(corpus.image_ids, corpus.file_names):
        key = str((corpus.image_root / name).resolve()) if resolve else os.path.normpath(name)
        if key in first:
            merged[image_id] = first[key]
            corpus.skips.append(Skip("image", f"{image_id} ({name}, as image {first[key]})", SAME_FILE))
        else:
            first[key] = image_id
    if merged:
        corpus.caption_image_ids = [merged.get(i, i) for i in corpus.caption_image_ids]
        _keep_images(corpus, [image_id not in merged for image_id in corpus.image_ids])


def _drop_images_without_captions(corpus: Corpus) -> None:
    with_captions = set(corpus.caption_image_ids)
    keep = [image_id in with_captions for image_id in corpus.image_ids]
    for ok, image_id in zip(keep, corpus.image_ids):
        if not ok:
            corpus.skips.append(Skip("image", str(image_id), "no usable caption"))
    _keep_images(corpus, keep)


def _keep_images(corpus: Corpus, keep: list[bool]) -> None:
    if corpus.members is not None:
        corpus.members = [m for m, ok in zip(corpus.members, keep) if ok]
    corpus.image_ids = [i for i, ok in zip(corpus.image_ids, keep) if ok]
    corpus.file_names = [n for n, ok in zip(corpus.file_names, keep) if ok]
    kept = set(corpus.image_ids)
    rows = [(c, i, t) for c, i, t in zip(corpus.caption_ids, corpus.caption_image_ids, corpus.captions) if i in kept]
    dropped = len(corpus.caption_ids) - len(rows)
    if dropped:
        corpus.skips.append(Skip("caption", f"{dropped} captions", "their image was skipped", dropped))
    corpus.caption_ids = [r[0] for r in rows]
    corpus.caption_image_ids = [r[1] for r in rows]
    corpus.captions = [r[2] for r in rows]
