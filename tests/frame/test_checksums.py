"""Content checksums (pipeline.checksums): computed while writing, listed in the record, checked by readers and by
`status --verify`; a single flipped bit in any listed shard is reported as corrupt and refused downstream."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.checksums import HASH_KEY, file_digest, sidecar_of, written_digest
from csts_pipeline.pipeline.shards import write_atomic
from tests.conftest import write_manifest

runner = CliRunner()
FLIPS = int(os.environ.get("CSTS_TEST_FLIPS", "20"))  # 100 once by hand (docs/performance.md)


def test_the_digest_is_the_one_of_the_bytes_written(tmp_path: Path):
    path = tmp_path / ".stage.next" / "a.bin"  # files in a staging folder get their digest beside them
    write_atomic(path, lambda handle: (handle.write(b"abc" * 1000), handle.write(memoryview(b"xyz"))))
    digest, size, mtime = sidecar_of(path).read_text().split()
    assert digest == file_digest(path) and int(size) == path.stat().st_size == 3003
    assert int(mtime) == path.stat().st_mtime_ns
    path.write_bytes(b"x" * 3003)  # the same size, changed since: the sidecar is not taken for it
    assert written_digest(path) == file_digest(path) != digest


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory, sample_dataset: tuple[Path, Path]) -> Path:
    """An embed and mine run of the generated sample; its files are flipped and restored by each test."""
    manifest = write_manifest(tmp_path_factory.mktemp("run"), *sample_dataset, embed={"images_per_shard": 100})
    for stage in ("embed", "mine"):
        result = runner.invoke(app, [stage, "--manifest", str(manifest)])
        assert result.exit_code == 0, result.output
    return manifest


def test_every_listed_file_has_its_written_digest(embedded: Path):
    record = json.loads((embedded.parent / "work" / "embed" / "_stage.json").read_text())
    folder = embedded.parent / "work" / "embed"
    assert record["output_files"] and all(
        entry[HASH_KEY] == file_digest(folder / name) for name, entry in record["output_files"].items()
    )


@pytest.mark.slow
def test_single_bit_flips_are_reported_corrupt_and_refused_downstream(embedded: Path):
    work = embedded.parent / "work"
    listed = [
        work / stage / name
        for stage in ("embed", "mine")
        for name in json.loads((work / stage / "_stage.json").read_text())["output_files"]
        if name.endswith(".parquet")
    ]
    rng = random.Random(25)
    for _ in range(FLIPS):
        victim = rng.choice(listed)
        original = victim.read_bytes()
        bit = rng.randrange(len(original) * 8)
        flipped = bytearray(original)
        flipped[bit // 8] ^= 1 << (bit % 8)
        victim.write_bytes(bytes(flipped))
        try:
            status = runner.invoke(app, ["status", "--verify", "--manifest", str(embedded)])
            stage = victim.relative_to(work).parts[0]
            assert status.exit_code == 1, status.output
            line = next(line for line in status.output.splitlines() if line.startswith(stage))
            assert line.split()[1] == "corrupt", status.output
            assert f"{victim}: corrupt (content checksum differs from the record's)" in status.output
            if stage == "embed":
                refused = runner.invoke(app, ["mine", "--manifest", str(embedded), "--force"])
                assert refused.exit_code == 2, refused.output
                assert f"error: {victim}: corrupt" in refused.output and "csts-pipeline embed --force" in refused.output
        finally:
            victim.write_bytes(original)
    clean = runner.invoke(app, ["status", "--verify", "--manifest", str(embedded)])
    assert clean.exit_code == 0 and "corrupt" not in clean.output, clean.output


def test_a_file_is_read_once_per_process_until_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import csts_pipeline.pipeline.checksums as checksums

    path = tmp_path / "a.bin"
    path.write_bytes(b"abc" * 1000)
    entry = {"bytes": 3000, HASH_KEY: file_digest(path)}
    reads = []
    monkeypatch.setattr(checksums, "file_digest", lambda p: reads.append(p) or file_digest(p))
    assert checksums.verify_file(path, entry) is None and checksums.verify_file(path, entry) is None
    assert len(reads) == 1  # the second reader trusts the first one's read: same size, same mtime
    path.write_bytes(b"abd" * 1000)  # changed since (a new mtime): read again, and found corrupt
    assert checksums.verify_file(path, entry) == f"{path}: corrupt (content checksum differs from the record's)"
    assert len(reads) == 2


@pytest.mark.parametrize("edit", ["rows", "counts", "rows of an unsealed record"])
def test_a_record_edited_to_list_rows_its_shard_lacks_fails_verify(embedded: Path, edit: str):
    """Bytes and hashes are not all: the record covers itself by its own checksum, and --verify recounts every
    Parquet file's rows from its footer, so a record that claims 5,000 rows more is corrupt (exit code 1)."""
    folder = embedded.parent / "work" / "mine"
    path = folder / "_stage.json"
    original = path.read_bytes()
    record = json.loads(original)
    shard = next(name for name in record["output_files"] if name.startswith("candidates/"))
    rows = record["output_files"][shard]["rows"]
    if edit == "counts":
        record["counts"]["candidate_pairs"] += 5000
    else:
        record["output_files"][shard]["rows"] += 5000
    if edit == "rows of an unsealed record":
        del record["record_xxh3"]
    path.write_text(json.dumps(record))
    try:
        status = runner.invoke(app, ["status", "--verify", "--manifest", str(embedded)])
        lines = status.output.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("mine"))
        assert status.exit_code == 1 and lines[at].split()[1] == "corrupt", status.output
        sealed = f"{path}: edited since it was written (its own checksum differs); rerun the stage with --force"
        recount = f"{folder / shard}: {rows} rows, _stage.json says {rows + 5000}"
        expected = {"rows": [sealed, recount], "counts": [sealed], "rows of an unsealed record": [recount]}[edit]
        assert lines[at + 1].strip() == "; ".join(expected)
    finally:
        path.write_bytes(original)
    clean = runner.invoke(app, ["status", "--verify", "--manifest", str(embedded)])
    assert clean.exit_code == 0 and "corrupt" not in clean.output, clean.output
