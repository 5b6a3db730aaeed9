"""A non-editable install runs from any folder: the wheel carries the manifests, the tiny CLIP config and the HIT
pages, and a bundled manifest writes its work and sample data under the current folder, never into the installed
package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_the_built_wheel_runs_the_sample_from_any_folder(tmp_path: Path):
    wheels, target, here = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
    here.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)], check=True)
    (wheel,) = wheels.glob("csts_pipeline-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    # every package folder pip put there (bin/ holds the console script, not a package)
    ours = sorted(p.name for p in target.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert ours == ["csts_pipeline"], ours  # one installed import name: no top-level pipeline, stages or report
    assert sorted(p.name for p in (target / "csts_pipeline" / "pipeline" / "manifests").glob("*.yaml")) == [
        "coco.yaml",
        "flickr30k.yaml",
        "sample.yaml",
    ]
    assert (
        target / "csts_pipeline" / "report" / "templates" / "index.html"
    ).is_file()  # the report page's template (package data)

    env = {**os.environ, "PYTHONPATH": str(target), "HF_HUB_OFFLINE": "1"}

    def cli(*args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "csts_pipeline", *args], cwd=here, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout

    out = cli("embed", "--dataset", "sample", "--device", "cpu")
    assert "embed: done" in out and "embed: skipped: nothing" in out
    assert (here / "runs" / "sample" / "embed" / "_stage.json").is_file()
    assert (here / "data" / "sample" / "captions.json").is_file()
    assert not (target / "runs").exists() and not (target / "data").exists()
    status = cli("status", "--dataset", "sample")
    assert status.startswith("embed    done"), status
    # the HIT pages and the default gold set are package data: the qualification test exports from the wheel
    out = cli("annotate", "export", "--stage", "qualification", "--out", "annotate")
    assert "from the default gold set" in out
    assert "<script>" in (here / "annotate" / "qualification_tasks" / "template.html").read_text()
