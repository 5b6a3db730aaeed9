"""One build step; everything else about the build is in pyproject.toml.

The manifests users see and edit live in the top-level manifests/ folder; the wheel carries a copy of them as
csts_pipeline/pipeline/manifests/ so that an installed csts-pipeline finds `--dataset NAME` from any folder
(docs/manifests.md)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

MANIFESTS = Path(__file__).resolve().parent / "manifests"


class BuildPyWithManifests(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "csts_pipeline" / "pipeline" / "manifests"
        self.mkpath(str(target))
        for manifest in sorted(MANIFESTS.glob("*.yaml")):
            self.copy_file(str(manifest), str(target / manifest.name))


setup(cmdclass={"build_py": BuildPyWithManifests})
