"""The data stages' commands, made from the stage registry (stages.REGISTRY): `run`, `status`, and one command per
stage taking one shared block of common options (COMMON) plus its own (OWN). Each command loads the manifest,
applies the options as overrides and runs the stage through the manifest's executor; `report` is the one way a
stage run is printed, "up to date" included."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, get_args

import typer

from csts_pipeline.cli.options import DatasetOpt, DeviceOpt, ForceOpt, ManifestOpt, say_up_to_date, user_errors
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import Manifest, open_manifest
from csts_pipeline.pipeline.records import read_record
from csts_pipeline.pipeline.stage import StageSpec
from csts_pipeline.pipeline.storage import remote_of, remote_record
from csts_pipeline.pipeline.urls import is_url, location
from csts_pipeline.stages import REGISTRY
from csts_pipeline.stages import spec as stage_spec

OutOpt = Annotated[
    str | None,
    typer.Option("--out", help="Work folder or URL (s3://, gs://, ...) for all stage outputs (overrides work_dir)."),
]
ExecutorOpt = Annotated[
    str | None,
    typer.Option(
        help="local (units in this process) or ray (units in Ray actors; docs/ray.md); overrides run.executor."
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        help="With --executor ray: auto joins this machine's Ray cluster, or an address; default: a new local Ray."
    ),
]
Option = tuple[Any, str | None]  # (annotated type, the manifest key it overrides, or None)
# the options every stage command takes: name -> (type, manifest key); the stage's own go between `manifest`
# and `device`, in help order
COMMON: dict[str, Option] = {
    "dataset": (DatasetOpt, None),
    "manifest": (ManifestOpt, None),
    "device": (DeviceOpt, "run.device"),
    "out": (OutOpt, "work_dir"),
    "force": (ForceOpt, None),
    "executor": (ExecutorOpt, "run.executor"),
    "ray_address": (RayAddressOpt, "run.ray_address"),
}


def manifest_for(given: dict[str, Any], overrides: dict[str, Any]) -> Manifest:
    """The manifest with the command's overrides, its URL inputs copied into the cache (pipeline.storage)."""
    overrides["work_dir"] = location(overrides.get("work_dir"))
    loaded = open_manifest(given["dataset"], given["manifest"], overrides)
    loaded.fetch_inputs()
    if loaded.demo_encoders:
        typer.secho(
            f"note: {loaded.name} uses demo encoders (random-init CLIP, all-MiniLM-L6-v2): it shows the "
            "mechanics, not the neighbours or similarities of real models.",
            fg=typer.colors.YELLOW,
        )
    return loaded


def executor_of(manifest: Manifest) -> Any:
    """The executor the manifest's `run.executor` names; Ray is imported only when asked for."""
    if manifest.run.executor == "ray":
        from csts_pipeline.pipeline.ray_executor import RayExecutor

        return RayExecutor(address=manifest.run.ray_address)
    from csts_pipeline.pipeline.executor import LocalExecutor

    return LocalExecutor()


def run_stage(loaded: Manifest, spec: StageSpec, force: bool, executor: Any = None) -> None:
    """One data stage through the manifest's executor (run.executor), then its report."""
    executor = executor or executor_of(loaded)
    print_summary(executor.run(spec.load()(loaded), force=force), loaded)


def print_summary(record: dict, manifest: Manifest | None = None) -> None:
    """One summary per stage run: what it did (or that it was up to date), then the stage's own lines."""
    if say_up_to_date(record):
        folder = record["folder"]
        record = (remote_record(*folder.rsplit("/", 1)) if is_url(folder) else read_record(Path(folder))) or {}
    else:
        counts = ", ".join(f"{k}={v}" for k, v in record["counts"].items())
        reused = f", {record['units_reused']} of {record['units']} units resumed" if record.get("units_reused") else ""
        typer.echo(f"{record['stage']}: done in {record['timings']['seconds']:.1f}s ({counts}{reused})")
    if manifest is not None and record.get("stage") in {entry.name for entry in REGISTRY}:
        for line in stage_spec(record["stage"]).summary_lines(record, manifest):
            typer.echo(line)


