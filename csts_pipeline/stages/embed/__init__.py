"""embed: every image of a dataset encoded by an open_clip model into Parquet shards; the first data stage."""

from csts_pipeline.pipeline.stage import StageSpec

SPEC = StageSpec(
    name="embed",
    above=None,
    inputs=("data.captions", "data.images"),
    help="Encode every image with the manifest's open_clip model into Parquet shards (<out>/embed/).",
    entry="csts_pipeline.stages.embed.stage:EmbedStage",
    summary="csts_pipeline.stages.embed.stage:summary_lines",
)
