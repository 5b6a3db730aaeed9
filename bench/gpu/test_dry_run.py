"""The GPU run (run.sh, beside this file) with --dry-run: every step of it (embed's decoders, the text encoding, mine's
exact baseline and torch IVF with held-out recall, COCO-shaped end to end) on the CPU at tiny sizes, with the
repository's own data."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_script_runs_every_step_on_the_cpu_and_writes_its_figures(tmp_path: Path):
    out = tmp_path / "out"
    env = os.environ | {"OUT": str(out), "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1"}
    command = ["bash", str(REPO / "bench" / "gpu" / "run.sh"), "--dry-run", "--work", str(tmp_path / "work")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads((out / "gpu_figures.json").read_text())
    assert figures["dry_run"] and figures["env"]["device"].startswith("cpu")
    failed = {name: row for name, row in figures.items() if isinstance(row, dict) and "failed" in row}
    assert not failed, failed
    embed = figures["embed"]
    assert embed["model_only"] > 0 and embed["torchvision"]["pipeline"] > 0 and embed["torchvision"]["decode_only"] > 0
    assert embed["nvimgcodec"] == {"skipped": "nvImageCodec is not installed"} or embed["nvimgcodec"]["pipeline"] > 0
    text = figures["text"]
    assert text["texts"] == 200 and text["new"]["sentences_per_s"] > 0
    # on the CPU both paths compute in float32: each sentence's embedding comes back in its place
    assert text["mean_abs_cosine_change"] < 1e-4 and text["max_abs_embedding_change"] < 1e-3
    mine = figures["mine-2000"]
    assert mine["exact_baseline"]["queries_timed"] == 1000
    approximate = mine["approximate"]
    assert (approximate["kind"], approximate["backend"]) == ("ivf", "torch")
    assert approximate["searched"] == 2000 and approximate["held_out_recall"] >= 0.9
    assert set(figures["e2e"]["stages"]) == {"embed", "mine", "filter"} and figures["e2e"]["images"] == 66
    summary = (out / "gpu_figures.md").read_text()
    assert "mine 2,000: exact baseline" in summary and "e2e 66 images" in summary
