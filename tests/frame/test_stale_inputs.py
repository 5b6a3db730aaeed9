"""A stage or annotate step whose upstream output was computed from an input that has changed since is refused,
in one line naming the output to rebuild and its command, before anything is planned or written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.executor import LocalExecutor
from csts_pipeline.pipeline.records import read_record
from csts_pipeline.pipeline.stage import Stage, StagePlan, StageResult, Unit
from csts_pipeline.stages.annotate.steps import csts_split
from csts_pipeline.stages.annotate.steps.conditions import import_conditions
from csts_pipeline.stages.annotate.steps.options import RatingsExportOptions
from csts_pipeline.stages.annotate.steps.ratings import export_ratings, import_ratings
from tests.annotate.test_annotate import kept, kept_dir, rated, read_tasks, simulated_conditions, write_results  # noqa: F401
from tests.cli.test_bad_inputs import cli_error, coco_manifest, small  # noqa: F401


class _Chain(Stage):
    """One unit writing one file that names the stage and its parameter."""

    def __init__(self, work_dir: Path, name: str, upstream: str | None, value: int = 0):
        super().__init__(work_dir)
        self.name, self.upstream, self.value = name, upstream, value

    def plan(self) -> StagePlan:
        inputs = {}
        if self.upstream is not None:
            inputs[self.upstream] = (read_record(self.work_dir / self.upstream) or {}).get("fingerprint", "")
        return StagePlan({"value": self.value}, inputs, [Unit("out.txt")])

    def process(self, unit: Unit, staging: Path) -> dict[str, Any]:
        (staging / unit.key).write_text(f"{self.name} {self.value}\n")
        return {"files": 1}

    def finish(self, stats: list[dict[str, Any]], staging: Path) -> StageResult:
        return StageResult({"files": len(stats)})


def test_a_stage_after_its_upstream_went_stale_is_refused_naming_it(tmp_path: Path) -> None:
    executor = LocalExecutor(progress=False)
    for name, upstream in (("embed", None), ("mine", "embed"), ("filter", "mine")):
        executor.run(_Chain(tmp_path, name, upstream))
    executor.run(_Chain(tmp_path, "embed", None, value=1))  # embed rerun with other parameters
    before = read_record(tmp_path / "filter")
    with pytest.raises(UserError) as refused:
        executor.run(_Chain(tmp_path, "filter", "mine"))
    message = str(refused.value)
    assert "\n" not in message and f"{tmp_path / 'mine'}: stale" in message
    assert "rerun `csts-pipeline mine` first" in message
    assert read_record(tmp_path / "filter") == before
    executor.run(_Chain(tmp_path, "mine", "embed"))  # the rebuild it names
    assert executor.run(_Chain(tmp_path, "filter", "mine"))["status"] == "done"


def test_an_annotate_step_whose_input_changed_is_refused(tmp_path: Path, rated: Path) -> None:  # noqa: F811
    tasks = read_tasks(rated / "conditions_tasks")
    answers = write_results(tmp_path / "c2.csv", simulated_conditions(tasks, seed=7))
    import_conditions(rated, [answers])  # other condition answers: the rating tasks are stale
    with pytest.raises(
        UserError, match=r"ratings_tasks: stale: .*rerun `csts-pipeline annotate export --stage ratings`"
    ):
        import_ratings(rated, [tmp_path / "r.csv"])
    export_ratings(
        rated, RatingsExportOptions(seed=1), force=True
    )  # new rating tasks: the imported ratings are of the old ones
    with pytest.raises(
        UserError, match=r"ratings: stale: .*rerun `csts-pipeline annotate import --stage ratings --results FILE`"
    ):
        csts_split.split(rated)


def test_the_commands_are_the_registry() -> None:
    """Every registered stage is a command with the common options, in the registry's order, and its class has the
    registry's name and upstream; `run` and `status` go through the same list."""
    import typer.main

    from csts_pipeline.cli import app
    from csts_pipeline.cli.stages import COMMON
    from csts_pipeline.stages import REGISTRY

    commands = {info.name: info for info in app.registered_commands}
    names = [info.name for info in app.registered_commands]
    assert [name for name in names if name in {spec.name for spec in REGISTRY}] == [spec.name for spec in REGISTRY]
    for spec in REGISTRY:
        options = {
            param.name
            for param in typer.main.get_command_from_info(
                commands[spec.name], pretty_exceptions_short=True, rich_markup_mode=None
            ).params
        }
        assert set(COMMON) <= options, spec.name
        stage_class = spec.load()
        assert (stage_class.name, stage_class.upstream) == (spec.name, spec.upstream)