def stage_command(
    spec: StageSpec, own: dict[str, Option], runner: Callable[[StageSpec, dict, dict], None] | None = None
) -> Callable[..., None]:
    """The command of `spec`: the common options and its own; each given option becomes its manifest override.
    `runner(spec, given, overrides)` replaces the plain run where a stage has a mode of its own."""
    options = {**dict(list(COMMON.items())[:2]), **own, **dict(list(COMMON.items())[2:])}
    options |= {name: own[name] for name in own}  # a stage may word a common option its own way

    def command(**given: Any) -> None:
        overrides = {key: given[name] for name, (_, key) in options.items() if key is not None}
        if runner is not None:
            runner(spec, given, overrides)
            return
        run_stage(manifest_for(given, overrides), spec, given["force"])

    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=_default(kind), annotation=kind)
            for name, (kind, _) in options.items()
        ]
    )
    command.__doc__ = spec.help
    command.__name__ = f"{spec.name}_command"
    return user_errors(command)


def _default(kind: Any) -> bool | None:
    """A flag is off unless given; any other option is None (the manifest's value stands)."""
    return False if get_args(kind)[0] is bool else None


def run(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    device: DeviceOpt = None,
    out: OutOpt = None,
    force: ForceOpt = False,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Run every data stage in order (embed, mine, filter); finished stages with unchanged inputs are skipped."""
    given = {"dataset": dataset, "manifest": manifest}
    overrides = {"run.device": device, "work_dir": out, "run.executor": executor, "run.ray_address": ray_address}
    loaded = manifest_for(given, overrides)
    runner = executor_of(loaded)
    for spec in REGISTRY:
        run_stage(loaded, spec, force, runner)


def status(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    out: OutOpt = None,
    verify: Annotated[
        bool, typer.Option("--verify", metavar="", help="Read every listed file and check its content checksum.")
    ] = False,
) -> None:
    """Each data stage's state (done, stale, incomplete, partial or missing), counts and time, from its record;
    with --verify, `corrupt` for a stage whose files differ from their checksums (exit code 1)."""
    from csts_pipeline.pipeline.executor import state

    loaded = open_manifest(dataset, manifest, {"work_dir": location(out)})
    loaded.fetch_inputs()
    corrupt = False
    for spec in REGISTRY:
        name = spec.name
        try:
            found, record, detail = state(spec.load()(loaded))
        except UserError as exc:  # a corrupt record
            typer.echo(f"{name:<8} corrupt   {exc}")
            continue
        if record is None:
            typer.echo(f"{name:<8} {found:<10}{detail}".rstrip())
            continue
        if verify and found != "incomplete" and remote_of(loaded.work_dir) is None:
            found, detail = _verified(loaded.work_dir / name, record, found, detail)
            corrupt = corrupt or found == "corrupt"
        counts = ", ".join(f"{k}={v}" for k, v in record.get("counts", {}).items())
        line = f"{name:<8} {found:<10}{record.get('timings', {}).get('seconds', 0):>8.1f}s  {counts}"
        shown = found in ("incomplete", "stale", "corrupt") or detail.startswith("not verifiable")
        typer.echo(line + (f"\n         {detail}" if shown and detail else ""))
    if corrupt:
        raise typer.Exit(1)


def _verified(folder: Path, record: dict[str, Any], found: str, detail: str) -> tuple[str, str]:
    """The state after reading every listed file against its checksum, and the record against its own checksum and
    the files' row counts."""
    from csts_pipeline.pipeline.checksums import verify_outputs
    from csts_pipeline.pipeline.records import record_problems

    problems, unhashed = verify_outputs(folder, record)
    problems += record_problems(folder, record)
    if problems:
        return "corrupt", "; ".join(problems)
    if unhashed:
        return found, f"not verifiable: {unhashed} files have no checksum (an older record); --force rebuilds"
    return found, detail


def register(app: typer.Typer, own: dict[str, dict[str, Option]], runners: dict[str, Callable] | None = None) -> None:
    """`run`, `status` and one command per registered stage, in the registry's order."""
    app.command("run")(user_errors(run))
    app.command("status")(user_errors(status))
    for spec in REGISTRY:
        app.command(spec.name)(stage_command(spec, own.get(spec.name, {}), (runners or {}).get(spec.name)))
