"""The page's figures, drawn with matplotlib (Agg) to PNG files: each metric's distribution over the candidates
and over the kept pairs with the thresholds marked, the comparison of two runs, and the annotation label
histogram. They are drawn at the size the page shows them (about 640 px wide, text at 10-12 px) and twice that
in pixels, so they stay sharp when opened at full size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from csts_pipeline.pipeline.shards import write_atomic
from csts_pipeline.stages.filter.criteria import Criteria

TITLES = {
    "image_cosine": "image cosine (CLIP)",
    "iou": "bag-of-words IoU",
    "simcse_cosine": "sentence cosine",
    "ratio": "word-count ratio",
    "length": "length of the shorter sentence (characters)",
}


def _figure(width: float = 6.4, height: float = 3.6, rows: int = 1):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "axes.titlesize": 12, "legend.fontsize": 10})
    figure, axis = plt.subplots(rows, 1, figsize=(width, height), sharex=True, squeeze=rows == 1)
    return plt, figure, axis


def _save(plt, figure, path: Path) -> None:
    figure.tight_layout()
    write_atomic(path, lambda handle: figure.savefig(handle, format="png", dpi=200, bbox_inches="tight"))
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
    axis.set_title(TITLES.get(name, name))
    axis.set_ylabel("pairs")
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    _save(plt, figure, path)


def image_cosine_figure(histogram: dict[str, Any], path: Path) -> None:
    """The image cosine of the image neighbour pairs and of the kept caption pairs, in two panels on one x axis:
    they count different things (image pairs, caption pairs), so they get their own y axes."""
    plt, figure, axes = _figure(6.4, 4.6, rows=2)
    edges = np.asarray(histogram["edges"], np.float64)
    for axis, key, label, colour in (
        (axes[0][0], "before", "image neighbour pairs (mine)", "0.45"),
        (axes[1][0], "after", "kept caption pairs (filter)", "tab:blue"),
    ):
        counts = np.asarray(histogram[key])
        axis.stairs(counts, edges, color=colour, fill=True, alpha=0.6)
        axis.set_ylabel(label.split(" (")[0].replace(" pairs", "\npairs"))
        axis.set_title(label, fontsize=10, loc="left")
        if counts.any():
            axis.set_yscale("log")
            axis.set_xlim(*_span(edges, np.asarray(histogram["before"]) + counts, (None, None)))
    axes[1][0].set_xlabel(TITLES["image_cosine"])
    _save(plt, figure, path)


def compared_distribution(
    name: str, histograms: tuple[dict, dict], bounds: tuple[tuple, tuple], labels: tuple[str, str], path: Path
) -> None:
    """The kept pairs of two runs on one axis, each run's thresholds dashed in its colour."""
    plt, figure, axis = _figure()
    spans = []
    for histogram, bound_pair, label, colour in zip(histograms, bounds, labels, ("tab:blue", "tab:orange")):
        edges, after = np.asarray(histogram["edges"], np.float64), np.asarray(histogram["after"])
        axis.stairs(after, edges, color=colour, linewidth=1.8, label=f"{label}: kept ({int(after.sum()):,})")
        for bound in bound_pair:
            if bound is not None:
                axis.axvline(bound, color=colour, linestyle="--", linewidth=1.4, label=f"{label}: threshold {bound}")
        if after.any():
            spans.append(_span(edges, after, bound_pair))
    if spans:
        axis.set_yscale("log")
        axis.set_xlim(min(s[0] for s in spans), max(s[1] for s in spans))
    axis.set_title(TITLES.get(name, name))
    axis.set_ylabel("kept pairs")
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
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
    image_cosine_figure(image_cosine, folder / "image_cosine.png")
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
    plt, figure, axis = _figure(5.0, 3.0)
    axis.hist(labels, bins=np.arange(0.75, 5.5, 0.5), color="tab:blue", edgecolor="white")
    axis.set_xlabel("label")
    axis.set_ylabel("items")
    axis.set_title(title)
    _save(plt, figure, path)
