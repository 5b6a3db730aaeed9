"""The package layout and one build step; everything else about the build is in pyproject.toml.

The repository keeps the folders the project was specified with (pipeline/, stages/, report/ at the top), but the
wheel installs one import name: csts_pipeline, with the frame as csts_pipeline.frame, the stages as
csts_pipeline.stages and the report page as csts_pipeline.report (docs/architecture.md). The manifests users see
and edit live in the top-level manifests/ folder; the wheel carries a copy of them as csts_pipeline/frame/manifests/
so that an installed csts-pipeline finds `--dataset NAME` from any folder (docs/manifests.md)."""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
MANIFESTS = HERE / "manifests"
FOLDERS = {
    "csts_pipeline": "csts_pipeline",
    "csts_pipeline.frame": "pipeline",
    "csts_pipeline.stages": "stages",
    "csts_pipeline.report": "report",
}


def packages() -> list[str]:
    """Every package under each mapped folder, named under its installed parent."""
    found = []
    for name, folder in FOLDERS.items():
        found += [name, *(f"{name}.{sub}" for sub in find_packages(str(HERE / folder)))]
    return found


class BuildPyWithManifests(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "csts_pipeline" / "frame" / "manifests"
        self.mkpath(str(target))
        for manifest in sorted(MANIFESTS.glob("*.yaml")):
            self.copy_file(str(manifest), str(target / manifest.name))


setup(packages=packages(), package_dir=FOLDERS, cmdclass={"build_py": BuildPyWithManifests})
