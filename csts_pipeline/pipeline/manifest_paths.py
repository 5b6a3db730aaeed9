"""Where manifests are and what their paths mean: finding a manifest (`--dataset NAME` or `--manifest PATH`),
the bundled ones, `package:` files, relative paths, and URL locations put in the place of their local copies
(pipeline.storage). pipeline.manifest reads and validates what these name."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline import storage
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.urls import is_url

# The manifests users see and edit live in the repository's top-level manifests/; setup.py copies them into the
# wheel as csts_pipeline/pipeline/manifests/, so an installed copy finds them too (docs/manifests.md).
_PACKAGE_MANIFESTS = Path(__file__).resolve().parent / "manifests"
_SOURCE_MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
# `package:csts_pipeline.stages.embed/resources/x.json`: a file shipped inside an installed package
PACKAGE_PREFIX = "package:"


def bundled_manifest_dir() -> Path:
    """The manifests that come with the code: the installed package's copy, else the source checkout's."""
    return _PACKAGE_MANIFESTS if _PACKAGE_MANIFESTS.is_dir() else _SOURCE_MANIFESTS


def find_manifest(dataset: str | None, path: Path | None) -> tuple[Path, bool]:
    """The manifest file, and whether it is a bundled one. `--manifest PATH` takes any file; `--dataset NAME`
    means ./manifests/NAME.yaml when the current folder has it, else the bundled NAME.yaml."""
    if path is not None:
        return path, False
    if dataset is None:
        raise UserError("give --dataset NAME or --manifest PATH")
    local = Path.cwd() / "manifests" / f"{dataset}.yaml"
    if local.is_file():
        return local, False
    bundled = bundled_manifest_dir() / f"{dataset}.yaml"
    if bundled.is_file():
        return bundled, True
    folders = (Path.cwd() / "manifests", bundled_manifest_dir())
    known = ", ".join(sorted({p.stem for folder in folders for p in folder.glob("*.yaml")}))
    raise UserError(f"unknown dataset {dataset!r}: no manifests/{dataset}.yaml, here or bundled; known: {known}")


def manifest_path(dataset: str | None, path: Path | None) -> Path:
    """`--dataset coco` means manifests/coco.yaml (here, else bundled); `--manifest PATH` takes any file."""
    return find_manifest(dataset, path)[0]


LOCATIONS = (("work_dir",), ("data", "captions"), ("data", "images"))


def localise_urls(raw: dict[str, Any], base_url: str | None) -> dict[str, str]:
    """Put local paths in place of the URLs among work_dir, data.captions and data.images (a remote manifest's
    relative paths are URLs too): work_dir becomes its working cache, an input the place of its cache copy.
    Returns {data field: URL} of the inputs, which Manifest.fetch_inputs copies."""
    inputs: dict[str, str] = {}
    for *parents, leaf in LOCATIONS:
        section: Any = raw
        for part in parents:
            section = section.get(part) if isinstance(section, dict) else None
        value = section.get(leaf) if isinstance(section, dict) else None
        if not isinstance(value, str):
            continue
        if base_url is not None and not is_url(value) and not value.startswith(PACKAGE_PREFIX):
            value = value if Path(value).is_absolute() else f"{base_url}/{value}"
        if not is_url(value):
            continue
        if leaf == "work_dir":
            section[leaf] = str(storage.mirror_folder(value))
        else:
            inputs[leaf] = value
            section[leaf] = str(storage.input_copy(value, is_file=leaf == "captions"))
    return inputs


def resolve_path(base: Path, value: Path) -> Path:
    if str(value).startswith(PACKAGE_PREFIX):
        return package_file(str(value))
    value = value.expanduser()
    return value if value.is_absolute() else (base / value)


def package_file(spec: str) -> Path:
    """`package:csts_pipeline.stages.embed/resources/open_clip/x.json` -> that file inside the installed package
    (a regular folder, not a zip: the package is installed as files)."""
    package, _, relative = spec.removeprefix(PACKAGE_PREFIX).partition("/")
    if not package or not relative:
        raise UserError(f"{spec!r}: expected {PACKAGE_PREFIX}PACKAGE/PATH, e.g. {PACKAGE_PREFIX}stages.embed/x.json")
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError:
        raise UserError(f"{spec!r}: no Python package {package!r}") from None
    return Path(str(root.joinpath(*relative.split("/"))))
