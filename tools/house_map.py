"""The house's rooms as a re-runnable map (issue 54): the command modules into csts_pipeline/cli/, bench/ by
subject, docs/annotate.md split into a guide and references by subject.

Run from the repository root: `python tools/house_map.py` (`--check` says what it would move and fails on what it
does not know, changing nothing). It is idempotent: a file already moved is left, every text rewrite maps only an
old spelling, and a docs/annotate.md already split holds only the guide's headings, so running it twice, or on a
branch made before the move, gives the same tree. It moves with `git mv` where the tree is a git checkout.

What it does not know, it refuses before it changes anything, naming it:
- a module at the top of csts_pipeline/ other than `__init__`, `__main__`, `cli`, `options` and `*_cli` (a `NAME_cli.py`
  becomes `cli/NAME.py` by rule);
- a module at the top of bench/ that neither BENCH nor BENCH_PREFIXES places (add it to BENCH);
- a `##` or `###` heading of docs/annotate.md that HEADINGS does not list (add it, with its page).
Cross-references into docs/annotate.md (`docs/annotate.md, "Label quality"`, `section 10`, `#the-hit-pages`) are
pointed at the page that now holds their section; one it cannot place is printed and left on the guide."""

from __future__ import annotations

import re
import shutil
import subprocess
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

TEXT_SUFFIXES = {".py", ".toml", ".cfg", ".in", ".sh", ".txt", ".yaml", ".yml", ".json", ".html", ".md"}
TEXT_NAMES = {"Makefile", "Dockerfile", "MANIFEST.in"}
SKIP_PARTS = {".git", ".venv", ".venv-label-studio", "build", "runs", "data", "__pycache__", "node_modules", ".whl"}
MAX_BYTES = 300_000  # data files (the COCO sample's captions) hold no module names
SELF = {"house_map.py", "move_map.py"}  # the maps name old spellings on purpose


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
        fail(f"no room known for {', '.join(unknown)}: name it in CLI_FILES (tools/house_map.py)")
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
        fail(f"no subject known for bench/{', bench/'.join(unknown)}: add it to BENCH (tools/house_map.py)")
    return moves


def git_mv(root: Path, source: str, target: str) -> None:
    (root / target).parent.mkdir(parents=True, exist_ok=True)
    if (root / target).exists():
        fail(f"both {source} and {target} exist: carry the branch by hand")
    if (root / ".git").exists():
        subprocess.run(["git", "mv", source, target], cwd=root, check=True)
    else:
        shutil.move(str(root / source), str(root / target))


# ---------------------------------------------------------------------------------------------------------------
# the names: old spelling -> new, as (pattern, replacement) pairs


