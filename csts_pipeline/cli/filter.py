"""filter's command: its own options (thresholds that may be switched off, --pairs) and its runner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from csts_pipeline.cli.stages import Option, manifest_for, run_stage
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.stage import StageSpec

_OFF = ("none", "null", "off")
ThresholdHelp = "{}; a number, or none to switch the criterion off (overrides filter.{})."
MaxIouOpt = Annotated[str | None, typer.Option(help=ThresholdHelp.format("Maximum bag-of-words IoU", "max_iou"))]
MinCosineOpt = Annotated[
    str | None, typer.Option(help=ThresholdHelp.format("Minimum SimCSE cosine similarity", "min_cosine"))
]
MaxCosineOpt = Annotated[
    str | None, typer.Option(help=ThresholdHelp.format("Maximum SimCSE cosine similarity", "max_cosine"))
]
MinRatioOpt = Annotated[
    str | None, typer.Option(help=ThresholdHelp.format("Minimum word-count ratio (shorter/longer)", "min_ratio"))
]
MinLengthOpt = Annotated[
    str | None, typer.Option(help=ThresholdHelp.format("Minimum characters of the shorter sentence", "min_length"))
]
TextEncoderOpt = Annotated[
    str | None,
    typer.Option(help="sentence-transformers model name or local folder, or packaged:all-MiniLM-L6-v2."),
]
TextPoolingOpt = Annotated[
    str | None,
    typer.Option(
        help="cls_pooler (SimCSE's tool), cls, mean, or model (its own pooling); overrides filter.text_pooling."
    ),
]
PairsOpt = Annotated[
    Path | None,
    typer.Option("--pairs", help="Score this CSV/Parquet of sentence pairs (columns sentence1, sentence2) instead."),
]
FilterOutOpt = Annotated[
    str | None,
    typer.Option("--out", help="Work folder (overrides work_dir); with --pairs, the scored file (.csv or .parquet)."),
]
KeepRejectedOpt = Annotated[
    bool,
    typer.Option(
        "--keep-rejected", metavar="", help="Also write the rejected pairs with the first criterion they failed."
    ),
]
FullReportOpt = Annotated[
    bool,
    typer.Option(
        "--full-report", metavar="", help="Compute the cosine for every candidate (exact funnel), not only survivors."
    ),
]


def _threshold_overrides(**given: str | None) -> tuple[dict[str, float | int], list[str]]:
    """Numbers become manifest overrides; 'none' names a criterion to switch off."""
    overrides: dict[str, float | int] = {}
    off: list[str] = []
    for key, value in given.items():
        if value is None:
            continue
        if value.strip().lower() in _OFF:
            off.append(key)
            continue
        try:
            overrides[f"filter.{key}"] = int(value) if key == "min_length" else float(value)
        except ValueError:
            raise UserError(f"--{key.replace('_', '-')} {value!r}: give a number, or none to switch it off") from None
    return overrides, off


def run_filter(spec: StageSpec, given: dict[str, Any], overrides: dict[str, Any]) -> None:
    """filter: thresholds may be switched off (none); --pairs scores a file of sentence pairs instead."""
    thresholds, off = _threshold_overrides(**{key: given[key] for key in THRESHOLDS})
    overrides = {key: value for key, value in overrides.items() if key[len("filter.") :] not in THRESHOLDS}
    overrides |= thresholds | {"filter.keep_rejected": given["keep_rejected"] or None}
    overrides["filter.full_report"] = given["full_report"] or None
    pairs, out = given["pairs"], given["out"]
    if pairs is not None:
        if out is None:
            raise UserError("--pairs needs --out FILE (.csv or .parquet) for the scored pairs")
        overrides["work_dir"] = None
    loaded = manifest_for(given, overrides)
    for key in off:
        setattr(loaded.filter, key, None)
    if pairs is None:
        run_stage(loaded, spec, given["force"])
        return
    from csts_pipeline.stages.filter.pairs_file import score_file

    result = score_file(loaded, pairs, Path(out))
    typer.echo(result["funnel"].table())
    if result["blank"]:
        pairs = "pair" if result["blank"] == 1 else "pairs"
        typer.echo(f"{result['blank']} {pairs} with a blank sentence not scored (failed: blank)")
    typer.echo(f"scored {result['pairs']} pairs in {result['seconds']:.1f}s: {result['kept']} kept -> {result['out']}")


THRESHOLDS = ("max_iou", "min_cosine", "max_cosine", "min_ratio", "min_length")

OPTIONS: dict[str, Option] = {
    "max_iou": (MaxIouOpt, None),
    "min_cosine": (MinCosineOpt, None),
    "max_cosine": (MaxCosineOpt, None),
    "min_ratio": (MinRatioOpt, None),
    "min_length": (MinLengthOpt, None),
    "text_encoder": (TextEncoderOpt, "filter.text_encoder"),
    "text_pooling": (TextPoolingOpt, "filter.text_pooling"),
    "pairs": (PairsOpt, None),
    "out": (FilterOutOpt, "work_dir"),
    "keep_rejected": (KeepRejectedOpt, None),
    "full_report": (FullReportOpt, None),
}
