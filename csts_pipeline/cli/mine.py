"""mine's own options (the common ones are cli.stages.COMMON): name -> (type, the manifest key it overrides)."""

from __future__ import annotations

from typing import Annotated

import typer

from csts_pipeline.cli.stages import Option

KOpt = Annotated[int | None, typer.Option("--k", help="Neighbours per image (overrides mine.k).")]
KnnOpt = Annotated[str | None, typer.Option(help="Exact search backend: faiss or torch (overrides mine.knn).")]
ByOpt = Annotated[
    str | None, typer.Option(help="Neighbours by image (CLIP) or text (caption sentence embeddings); mine.by.")
]
IndexOpt = Annotated[
    str | None,
    typer.Option(
        help="Neighbour index: auto, exact, ivf, ivf_sq8, ivf_pq or hnsw (overrides mine.index; docs/mine.md)."
    ),
]
BudgetOpt = Annotated[
    float | None,
    typer.Option(help="GiB mine may use; auto picks its index to fit (overrides mine.memory_budget)."),
]

OPTIONS: dict[str, Option] = {
    "k": (KOpt, "mine.k"),
    "knn": (KnnOpt, "mine.knn"),
    "index": (IndexOpt, "mine.index"),
    "memory_budget": (BudgetOpt, "mine.memory_budget"),
    "by": (ByOpt, "mine.by"),
}
