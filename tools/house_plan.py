"""The plan of tools/house_map.py (issue 54): which room each command module, bench and docs/annotate.md heading
goes to, and which files the rewrite reads. Kept apart from the rewriter because these tables are what a new file or
heading edits, while the moves and rewrites rarely change.

The lookups here read the tree against the tables and refuse what they do not place, naming it, before the map
changes anything:
- a module at the top of csts_pipeline/ other than `__init__`, `__main__`, `cli`, `options` and `*_cli` (a `NAME_cli.py`
  becomes `cli/NAME.py` by rule);
- a module at the top of bench/ that neither BENCH nor BENCH_PREFIXES places (add it to BENCH);
- a `##` or `###` heading of docs/annotate.md that HEADINGS does not list (add it, with its page)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE = "csts_pipeline"

# -- 1. the command line: csts_pipeline/<name>_cli.py -> csts_pipeline/cli/<name>.py, by rule, but for these --
CLI_FILES = {"cli": "__init__", "options": "options", "stage_cli": "stages"}
PACKAGE_TOP = {"__init__", "__main__"}

# -- 2. bench/ by subject: module (or script) -> folder/new name --
BENCH = {
    # whole runs and the frame's costs
    "e2e.py": "pipeline/e2e.py",
    "scale.py": "mine/scale.py",  # the mine -> filter path at scale; its data makers serve index_choice
    "checksums.py": "pipeline/checksums.py",
    "checksums_sample.py": "pipeline/checksums_sample.py",
    "ray_local.py": "pipeline/ray_local.py",
    # embed
    "embed.py": "embed/throughput.py",
    # mine
    "mine.py": "mine/exact_topk.py",
    "exact_scale.py": "mine/exact_scale.py",
    "hard_data.py": "mine/hard_data.py",
    "index_choice.py": "mine/index_choice.py",
    "ivf_coverage.py": "mine/ivf_coverage.py",
    "coarse_quantizer.py": "mine/coarse_quantizer.py",
    "pq_codes.py": "mine/pq_codes.py",
    "pair_sort.py": "mine/pair_sort.py",
    "query_order.py": "mine/query_order.py",
    "rerank_block.py": "mine/rerank_block.py",
    "rerank_reads.py": "mine/rerank_reads.py",
    "float16_mine.py": "mine/float16_mine.py",
    # filter
    "filter.py": "filter/metrics.py",
    "filter_pass.py": "filter/filter_pass.py",
    "float16_check.py": "filter/float16_check.py",
    # train
    "train_csts.py": "train/train_csts.py",
    "train_scaling.py": "train/train_scaling.py",
    "tiny_generator.py": "train/tiny_generator.py",
    # annotate: crowds, label models, models in the loop
    "ambiguity_evidence.py": "annotate/ambiguity_evidence.py",
    "crowd_models.py": "annotate/crowd_models.py",
    "harder_crowds.py": "annotate/harder_crowds.py",
    "hidden_gold.py": "annotate/hidden_gold.py",
    "models_in_loop.py": "annotate/models_in_loop.py",
    "real_text_models.py": "annotate/real_text_models.py",
    "smollm2_in_loop.py": "annotate/smollm2_in_loop.py",
    "worker_reliability.py": "annotate/worker_reliability.py",
    "trust_evidence.py": "annotate/trust_evidence.py",
    "usts_crowd.py": "annotate/usts_crowd.py",
    "import_speed.py": "annotate/import_speed.py",
    # the GPU lease's run
    "gpu.py": "gpu/figures.py",
    "gpu_mine.py": "gpu/mine_figures.py",
    "gpu.sh": "gpu/run.sh",
}
# a bench module BENCH does not name is placed by its name's first word, or refused
BENCH_PREFIXES = {"gpu_": "gpu", "train_": "train", "filter_": "filter", "mine_": "mine", "embed_": "embed"}
BENCH_STAYS = {"shared_data.py"}  # shared by every subject: bench/shared_data.py

# -- 3. docs/annotate.md by reader --
# (level, heading prefix without its "N. " number) -> page; None: the page of its ## section
GUIDE = "annotate.md"
PAGES = {
    "annotate-platforms.md": (
        "Annotation reference: the HIT pages, Best-Worst Scaling and the crowd platforms",
        "What workers see and where the tasks go; the commands in order are in [the guide](annotate.md).",
    ),
    "annotate-labels.md": (
        "Annotation reference: label quality and the rater model",
        "How the ratings become labels, and the evidence behind each choice; the commands in order are in"
        " [the guide](annotate.md).",
    ),
    "annotate-models.md": (
        "Annotation reference: models in the loop",
        "Language and similarity models beside the people: rating, drafting and checking conditions; the commands in"
        " order are in [the guide](annotate.md).",
    ),
    "annotate-audit.md": (
        "Annotation reference: the worked example and the audit",
        "Every annotate command on the small example files of docs/examples/annotate/, and the audit of the labels"
        " against a re-annotation; the commands in order are in [the guide](annotate.md).",
    ),
}
REFERENCES_HEADING = "The reference pages"
HEADINGS: dict[tuple[int, str], str | None] = {
    (2, REFERENCES_HEADING): GUIDE,
    (2, "The whole flow, from images to a trained model"): GUIDE,
    (2, "Walk-through"): GUIDE,
    (2, "The HIT pages"): "annotate-platforms.md",
    (2, "Qualification"): GUIDE,
    (2, "Ids"): GUIDE,
    (2, "`annotate export --stage conditions`"): GUIDE,
    (2, "The condition-writing HIT and its results"): GUIDE,
    (2, "`annotate import --stage conditions"): GUIDE,
    (2, "`annotate export --stage ratings`"): GUIDE,
    (2, "The rating HIT and its results"): GUIDE,
    (2, "`annotate import --stage ratings"): GUIDE,
    (2, "`annotate split`"): GUIDE,
    (2, "Best-Worst Scaling"): "annotate-platforms.md",
    (2, "Crowd platforms"): "annotate-platforms.md",
    (2, "Label Studio"): "annotate-platforms.md",
    (2, "Publishing"): GUIDE,
    (2, "Label quality"): "annotate-labels.md",
    (3, "Trust from evidence"): None,
    (3, "Models in the loop: the rater model's side"): None,
    (2, "Models in the loop"): "annotate-models.md",
    (3, "`annotate rate`: the model as one more rater"): None,
    (3, "`annotate rate --similarity-model`"): None,
    (3, "Several models at once"): None,
    (3, "`annotate draft --stage conditions`"): None,
    (3, "`annotate check-conditions FILE`"): None,
    (3, "What a small model costs"): None,
    (2, "Worked example"): "annotate-audit.md",
    (3, "The same conditions with Best-Worst Scaling"): None,
    (3, "Auditing the labels against a re-annotation"): None,
}

# -- 4. the files the rewrite reads --
TEXT_SUFFIXES = {".py", ".toml", ".cfg", ".in", ".sh", ".txt", ".yaml", ".yml", ".json", ".html", ".md"}
TEXT_NAMES = {"Makefile", "Dockerfile", "MANIFEST.in"}
SKIP_PARTS = {".git", ".venv", ".venv-label-studio", "build", "runs", "data", "__pycache__", "node_modules", ".whl"}
MAX_BYTES = 300_000  # data files (the COCO sample's captions) hold no module names
SELF = {"house_map.py", "house_plan.py", "move_map.py"}  # the maps name old spellings on purpose


def text_files(root: Path) -> list[Path]:
    """Every file of the tree the rewrite may change (build outputs, venvs, data and the maps themselves left out)."""
    found = []
    for path in root.rglob("*"):
        parts = path.relative_to(root).parts
        if not path.is_file() or SKIP_PARTS & set(parts[:-1]) or path.name in SELF or path.stat().st_size > MAX_BYTES:
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES or parts[0] == ".ci":
            found.append(path)
    return found


def fail(message: str) -> None:
    sys.exit(f"house_map: {message}")


# ---------------------------------------------------------------------------------------------------------------
# the plan: which file goes where


def cli_moves(root: Path) -> dict[str, str]:
    """Old stem -> new stem under csts_pipeline/cli/, for what is still at the package's top."""
    moves, unknown = {}, []
    for path in sorted((root / PACKAGE).glob("*.py")):
        stem = path.stem
        if stem in PACKAGE_TOP:
            continue
        if stem in CLI_FILES:
            moves[stem] = CLI_FILES[stem]
        elif stem.endswith("_cli"):
            moves[stem] = stem.removesuffix("_cli")
        else:
            unknown.append(str(path.relative_to(root)))
    if unknown:
        fail(f"no room known for {', '.join(unknown)}: name it in CLI_FILES (tools/house_plan.py)")
    return moves


