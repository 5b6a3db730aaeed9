"""embed: every image of a dataset encoded by an open_clip model into Parquet shards; the first data stage."""

from csts_pipeline.pipeline.stage import StageSpec

SPEC = StageSpec(
    "embed",
    None,
    ("data.captions", "data.images"),
    "Encode every image with the manifest's open_clip model into Parquet shards (<out>/embed/).",
    "csts_pipeline.stages.embed.stage:EmbedStage",
    "csts_pipeline.stages.embed.stage:summary_lines",
)
