"""The house move as a re-runnable map: the top-level folders pipeline/, stages/ and report/ become the package's
own folders csts_pipeline/pipeline/, csts_pipeline/stages/ and csts_pipeline/report/, so that every folder's path
is its import name (no package_dir mapping) and the frame's import name follows its folder
(csts_pipeline.frame -> csts_pipeline.pipeline).

Run from the repository root: `python tools/move_map.py`. It is idempotent: a folder already moved is left, and
every text rewrite maps only the old spelling, so running it twice, or on a branch made before the move (to carry
that branch onto the new layout), gives the same tree. It moves with `git mv` where the tree is a git checkout.
The build files it cannot rewrite by pattern (setup.py, .ci/typecheck, the Dockerfile's COPY lines) are written
whole by the move's commit, not here."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = "csts_pipeline"
FOLDERS = ("pipeline", "stages", "report")

# import names: the frame was installed as csts_pipeline.frame
IMPORT_NAMES = [
    (re.compile(r"\bcsts_pipeline\.frame\b"), "csts_pipeline.pipeline"),
    (re.compile(r"\bcsts_pipeline/frame/"), "csts_pipeline/pipeline/"),
    (re.compile(r'"csts_pipeline" / "frame"'), '"csts_pipeline" / "pipeline"'),
]
# folder paths in prose (docs, build files): `pipeline/x.py` -> `csts_pipeline/pipeline/x.py`; a path already under
# another folder (runs/sample/report/) is preceded by a slash or a word and stays
PROSE_PATHS = [(re.compile(r"(?<![\w/.\-])(pipeline|stages|report)/(?=[\w`.*|)\s]|$)"), rf"{PACKAGE}/\1/")]
# the tests' and benches' paths into the source tree
TREE_PATHS = [(re.compile(r'REPO / "(pipeline|stages|report)"'), rf'REPO / "{PACKAGE}" / "\1"')]

CODE_SUFFIXES = {".py", ".toml", ".cfg", ".in", ".sh", ".txt", ".yaml", ".json", ".html", ".md"}
PROSE_FILES = {"Makefile", "Dockerfile", "MANIFEST.in"}
SKIP_PARTS = {".git", ".venv", ".venv-label-studio", "build", "runs", "data", "__pycache__", "node_modules"}


def tracked_files(root: Path) -> list[Path]:
    """Every file of the tree that the map may rewrite (build outputs, venvs and data left out)."""
    found = []
    for path in root.rglob("*"):
        if not path.is_file() or SKIP_PARTS & set(path.relative_to(root).parts[:-1]) or path.name == "move_map.py":
            continue
        if path.suffix in CODE_SUFFIXES or path.name in PROSE_FILES or path.parent.name == ".ci":
            found.append(path)
    return found


def move_folders(root: Path) -> None:
    """git mv each top-level folder into the package, once."""
    in_git = (root / ".git").exists()
    for folder in FOLDERS:
        source, target = root / folder, root / PACKAGE / folder
        if not source.is_dir():
            continue
        if target.exists():
            sys.exit(f"move_map: both {folder}/ and {PACKAGE}/{folder}/ exist: carry the branch by hand")
        if in_git:
            subprocess.run(["git", "mv", folder, f"{PACKAGE}/{folder}"], cwd=root, check=True)
        else:
            shutil.move(str(source), str(target))


def rewrite(path: Path) -> bool:
    """Apply the name and path maps to one file; True when it changed."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return False
    new = text
    for pattern, replacement in IMPORT_NAMES + TREE_PATHS:
        new = pattern.sub(replacement, new)
    if path.suffix == ".md" or path.name in PROSE_FILES or path.parent.name == ".ci":
        for pattern, replacement in PROSE_PATHS:
            new = pattern.sub(replacement, new)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def main() -> None:
    root = Path.cwd()
    if not (root / PACKAGE).is_dir():
        sys.exit(f"move_map: run from the repository root ({PACKAGE}/ not found in {root})")
    move_folders(root)
    changed = [p for p in tracked_files(root) if rewrite(p)]
    print(f"move_map: {len(changed)} files rewritten")


if __name__ == "__main__":
    main()