def all_cli_names() -> dict[str, str]:
    """Every old stem this map knows (also after the move): the fixed ones; `*_cli` ones are found by rule."""
    return dict(CLI_FILES)


def bench_moves(root: Path) -> dict[str, str]:
    """bench/<file> -> bench/<folder>/<file> for what is still at bench's top."""
    moves, unknown = {}, []
    for path in sorted((root / "bench").glob("*")):
        if not path.is_file() or path.suffix not in (".py", ".sh") or path.name in BENCH_STAYS:
            continue
        if path.name == "__init__.py":
            continue
        target = BENCH.get(path.name)
        if target is None:
            folder = next((f for p, f in BENCH_PREFIXES.items() if path.name.startswith(p)), None)
            target = f"{folder}/{path.name}" if folder else None
        if target is None:
            unknown.append(path.name)
        else:
            moves[path.name] = target
    if unknown:
        fail(f"no subject known for bench/{', bench/'.join(unknown)}: add it to BENCH (tools/house_plan.py)")
    return moves


# files one level deeper find the repository one level further up
DEEPER = [
    (re.compile(r"(Path\(__file__\)\.resolve\(\)\.parents)\[1\]"), r"\1[2]"),
    (re.compile(r'cd "\$\(dirname "\$0"\)/\.\."$', re.M), 'cd "$(dirname "$0")/../.."'),
]


