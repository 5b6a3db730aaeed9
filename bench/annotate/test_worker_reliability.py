"""The worker-reliability figure (worker_reliability.py, beside this file): the same seed gives the same PNG, and the
line the import draws at thresholds.UNRELIABLE_BELOW parts the spammers from the other kinds of worker."""

from pathlib import Path

import pytest

from bench.annotate.worker_reliability import draw
from csts_pipeline.stages.annotate.aggregation import thresholds


@pytest.mark.slow
def test_the_docs_worker_reliability_figure_is_reproducible(tmp_path: Path):
    found = draw(tmp_path / "a.png", seed=0)
    draw(tmp_path / "b.png", seed=0)
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    assert (
        max(found["spammer"]) < thresholds.UNRELIABLE_BELOW < min(found["careful"] + found["lenient"] + found["harsh"])
    )
