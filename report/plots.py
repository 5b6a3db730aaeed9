"""The page's figures, drawn with matplotlib (Agg) to PNG files: each metric's distribution over the candidates
and over the kept pairs with the thresholds marked, and the annotation label histogram."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from csts_pipeline.frame.shards import write_atomic
from csts_pipeline.stages.filter.criteria import Criteria

TITLES = {
    "image_cosine": "image cosine (CLIP)",
    "iou": "bag-of-words IoU",
    "simcse_cosine": "sentence cosine",
    "ratio": "word-count ratio",
    "length": "length of the shorter sentence (characters)",
}


def _figure(width: float = 5.2, height: float = 3.2):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(width, height))
    return plt, figure, axis


def _save(plt, figure, path: Path) -> None:
    figure.tight_layout()
    write_atomic(path, lambda handle: figure.savefig(handle, format="png", dpi=100, bbox_inches="tight"))
    plt.close(figure)


def distribution(
    name: str, histogram: dict[str, Any], bounds: tuple[Any, Any], labels: tuple[str, str], path: Path
) -> None:
    """Counts before and after filtering in the histogram's bins, a dashed red line at each bound."""
    plt, figure, axis = _figure()
    edges = np.asarray(histogram["edges"], np.float64)
    before, after = np.asarray(histogram["before"]), np.asarray(histogram["after"])
    axis.stairs(before, edges, color="0.55", fill=True, alpha=0.5, label=labels[0])
    axis.stairs(after, edges, color="tab:blue", linewidth=1.5, label=labels[1])
    for bound in bounds:
        if bound is not None:
            axis.axvline(bound, color="tab:red", linestyle="--", linewidth=1.2, label=f"threshold {bound}")
    if before.any():
        axis.set_yscale("log")
        axis.set_xlim(*_span(edges, before, bounds))
    axis.set_title(TITLES.get(name, name), fontsize=10)
    axis.set_ylabel("pairs")
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, frameon=False)
    _save(plt, figure, path)


def _span(edges: np.ndarray, counts: np.ndarray, bounds: tuple[Any, Any]) -> tuple[float, float]:
    """The x range holding every non-empty bin and the thresholds, with a little margin."""
    filled = np.flatnonzero(counts)
    points = [edges[filled[0]], edges[filled[-1] + 1], *(b for b in bounds if b is not None)]
    low, high = min(points), max(points)
    margin = 0.05 * (high - low or 1.0)
    return low - margin, high + margin


def distributions(
    histograms: dict[str, Any], image_cosine: dict[str, Any], criteria: Criteria, folder: Path
) -> list[dict[str, str]]:
    """One PNG per metric; returns what the page shows for each (file, title, caption)."""
    figures = []
    distribution(
        "image_cosine", image_cosine, (None, None), ("image neighbour pairs", "kept caption pairs"),
        folder / "image_cosine.png",
    )  # fmt: skip
    figures.append({"file": "image_cosine.png", "title": TITLES["image_cosine"], "note": "no threshold (mine k)"})
    for name in ("iou", "simcse_cosine", "ratio", "length"):
        entry = histograms[name]
        if not any(entry["before"]):  # not computed (the sentence cosine switched off): nothing to draw
            continue
        covers = entry["before_covers"]
        before = "candidates" if covers == "all candidates" else "candidates passing the cheaper criteria"
        distribution(name, entry, criteria.bounds(name), (before, "kept"), folder / f"{name}.png")
        figures.append({"file": f"{name}.png", "title": TITLES[name], "note": entry["rule"]})
    return figures


def label_histogram(labels: np.ndarray, title: str, path: Path) -> None:
    """Labels of the kept annotation items (1-5) in half-point bins."""
    plt, figure, axis = _figure(4.6, 2.8)
    axis.hist(labels, bins=np.arange(0.75, 5.5, 0.5), color="tab:blue", edgecolor="white")
    axis.set_xlabel("label")
    axis.set_ylabel("items")
    axis.set_title(title, fontsize=10)
    _save(plt, figure, path)