def cli_rules(stems: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    rules = []
    for old, new in sorted(stems.items(), key=lambda kv: -len(kv[0])):
        new_dotted = f"{PACKAGE}.cli" if new == "__init__" else f"{PACKAGE}.cli.{new}"
        new_path = f"{PACKAGE}/cli/{new}.py"
        if old != "cli":  # csts_pipeline.cli keeps its import name: the entry point is csts_pipeline.cli:main
            rules.append((re.compile(rf"\b{PACKAGE}\.{old}\b"), new_dotted))
        rules.append((re.compile(rf"\b{PACKAGE}/{old}\.py\b"), new_path))
        rules.append((re.compile(rf'"{PACKAGE}" / "{old}\.py"'), f'"{PACKAGE}" / "cli" / "{new}.py"'))
        # a bare file name in prose or a docstring: `train_cli.py` (never `test_cli.py`, `cli/x.py`)
        rules.append((re.compile(rf"(?<![\w/.-]){old}\.py\b"), f"cli/{new}.py"))
        if old.endswith("_cli"):  # `stage_cli.COMMON` in prose
            rules.append((re.compile(rf"(?<![\w./]){old}\.(?!py\b)(?=[A-Za-z_])"), f"cli.{new}."))
    return rules


def from_package_imports(text: str, stems: dict[str, str]) -> str:
    """`from csts_pipeline import embed_cli, stage_cli` -> `from csts_pipeline.cli import embed, stages`, and the
    bare names after it in that file (`embed_cli.OPTIONS` -> `embed.OPTIONS`)."""
    pattern = re.compile(rf"^(\s*)from {PACKAGE} import ([\w, ]+)$", re.M)
    renamed: dict[str, str] = {}

    def one(match: re.Match[str]) -> str:
        names = [n.strip() for n in match.group(2).split(",") if n.strip()]
        moved = [n for n in names if n in stems and n != "cli"]
        if not moved:
            return match.group(0)
        kept = [n for n in names if n not in moved]
        for name in moved:
            renamed[name] = stems[name]
        lines = [f"{match.group(1)}from {PACKAGE}.cli import {', '.join(sorted(stems[n] for n in moved))}"]
        if kept:
            lines.insert(0, f"{match.group(1)}from {PACKAGE} import {', '.join(kept)}")
        return "\n".join(lines)

    text = pattern.sub(one, text)
    for old, new in renamed.items():
        text = re.sub(rf"(?<![\w./]){old}\.(?!py\b)(?=[A-Za-z_])", f"{new}.", text)
    return text


def bench_rules(moves: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    folders = {target.split("/")[0] for target in BENCH.values()} | set(BENCH_PREFIXES.values())
    new_in: dict[str, set[str]] = {}
    for target in moves.values():
        folder, name = target.split("/")
        new_in.setdefault(folder, set()).add(Path(name).stem)
    rules = []
    for old, target in sorted(moves.items(), key=lambda kv: -len(kv[0])):
        stem, suffix = Path(old).stem, Path(old).suffix
        folder, name = target.split("/")
        if suffix == ".py":
            new_dotted = f"bench.{folder}.{Path(name).stem}"
            # `bench.embed` is both the old module and the new folder: the new spellings bench.embed.<module> stay
            guard = ""
            if stem in folders:
                guard = r"(?!\.(?:" + "|".join(sorted(new_in.get(stem, {"_"}))) + r")\b)"
            rules.append((re.compile(rf"(?<![\w.])bench\.{stem}\b{guard}"), new_dotted))
            rules.append(
                (re.compile(rf"^(\s*)from bench import {stem}\b", re.M), rf"\1from bench.{folder} import {stem}")
            )
        rules.append((re.compile(rf"(?<![\w/.-])bench/{re.escape(old)}\b"), f"bench/{target}"))
        rules.append((re.compile(rf'"bench" / "{re.escape(old)}"'), f'"bench" / "{folder}" / "{name}"'))
    return rules


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
        fail(f"docs/{name}: headings HEADINGS does not list (add each with its page, tools/house_map.py):\n  {listed}")
    return preamble, parts


def references_index(parts: list[tuple[str, list[str]]]) -> list[str]:
    """The guide's list of the reference pages, each with the sections it holds (written once, at the split)."""
    lines = [f"## {REFERENCES_HEADING}", ""]
    lines.append("This page is the guide: the commands in order and what each file is for. The references, by subject:")
    lines.append("")
    for page, (title, _) in PAGES.items():
        titles = []
        for where, chunk in parts:
            head = heading_of(chunk[0])
            if where == page and head is not None and head[0] == 2:
                titles.append(re.sub(r"`", "", head[1]).split(":")[0])
        lines.append(f"- [{page}]({page}): {title.split(': ', 1)[-1]} ({'; '.join(titles)})")
    return [*lines, ""]


def slug(title: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def split_annotate(root: Path, check: bool) -> dict[str, str]:
    """Split docs/annotate.md by HEADINGS; returns page -> text of every page (after the split)."""
    docs = root / "docs"
    preamble, parts = chunks((docs / GUIDE).read_text(encoding="utf-8"), GUIDE)
    for page in PAGES:  # a page written already must know its headings too
        if (docs / page).exists():
            chunks((docs / page).read_text(encoding="utf-8"), page)
    pages: dict[str, list[str]] = {GUIDE: list(preamble)}
    for page in PAGES:
        if (docs / page).exists():
            pages[page] = [*(docs / page).read_text(encoding="utf-8").rstrip("\n").splitlines(), ""]
        else:
            title, intro = PAGES[page]
            pages[page] = [f"# {title}", "", intro, ""]
    for page, lines in parts:
        pages[page] += lines
    moved = any(page != GUIDE for page, _ in parts)
    if moved:
        guide = list(preamble)
        if not any(heading_of(line) == (2, REFERENCES_HEADING) for _, chunk in parts for line in chunk[:1]):
            guide += references_index(parts)
        pages[GUIDE] = guide + [line for page, chunk in parts if page == GUIDE for line in chunk]
    texts = {page: "\n".join(lines).rstrip("\n") + "\n" for page, lines in pages.items()}
    if not moved:
        return {page: (docs / page).read_text(encoding="utf-8") for page in [GUIDE, *PAGES] if (docs / page).exists()}
    if not check:
        for page, text in texts.items():
            (docs / page).write_text(text, encoding="utf-8")
    return texts


def doc_index(texts: dict[str, str]) -> tuple[list[tuple[int, str, str]], dict[str, str]]:
    """(level, title, page) for every heading, and anchor -> page."""
    headings, anchors = [], {}
    for page, text in texts.items():
        fenced = False
        for line in text.splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            match = re.match(r"^(#{2,3}) (.+?)\s*$", line)
            if match and not fenced:
                headings.append((len(match.group(1)), match.group(2), page))
                anchors.setdefault(slug(match.group(2)), page)
    return headings, anchors


def place_phrase(phrase: str, headings: list[tuple[int, str, str]], texts: dict[str, str]) -> str | None:
    """The page a quoted section name means: a heading starting with it (a ## first), else one containing it, else
    the one page whose text holds it."""
    low = phrase.lower().strip()
    bare = [(lvl, re.sub(r"^\d+\.\s+", "", t).lower(), page) for lvl, t, page in headings]
    for test in (lambda t: t.startswith(low), lambda t: low in t):
        found = sorted((lvl, page) for lvl, t, page in bare if test(t))
        if found:
            return found[0][1]
    for marked in (low, f"**{low}"):  # the one page that holds it, or the one that sets it in bold
        holding = [page for page, text in texts.items() if marked in text.lower()]
        if len(holding) == 1:
            return holding[0]
    return None


def numbered(number: str, headings: list[tuple[int, str, str]]) -> str | None:
    return next((page for lvl, t, page in headings if lvl == 2 and re.match(rf"{number}\.\s", t)), None)


def rewrite_doc_references(text: str, here: str | None, headings, anchors, texts, where: str) -> str:
    """Point references into docs/annotate.md at the page that holds their section. `here` is the page the text is
    (None outside the annotate pages)."""
    unplaced: list[str] = []

    def quoted(match: re.Match[str]) -> str:
        page = place_phrase(match.group(4), headings, texts)
        if page is None:
            unplaced.append(match.group(4))
            return match.group(0)
        return f"{match.group(1)}{page}{match.group(2)}{match.group(3)}{match.group(4)}"

    text = re.sub(r"((?:docs/)?)annotate\.md((?:,\s*|\s+)\(?)([\"'])([^\"'\n]+)", quoted, text)
    text = re.sub(
        r"((?:docs/)?)annotate\.md(,? (?:step|section) )(\d+)",
        lambda m: f"{m.group(1)}{numbered(m.group(3), headings) or GUIDE}{m.group(2)}{m.group(3)}",
        text,
    )
    text = re.sub(
        r"((?:docs/)?)annotate\.md's ([\w -]+)",
        lambda m: f"{m.group(1)}{place_phrase(m.group(2), headings, texts) or GUIDE}'s {m.group(2)}",
        text,
    )

    def anchored(match: re.Match[str]) -> str:
        page = anchors.get(match.group(2))
        if page is None or page == here:
            return match.group(0)
        return f"]({page}#{match.group(2)})"

    text = re.sub(r"\]\((annotate\.md)?#([\w-]+)\)", lambda m: anchored(m) if m.group(1) or here else m.group(0), text)
    if here is not None:  # `section 10` on a page that no longer holds section 10
        out, fenced = [], False
        for line in text.split("\n"):
            if line.lstrip().startswith("```"):
                fenced = not fenced

            def section(match: re.Match[str], fenced: bool = fenced) -> str:
                page = numbered(match.group(2), headings)
                if page is None or page == here:
                    return match.group(0)
                return f"{match.group(0)} of {page}" if fenced else f"[{match.group(0)}]({page})"

            line = re.sub(
                r"(?<![\[\w])([Ss]ections?|[Ss]teps?) (\d+)(?:-\d+)?\b(?!\.\d|\]| of annotate)", section, line
            )
            out.append(line)
        text = "\n".join(out)
    for phrase in unplaced:
        print(f"house_map: {where}: docs/annotate.md, {phrase!r}: no page holds it; left on the guide")
    return text


def rewrite_doc_paths_in_code(text: str, headings, texts) -> str:
    """A test that reads `"docs" / "annotate.md"` and looks for `"## X"` reads the page that holds X."""
    if '"annotate.md"' not in text:
        return text
    wanted = re.findall(r'"## ([^"]+)"', text)
    pages = {place_phrase(w, headings, texts) for w in wanted}
    if len(pages) == 1 and None not in pages:
        return text.replace('"docs" / "annotate.md"', f'"docs" / "{pages.pop()}"')
    return text


# ---------------------------------------------------------------------------------------------------------------


def wrap_long_lines(text: str, width: int = 120) -> str:
    """A docstring or comment line that a longer path pushed past `width` carries its last words onto the next line
    of the same paragraph (or a new one); code lines are left to the formatter."""
    import io
    import tokenize

    prose: set[int] = set()  # 0-based lines inside a docstring or holding a whole-line comment
    comments: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.STRING and token.string.lstrip("rbuRBU").startswith(('"""', "'''")):
                prose |= set(range(token.start[0] - 1, token.end[0]))
            elif token.type == tokenize.COMMENT and not token.line[: token.start[1]].strip():
                comments.add(token.start[0] - 1)
    except (tokenize.TokenError, SyntaxError):
        return text
    lines = text.split("\n")
    number = 0
    while number < len(lines):
        line = lines[number]
        if len(line) <= width or (number not in prose and number not in comments):
            number += 1
            continue
        cut = line.rfind(" ", 0, width + 1)
        indent = len(line) - len(line.lstrip())
        if cut <= indent + 2:
            number += 1
            continue
        head, rest = line[:cut].rstrip(), line[cut + 1 :]
        if number in comments:
            marker = line[:indent] + "# "
            following = lines[number + 1] if number + 1 < len(lines) else ""
            if number + 1 in comments and following.startswith(marker) and following[len(marker) :].strip():
                lines[number + 1] = marker + rest + " " + following[len(marker) :]
            else:
                lines.insert(number + 1, marker + rest)
                comments.add(number + 1)
        else:
            lead = line[:indent]
            following = lines[number + 1] if number + 1 < len(lines) else ""
            joinable = (
                number + 1 in prose
                and following.strip()
                and following.startswith(lead)
                and not following.strip().startswith(('"""', "- ", "* "))
                and not following[len(lead) : len(lead) + 1].isspace()
                and not rest.rstrip().endswith('"""')
            )
            if joinable:
                lines[number + 1] = lead + rest + " " + following[len(lead) :]
            else:
                lines.insert(number + 1, lead + rest)
                prose = {n + 1 if n > number else n for n in prose} | {number + 1}
                comments = {n + 1 if n > number else n for n in comments}
        lines[number] = head
        number += 1
    return "\n".join(lines)


def sort_imports(root: Path, paths: list[Path]) -> None:
    """The imports a rename moved re-sorted by the project's ruff (isort rules only), where ruff is installed."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not paths:
        return
    if not Path(ruff).exists():
        print("house_map: ruff not found: run `ruff check --select I --fix .` for the import order")
        return
    subprocess.run([ruff, "check", "--select", "I", "--fix", "-q", *map(str, paths)], cwd=root, check=False)


def text_files(root: Path) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        parts = path.relative_to(root).parts
        if not path.is_file() or SKIP_PARTS & set(parts[:-1]) or path.name in SELF or path.stat().st_size > MAX_BYTES:
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES or parts[0] == ".ci":
            found.append(path)
    return found


def main() -> None:
    check = "--check" in sys.argv[1:]
    root = Path.cwd()
    if not (root / PACKAGE).is_dir() or not (root / "bench").is_dir():
        fail(f"run from the repository root ({PACKAGE}/ and bench/ not found in {root})")
    # everything refused is refused before anything changes
    cli = cli_moves(root)
    bench = bench_moves(root)
    texts = split_annotate(root, check=True)
    if check:
        print(f"house_map: would move {len(cli)} command modules, {len(bench)} benches; docs: {', '.join(texts)}")
        return
    for old, new in cli.items():
        git_mv(root, f"{PACKAGE}/{old}.py", f"{PACKAGE}/cli/{new}.py")
    for old, target in bench.items():
        git_mv(root, f"bench/{old}", f"bench/{target}")
    texts = split_annotate(root, check=False)
    if (root / ".git").exists():
        subprocess.run(["git", "add", *(f"docs/{page}" for page in texts)], cwd=root, check=True)
    headings, anchors = doc_index(texts)

    stems = {**all_cli_names(), **cli}
    rules = cli_rules(stems) + bench_rules({**BENCH, **bench})
    changed: list[Path] = []
    for path in text_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        relative = path.relative_to(root)
        new = text
        if path.suffix == ".py":
            new = from_package_imports(new, stems)
        for pattern, replacement in rules:
            new = pattern.sub(replacement, new)
        if relative.parts[0] == "bench" and len(relative.parts) == 3:
            for pattern, replacement in DEEPER:
                new = pattern.sub(replacement, new)
        here = relative.name if relative.parts[:1] == ("docs",) and relative.name in texts else None
        new = rewrite_doc_references(new, here, headings, anchors, texts, str(relative))
        if path.suffix == ".py":
            new = rewrite_doc_paths_in_code(new, headings, texts)
            if new != text:
                new = wrap_long_lines(new)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    sort_imports(root, [p for p in changed if p.suffix == ".py"])
    print(f"house_map: {len(cli)} command modules and {len(bench)} benches moved, {len(changed)} files rewritten")


if __name__ == "__main__":
    main()