def test_an_upstream_that_status_calls_stale_is_refused_by_the_same_reason(
    tmp_path: Path,
    small: tuple[dict, Path],  # noqa: F811
) -> None:
    """After a manifest change to an embed parameter, `status` calls embed stale (and what is made from it), and
    `mine --force` and `filter` refuse it in the very line `status` shows, before anything is written."""
    import yaml
    from typer.testing import CliRunner

    from csts_pipeline.cli import app

    manifest = coco_manifest(tmp_path, small)
    runner = CliRunner()
    for command in ("embed", "mine"):
        assert runner.invoke(app, [command, "--manifest", str(manifest)]).exit_code == 0
    mine_dir = tmp_path / "work" / "mine"
    before = {path: path.read_bytes() for path in sorted(mine_dir.rglob("*")) if path.is_file()}
    raw = yaml.safe_load(manifest.read_text())
    raw["embed"]["images_per_shard"] = 40
    manifest.write_text(yaml.safe_dump(raw))
    reason = (
        f"{tmp_path / 'work' / 'embed'}: stale: made with other parameters than the manifest's "
        "(embed.images_per_shard 50 -> 40); rerun `csts-pipeline embed` first"
    )
    status = runner.invoke(app, ["status", "--manifest", str(manifest)]).output.splitlines()
    assert status[0].split()[:2] == ["embed", "stale"], status
    assert status[1].strip() == "made with other parameters than the manifest's (embed.images_per_shard 50 -> 40)"
    assert status[2].split()[:2] == ["mine", "stale"] and status[3].strip() == reason, status
    assert cli_error("mine", "--manifest", str(manifest), "--force") == f"error: {reason}"
    assert cli_error("filter", "--manifest", str(manifest)) == f"error: {reason}"
    assert {path: path.read_bytes() for path in sorted(mine_dir.rglob("*")) if path.is_file()} == before
    assert not (tmp_path / "work" / ".mine.next").exists()


def test_annotate_export_refuses_a_filter_output_that_status_calls_stale(
    tmp_path: Path,
    small: tuple[dict, Path],  # noqa: F811
) -> None:
    """The export reads the filter's kept pairs only while `status` calls them done under the manifest."""
    import yaml
    from typer.testing import CliRunner

    from csts_pipeline.cli import app

    manifest = coco_manifest(tmp_path, small)
    raw = yaml.safe_load(manifest.read_text())
    raw["filter"] |= {"min_length": None, "min_ratio": None, "max_iou": None, "min_cosine": None}
    manifest.write_text(yaml.safe_dump(raw))
    runner = CliRunner()
    for command in ("embed", "mine", "filter"):
        assert runner.invoke(app, [command, "--manifest", str(manifest)]).exit_code == 0
    raw["filter"]["max_iou"] = 0.5
    manifest.write_text(yaml.safe_dump(raw))
    filter_dir = tmp_path / "work" / "filter"
    reason = "made with other parameters than the manifest's (filter.max_iou None -> 0.5)"
    status = runner.invoke(app, ["status", "--manifest", str(manifest)]).output.splitlines()
    assert status[2].split()[:2] == ["filter", "stale"] and status[3].strip() == reason, status
    assert cli_error("annotate", "export", "--stage", "conditions", "--manifest", str(manifest)) == (
        f"error: {filter_dir}: stale: {reason}; rerun `csts-pipeline filter` first"
    )
    assert not (tmp_path / "work" / "annotate").exists()