# ---------------------------------------------------------------------------------------------------------------
# docs/annotate.md by reader


def heading_of(line: str) -> tuple[int, str] | None:
    match = re.match(r"^(#{2,3}) (.+?)\s*$", line)
    if not match:
        return None
    return len(match.group(1)), re.sub(r"^\d+\.\s+", "", match.group(2))


def page_of(level: int, title: str) -> tuple[bool, str | None]:
    """(known, page) for one heading: the longest prefix of the same level in HEADINGS."""
    found = [(prefix, page) for (lvl, prefix), page in HEADINGS.items() if lvl == level and title.startswith(prefix)]
    if not found:
        return False, None
    return True, max(found, key=lambda f: len(f[0]))[1]


def chunks(text: str, name: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The preamble and each ##/### heading's lines with the page it goes to; fails on an unknown heading."""
    preamble: list[str] = []
    parts: list[tuple[str, list[str]]] = []
    fenced = False
    section_page = GUIDE
    unknown = []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        head = None if fenced else heading_of(line)
        if head is not None:
            known, page = page_of(*head)
            if not known:
                unknown.append(f"{'#' * head[0]} {head[1]}")
                page = GUIDE
            if head[0] == 2:
                section_page = page or GUIDE
            parts.append((page or section_page, [line]))
        elif parts:
            parts[-1][1].append(line)
        else:
            preamble.append(line)
    if unknown:
        listed = "\n  ".join(unknown)
        fail(f"docs/{name}: headings HEADINGS does not list (add each with its page, tools/house_plan.py):\n  {listed}")
    return preamble, parts
