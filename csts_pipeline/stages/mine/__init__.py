"""mine: the top-k image neighbours of embed's output expanded to caption pairs."""

from csts_pipeline.pipeline.stage import StageSpec
from csts_pipeline.stages.embed import SPEC as EMBED

SPEC = StageSpec(
    name="mine",
    above=EMBED,
    inputs=("embed/embeddings", "embed/captions"),
    help="Top-k image neighbours (exact, or approximate with measured recall) expanded to caption pairs (<out>/mine/).",
    entry="csts_pipeline.stages.mine.stage:MineStage",
)
