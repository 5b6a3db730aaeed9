"""filter: mine's candidate pairs kept or dropped by the C-STS criteria (paper Table 6)."""

from csts_pipeline.pipeline.stage import StageSpec
from csts_pipeline.stages.mine import SPEC as MINE

SPEC = StageSpec(
    name="filter",
    above=MINE,
    inputs=("mine/candidates", "mine/captions"),
    help="Keep the candidate pairs meeting the C-STS criteria (<out>/filter/), print the funnel; or score --pairs.",
    entry="csts_pipeline.stages.filter.stage:FilterStage",
    summary="csts_pipeline.stages.filter.stage:summary_lines",
)
