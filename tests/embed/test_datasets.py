import json
from pathlib import Path

import pytest

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import DataConfig
from csts_pipeline.stages.embed.readers.datasets import (
    read_coco,
    read_dataset,
    read_flickr_csv,
    read_flickr_karpathy,
    read_flickr_token,
)


def test_coco_val2017_reads_every_image_and_caption(coco_val_captions: Path):
    # the trimmed real file (tests/data): 417 val2017 images with all 2,086 of their captions, 5 or 6 per image
    corpus = read_coco(coco_val_captions)
    assert len(corpus.image_ids) == 417
    assert len(corpus.caption_ids) == 2086
    assert len(set(corpus.caption_ids)) == 2086
    assert set(corpus.caption_image_ids) == set(corpus.image_ids)
    assert all(text == text.strip() and text for text in corpus.captions)
    assert corpus.skips == []
    assert corpus.captions_table().num_rows == 2086


def test_coco_ids_are_stable_across_reads(coco_val_captions: Path):
    first, second = read_coco(coco_val_captions), read_coco(coco_val_captions)
    assert first.caption_ids == second.caption_ids and first.image_ids == second.image_ids


def _coco(tmp_path: Path, images: list, annotations: list) -> Path:
    path = tmp_path / "captions.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations}))
    return path


def test_coco_empty_and_orphan_captions_are_counted_skips(tmp_path: Path):
    path = _coco(
        tmp_path,
        [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}],
        [
            {"id": 10, "image_id": 1, "caption": " A cat on a mat. "},
            {"id": 11, "image_id": 1, "caption": "   "},
            {"id": 12, "image_id": 9, "caption": "Orphan."},
        ],
    )
    corpus = read_coco(path)
    assert corpus.captions == ["A cat on a mat."]
    reasons = {(s.ref, s.reason) for s in corpus.skips}
    assert ("11", "empty caption") in reasons and ("12", "unknown image_id") in reasons


@pytest.mark.parametrize("key", ["images", "annotations"])
def test_coco_duplicate_ids_are_an_error(tmp_path: Path, key: str):
    images = [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}]
    annotations = [{"id": 10, "image_id": 1, "caption": "x"}, {"id": 11, "image_id": 2, "caption": "y"}]
    {"images": images, "annotations": annotations}[key][1]["id"] = {"images": 1, "annotations": 10}[key]
    with pytest.raises(UserError, match=f"duplicate {key} ids"):
        read_coco(_coco(tmp_path, images, annotations))


