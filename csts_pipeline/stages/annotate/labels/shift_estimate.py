"""`annotate audit --ratings`: the shared per-item shift's sd (labels/shift.py) measured against a careful
re-annotation, for `annotate import --ambiguity-sd`.

Why a reference: an item everyone reads half a point high looks, from its ratings alone, like an item whose label
is half a point higher, so the import's own choice of the sd rests mostly on its prior. With the reference's
labels taken as known (ordinal.fit's `known`, as hidden gold), the people's shared departures from them are
observed. The likelihood of the people's ratings is computed at each point of ESTIMATE_GRID and a parabola fitted
through them (the workers' bias and noise are chosen on a grid, so the raw values jump by a few log units
from one point to the next); the sd is the parabola's highest point on the grid's range, and the points within
LIKELIHOOD_INTERVAL log units of it bound it (a 95% likelihood interval). A reference that is one
more rating rather than an expert's reading adds its own error, read as ambiguity: then the estimate is high."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.labels import ordinal
from csts_pipeline.stages.annotate.labels.agreement import MODEL_WORKER
from csts_pipeline.stages.annotate.layout import INDIVIDUAL_RATINGS, ITEMS

ESTIMATE_GRID = tuple(round(0.1 * step, 1) for step in range(9))  # 0 to 0.8 points
LIKELIHOOD_INTERVAL = 1.92  # log units: half the 95% point of chi-square with one degree of freedom
MIN_ITEMS = 50  # reference items with two or more people's ratings below which no sd is estimated


def read_import(folder: Path) -> tuple[pa.Table, pa.Table]:
    """An import's `items.parquet` and `ratings.parquet` (the ratings folder); anything else is a UserError."""
    if not folder.is_dir():
        raise UserError(f"{folder}: not found (--ratings takes an import's ratings folder, <annotate>/ratings)")
    wanted = {
        ITEMS: ("item_id", "sentence1", "sentence2", "condition"),
        INDIVIDUAL_RATINGS: ("item_id", "worker_id", "rating", "not_pertinent"),
    }
    tables = []
    for name, columns in wanted.items():
        path = folder / name
        if not path.is_file():
            raise UserError(f"{path}: not found (--ratings takes an import's ratings folder, <annotate>/ratings)")
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise UserError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
        missing = [column for column in columns if column not in table.column_names]
        if missing:
            raise UserError(f"{path}: missing column(s) {', '.join(missing)}")
        tables.append(table)
    return tables[0], tables[1]


def _fold(text: object) -> str:
    return " ".join(str(text).split()).casefold()


def item_ids(rows: pa.Table, items: pa.Table) -> list[str | None]:
    """Each labels row's item id: its own `item_id` where it has one, else the import's item with the same
    sentences and condition (case and whitespace folded; None where there is none)."""
    if "item_id" in rows.column_names:
        return [None if v is None else str(v) for v in rows.column("item_id").to_pylist()]
    key = ("sentence1", "sentence2", "condition")
    of = {
        tuple(_fold(v) for v in values): str(item)
        for item, *values in zip(items.column("item_id").to_pylist(), *(items.column(k).to_pylist() for k in key))
    }
    return [of.get(tuple(_fold(v) for v in values)) for values in zip(*(rows.column(k).to_pylist() for k in key))]


def estimate(items: list[str | None], reference: np.ndarray, ratings: pa.Table) -> dict[str, Any]:
    """The sd for the rows of item ids `items` (None: not in the import) whose reference label (`reference`,
    1-5, rounded) is known, from the people's ratings of them in `ratings` (models' rows and flags left out)."""
    people = ratings.filter(
        pc.and_(
            pc.invert(pc.starts_with(ratings.column("worker_id"), MODEL_WORKER)),
            pc.and_(
                pc.is_valid(ratings.column("rating")), pc.invert(pc.fill_null(ratings.column("not_pertinent"), False))
            ),
        )
    )
    index = {item: n for n, item in enumerate(items) if item is not None}
    row = np.array([index.get(str(item), -1) for item in people.column("item_id").to_pylist()], np.int64)
    kept = row >= 0
    item = row[kept]
    worker = np.array(people.column("worker_id").to_pylist(), dtype=object)[kept].astype(str)
    rating = people.column("rating").to_numpy(zero_copy_only=False).astype(np.float64)[kept]
    counts = np.bincount(item, minlength=len(items))
    found: dict[str, Any] = {"items": int((counts >= 2).sum()), "ratings": len(item)}
    if found["items"] < MIN_ITEMS:
        return found | {"sd": None, "why": f"fewer than {MIN_ITEMS} reference items with two or more ratings"}
    known = np.clip(np.rint(reference), 1, 5).astype(np.int64)
    fits = [ordinal.fit(item, worker, rating, len(items), known=known, ambiguity=sd) for sd in ESTIMATE_GRID]
    likelihood = np.array([fit.log_likelihood for fit in fits])
    sd, low, high = smoothed_maximum(np.array(ESTIMATE_GRID), likelihood)
    return found | {
        "sd": sd,
        "interval_95": [low, high],
        "grid": list(ESTIMATE_GRID),
        "log_likelihood": [round(float(value), 2) for value in likelihood],
    }


def smoothed_maximum(grid: np.ndarray, likelihood: np.ndarray) -> tuple[float, float, float]:
    """The highest point of the parabola through (grid, likelihood) on the grid's range, and the range where it
    stays within LIKELIHOOD_INTERVAL of it, in hundredths; the raw values' where the fit is not concave."""
    curve = np.polyfit(grid, likelihood, 2)
    if curve[0] >= 0:
        curve_at, fine = likelihood, grid
    else:
        fine = np.round(np.arange(grid[0], grid[-1] + 1e-9, 0.01), 2)
        curve_at = np.polyval(curve, fine)
    inside = fine[curve_at >= curve_at.max() - LIKELIHOOD_INTERVAL]
    return float(fine[int(np.argmax(curve_at))]), float(inside.min()), float(inside.max())
