"""Where the benchmarks find the project machines' real data: `../shared/data` beside the checkout (a worktree one
level further down finds the same folder). Nothing but the benchmarks reads it; tests and README examples never do."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = next(
    (path for path in (REPO.parent / "shared", REPO.parents[1] / "shared") if path.exists()), REPO.parent / "shared"
)
COCO_VAL = SHARED / "data" / "coco" / "captions_val2017.json"