def test_coco_not_json_or_wrong_layout(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        read_coco(bad)
    bad.write_text("[]")
    with pytest.raises(UserError, match="not a COCO captions file"):
        read_coco(bad)


CAPTIONS = {
    "1000092795.jpg": ["Two young guys with shaggy hair look at their hands.", "Two friends enjoy time outside."],
    "10002456.jpg": ["Several men in hard hats are operating a pulley system.", "Workers look down from above."],
}


def _flickr_files(tmp_path: Path) -> dict[str, Path]:
    token = tmp_path / "results_20130124.token"
    token.write_text(
        "".join(f"{name}#{n}\t{text}\n" for name, texts in CAPTIONS.items() for n, text in enumerate(texts))
    )
    results = tmp_path / "results.csv"
    results.write_text(
        "image_name| comment_number| comment\n"
        + "".join(f"{name}| {n}| {text}\n" for name, texts in CAPTIONS.items() for n, text in enumerate(texts))
    )
    karpathy = tmp_path / "dataset_flickr30k.json"
    karpathy.write_text(
        json.dumps(
            {
                "images": [
                    {"filename": name, "split": "train", "sentences": [{"raw": t} for t in texts]}
                    for name, texts in CAPTIONS.items()
                ]
            }
        )
    )
    return {"token": token, "csv": results, "karpathy": karpathy}


def test_the_three_flickr_formats_give_the_same_ids_and_texts(tmp_path: Path):
    files = _flickr_files(tmp_path)
    corpora = [
        read_flickr_token(files["token"]),
        read_flickr_csv(files["csv"]),
        read_flickr_karpathy(files["karpathy"]),
    ]
    for corpus in corpora:
        assert corpus.image_ids == [10002456, 1000092795]
        assert corpus.file_names == ["10002456.jpg", "1000092795.jpg"]
        assert corpus.caption_ids == [0, 1, 2, 3]
        assert corpus.caption_image_ids == [10002456, 10002456, 1000092795, 1000092795]
        assert corpus.captions == corpora[0].captions
    assert corpora[0].captions[0] == "Several men in hard hats are operating a pulley system."


def test_karpathy_split_filter(tmp_path: Path):
    path = tmp_path / "k.json"
    path.write_text(
        json.dumps(
            {
                "images": [
                    {"filename": "1.jpg", "split": "train", "sentences": [{"raw": "a"}]},
                    {"filename": "2.jpg", "split": "test", "sentences": [{"raw": "b"}]},
                ]
            }
        )
    )
    assert read_flickr_karpathy(path, "test").image_ids == [2]


def test_flickr_malformed_lines_are_counted_skips(tmp_path: Path):
    token = tmp_path / "r.token"
    token.write_text("1.jpg#0\tA dog runs.\nthis line is broken\n1.jpg#1\t  \n")
    corpus = read_flickr_token(token)
    assert corpus.captions == ["A dog runs."]
    assert {(s.kind, s.ref) for s in corpus.skips} == {("line", "r.token:2"), ("caption", "r.token:3")}

    results = tmp_path / "results.csv"
    results.write_text("image_name| comment_number| comment\n1.jpg| 0| A dog.\n2.jpg| 4 A dog runs .\n")
    corpus = read_flickr_csv(results)
    assert corpus.captions == ["A dog."]
    assert [s.ref for s in corpus.skips] == ["results.csv:3"]


def test_flickr_token_lines_end_at_newlines_only(tmp_path: Path):
    """A caption holding a Unicode line separator (U+2028) stays one caption; CRLF endings are read as lines."""
    token = tmp_path / "r.token"
    token.write_bytes("1.jpg#0\tA dog\u2028runs.\r\n1.jpg#1\tA cat.\r\n".encode())
    corpus = read_flickr_token(token)
    assert corpus.captions == ["A dog\u2028runs.", "A cat."] and not corpus.skips


def test_flickr_errors(tmp_path: Path):
    token = tmp_path / "r.token"
    token.write_text("1.jpg#0\tA.\n1.jpg#0\tB.\n")
    with pytest.raises(UserError, match=r"duplicate caption 1\.jpg#0"):
        read_flickr_token(token)
    token.write_text("cat.jpg#0\tA.\n")
    with pytest.raises(UserError, match="not a numeric Flickr id"):
        read_flickr_token(token)
    token.write_text("\n")
    with pytest.raises(UserError, match="no captions found"):
        read_flickr_token(token)
    results = tmp_path / "results.csv"
    results.write_text("name,caption\n")
    with pytest.raises(UserError, match="expected the header"):
        read_flickr_csv(results)


def test_missing_image_files_are_reported_with_their_captions(tmp_path: Path):
    files = _flickr_files(tmp_path)
    images = tmp_path / "images"
    images.mkdir()
    (images / "10002456.jpg").write_bytes(b"")
    corpus = read_dataset(DataConfig(format="flickr30k-token", captions=files["token"], images=images))
    assert corpus.image_ids == [10002456]
    assert len(corpus.captions) == 2
    reasons = [s.reason for s in corpus.skips]
    assert "image file not found" in reasons and "their image was skipped" in reasons


def test_missing_inputs_are_user_errors(tmp_path: Path):
    with pytest.raises(UserError, match="caption file not found"):
        read_dataset(DataConfig(format="coco", captions=tmp_path / "none.json", images=tmp_path))
    files = _flickr_files(tmp_path)
    with pytest.raises(UserError, match="image folder not found"):
        read_dataset(DataConfig(format="flickr30k-csv", captions=files["csv"], images=tmp_path / "nope"))


# --- input edge cases (issue 18) ------------------------------------------------------------------------------------


def test_coco_null_non_string_and_blank_captions_are_counted_skips_by_reason(tmp_path: Path):
    path = _coco(
        tmp_path,
        [{"id": 1, "file_name": "a.jpg"}],
        [
            {"id": 10, "image_id": 1, "caption": "A cat on a mat."},
            {"id": 11, "image_id": 1, "caption": None},
            {"id": 12, "image_id": 1, "caption": 42},
            {"id": 13, "image_id": 1, "caption": ["a", "list"]},
            {"id": 14, "image_id": 1, "caption": " \t\n"},
        ],
    )
    corpus = read_coco(path)
    assert corpus.captions == ["A cat on a mat."]
    assert "None" not in corpus.captions and "42" not in corpus.captions
    assert {(s.ref, s.reason) for s in corpus.skips} == {
        ("11", "caption is null"),
        ("12", "caption is not a string"),
        ("13", "caption is not a string"),
        ("14", "empty caption"),
    }
    assert corpus.skip_counts() == {
        "caption: caption is null": 1,
        "caption: caption is not a string": 2,
        "caption: empty caption": 1,
    }


@pytest.mark.parametrize(
    ("key", "index", "missing"),
    [("images", 1, "file_name"), ("images", 0, "id"), ("annotations", 1, "image_id"), ("annotations", 0, "caption")],
)
def test_coco_entry_without_a_required_key_is_a_one_line_error(tmp_path: Path, key: str, index: int, missing: str):
    data = {
        "images": [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}],
        "annotations": [{"id": 10, "image_id": 1, "caption": "x"}, {"id": 11, "image_id": 2, "caption": "y"}],
    }
    del data[key][index][missing]
    path = _coco(tmp_path, data["images"], data["annotations"])
    with pytest.raises(UserError) as info:
        read_coco(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message and f"{key}[{index}]" in message and f"'{missing}'" in message


def test_coco_annotation_id_missing_and_non_integer_ids_are_errors(tmp_path: Path):
    path = _coco(tmp_path, [{"id": 1, "file_name": "a.jpg"}], [{"image_id": 1, "caption": "x"}])
    with pytest.raises(UserError, match=r"annotations\[0\] has no 'id' key"):
        read_coco(path)
    path = _coco(tmp_path, [{"id": "1", "file_name": "a.jpg"}], [{"id": 1, "image_id": 1, "caption": "x"}])
    with pytest.raises(UserError, match=r"images\[0\]\.id is '1', not an integer"):
        read_coco(path)
    path = _coco(tmp_path, ["a.jpg"], [])
    with pytest.raises(UserError, match=r"images\[0\] is not an object"):
        read_coco(path)


def _images(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "images"
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def test_coco_file_names_escaping_the_image_folder_are_counted_skips(tmp_path: Path):
    images = _images(tmp_path, "a.jpg")
    (tmp_path / "outside.jpg").write_bytes(b"")  # exists, but must not be read through `..`
    path = _coco(
        tmp_path,
        [
            {"id": 1, "file_name": "a.jpg"},
            {"id": 2, "file_name": "../outside.jpg"},
            {"id": 3, "file_name": str(tmp_path / "outside.jpg")},
            {"id": 4, "file_name": "sub/../../outside.jpg"},
        ],
        [{"id": 10 + i, "image_id": i, "caption": f"Caption {i}."} for i in range(1, 5)],
    )
    for check_files in (True, False):
        corpus = read_dataset(DataConfig(format="coco", captions=path, images=images), check_files=check_files)
        assert corpus.image_ids == [1] and corpus.captions == ["Caption 1."]
        counts = corpus.skip_counts()
        assert counts["image: file name outside the image folder"] == 3
        assert counts["caption: their image was skipped"] == 3


def test_flickr_blank_captions_and_escaping_names_are_counted_skips(tmp_path: Path):
    images = _images(tmp_path, "1.jpg", "2.jpg")
    token = tmp_path / "r.token"
    token.write_text("1.jpg#0\tA dog runs.\n1.jpg#1\t   \n../2.jpg#0\tOutside.\n/abs/3.jpg#0\tAbsolute.\n")
    corpus = read_dataset(DataConfig(format="flickr30k-token", captions=token, images=images))
    assert corpus.image_ids == [1] and corpus.captions == ["A dog runs."]
    counts = corpus.skip_counts()
    assert counts["caption: empty caption"] == 1
    assert counts["image: file name outside the image folder"] == 2

    results = tmp_path / "results.csv"
    results.write_text("image_name| comment_number| comment\n1.jpg| 0| A dog.\n1.jpg| 1|  \n../2.jpg| 0| Out.\n")
    corpus = read_dataset(DataConfig(format="flickr30k-csv", captions=results, images=images))
    assert corpus.captions == ["A dog."]
    assert corpus.skip_counts()["caption: empty caption"] == 1
    assert corpus.skip_counts()["image: file name outside the image folder"] == 1


def test_karpathy_null_non_string_and_blank_captions_are_counted_skips(tmp_path: Path):
    path = tmp_path / "dataset_flickr30k.json"
    sentences = [{"raw": "A dog."}, {"raw": None}, {"raw": 7}, {"raw": "  "}]
    path.write_text(json.dumps({"images": [{"filename": "1.jpg", "split": "train", "sentences": sentences}]}))
    corpus = read_flickr_karpathy(path)
    assert corpus.captions == ["A dog."]
    assert corpus.skip_counts() == {
        "caption: caption is null": 1,
        "caption: caption is not a string": 1,
        "caption: empty caption": 1,
    }


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ({"split": "train", "sentences": []}, r"images\[0\] has no 'filename' key"),
        ({"filename": "1.jpg", "split": "train"}, r"images\[0\] has no 'sentences' key"),
        ({"filename": "1.jpg", "sentences": [{"text": "x"}]}, r"images\[0\]\.sentences\[0\] has no 'raw' key"),
    ],
)
def test_karpathy_entry_without_a_required_key_is_a_one_line_error(tmp_path: Path, image: dict, expected: str):
    path = tmp_path / "dataset_flickr30k.json"
    path.write_text(json.dumps({"images": [image]}))
    with pytest.raises(UserError, match=expected) as info:
        read_flickr_karpathy(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_describe_skips_is_one_line_with_every_class():
    from csts_pipeline.stages.embed.readers.corpus import describe_skips

    line = describe_skips(
        {"caption: caption is null": 2, "image: file name outside the image folder": 1, "line: malformed line": 3}
    )
    assert "\n" not in line
    assert line == (
        "skipped: 3 lines (malformed line), 2 captions (caption is null), 1 image (file name outside the image folder)"
    )
    assert describe_skips({}) == "skipped: nothing"
