"""What every dataset reader returns: a `Corpus` of images and captions with stable integer ids, and the `Skip`s
that say what was left out and why (readers/datasets.py, readers/archives.py), with the limits the ids must keep."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

import pyarrow as pa

from csts_pipeline.stages.embed.readers.archives import Member

MAX_CAPTION_ID = 2**32 - 1  # pair ids pack two caption ids into one int64 (docs/schemas.md)
MAX_IMAGE_ID = 2**63 - 1  # image ids are int64 columns
MAX_NAME_BYTES = 255  # a longer path component cannot name a file (ENAMETOOLONG)


@dataclass(frozen=True)
class Skip:
    kind: str  # "image", "caption" or "line"
    ref: str  # what was skipped: an id, a file name or "file:line"
    reason: str
    count: int = 1  # how many rows this one entry stands for ("N captions": their image was skipped)


@dataclass
class Corpus:
    image_ids: list[int] = field(default_factory=list)
    file_names: list[str] = field(default_factory=list)
    image_root: Path = Path()
    caption_ids: list[int] = field(default_factory=list)
    caption_image_ids: list[int] = field(default_factory=list)
    captions: list[str] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    members: list[Member] | None = None  # archive formats: where each image's bytes are (stages.embed.readers.archives)

    def images_table(self) -> pa.Table:
        return pa.table(
            {
                "image_id": pa.array(self.image_ids, pa.int64()),
                "file_name": pa.array(self.file_names, pa.string()),
            }
        )

    def captions_table(self) -> pa.Table:
        return pa.table(
            {
                "caption_id": pa.array(self.caption_ids, pa.int64()),
                "image_id": pa.array(self.caption_image_ids, pa.int64()),
                "caption": pa.array(self.captions, pa.string()),
            }
        )

    def skip_counts(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for skip in self.skips:
            counts[f"{skip.kind}: {skip.reason}"] += skip.count
        return dict(counts)


def escapes_folder(name: str) -> bool:
    """A file name that would leave the image folder: absolute (or drive-anchored), or with a `..` part."""
    pure = PurePosixPath(name.replace("\\", "/"))
    return pure.is_absolute() or PureWindowsPath(name).anchor != "" or ".." in pure.parts


def describe_skips(counts: dict[str, int]) -> str:
    """One line for a command summary: `skipped: 2 captions (caption is null), 1 image (image file not found)`;
    `counts` as `Corpus.skip_counts()` gives them ("kind: reason" -> n)."""
    if not counts:
        return "skipped: nothing"
    parts = []
    for key, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        kind, _, reason = key.partition(": ")
        parts.append(f"{n} {kind}{'' if n == 1 else 's'} ({reason})" if reason else f"{n} {kind}")
    return "skipped: " + ", ".join(parts)
