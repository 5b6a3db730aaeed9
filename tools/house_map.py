"""The house's rooms as a re-runnable map (issue 54): the command modules into csts_pipeline/cli/, bench/ by
subject, docs/annotate.md split into a guide and references by subject. This module is the rewriter: the moves,
the text rewrites and the docs split. Which file and heading goes where is the plan, tools/house_plan.py: its tables
are what a new bench or heading edits, and what they do not place is refused there before anything changes.

Run from the repository root: `python tools/house_map.py` (`--check` says what it would move and fails on what it
does not know, changing nothing). It is idempotent: a file already moved is left, every text rewrite maps only an
old spelling, and a docs/annotate.md already split holds only the guide's headings, so running it twice, or on a
branch made before the move, gives the same tree. It moves with `git mv` where the tree is a git checkout.

Cross-references into docs/annotate.md (`docs/annotate.md, "Label quality"`, `section 10`, `#the-hit-pages`) are
pointed at the page that now holds their section; one it cannot place is printed and left on the guide."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

# the sibling module: `python tools/house_map.py` puts tools/ first on the import path
import house_plan as plan


def git_mv(root: Path, source: str, target: str) -> None:
    (root / target).parent.mkdir(parents=True, exist_ok=True)
    if (root / target).exists():
        plan.fail(f"both {source} and {target} exist: carry the branch by hand")
    if (root / ".git").exists():
        subprocess.run(["git", "mv", source, target], cwd=root, check=True)
    else:
        shutil.move(str(root / source), str(root / target))


# ---------------------------------------------------------------------------------------------------------------
# the names: old spelling -> new, as (pattern, replacement) pairs


def cli_rules(stems: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    rules = []
    for old, new in sorted(stems.items(), key=lambda kv: -len(kv[0])):
        new_dotted = f"{plan.PACKAGE}.cli" if new == "__init__" else f"{plan.PACKAGE}.cli.{new}"
        new_path = f"{plan.PACKAGE}/cli/{new}.py"
        if old != "cli":  # csts_pipeline.cli keeps its import name: the entry point is csts_pipeline.cli:main
            rules.append((re.compile(rf"\b{plan.PACKAGE}\.{old}\b"), new_dotted))
        rules.append((re.compile(rf"\b{plan.PACKAGE}/{old}\.py\b"), new_path))
        rules.append((re.compile(rf'"{plan.PACKAGE}" / "{old}\.py"'), f'"{plan.PACKAGE}" / "cli" / "{new}.py"'))
        # a bare file name in prose or a docstring: `train_cli.py` (never `test_cli.py`, `cli/x.py`)
        rules.append((re.compile(rf"(?<![\w/.-]){old}\.py\b"), f"cli/{new}.py"))
        if old.endswith("_cli"):  # `stage_cli.COMMON` in prose
            rules.append((re.compile(rf"(?<![\w./]){old}\.(?!py\b)(?=[A-Za-z_])"), f"cli.{new}."))
    return rules


def from_package_imports(text: str, stems: dict[str, str]) -> str:
    """`from csts_pipeline import embed_cli, stage_cli` -> `from csts_pipeline.cli import embed, stages`, and the
    bare names after it in that file (`embed_cli.OPTIONS` -> `embed.OPTIONS`)."""
    pattern = re.compile(rf"^(\s*)from {plan.PACKAGE} import ([\w, ]+)$", re.M)
    renamed: dict[str, str] = {}

    def one(match: re.Match[str]) -> str:
        names = [n.strip() for n in match.group(2).split(",") if n.strip()]
        moved = [n for n in names if n in stems and n != "cli"]
        if not moved:
            return match.group(0)
        kept = [n for n in names if n not in moved]
        for name in moved:
            renamed[name] = stems[name]
        lines = [f"{match.group(1)}from {plan.PACKAGE}.cli import {', '.join(sorted(stems[n] for n in moved))}"]
        if kept:
            lines.insert(0, f"{match.group(1)}from {plan.PACKAGE} import {', '.join(kept)}")
        return "\n".join(lines)

    text = pattern.sub(one, text)
    for old, new in renamed.items():
        text = re.sub(rf"(?<![\w./]){old}\.(?!py\b)(?=[A-Za-z_])", f"{new}.", text)
    return text


def bench_rules(moves: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    folders = {target.split("/")[0] for target in plan.BENCH.values()} | set(plan.BENCH_PREFIXES.values())
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


# ---------------------------------------------------------------------------------------------------------------
# docs/annotate.md by reader


def references_index(parts: list[tuple[str, list[str]]]) -> list[str]:
    """The guide's list of the reference pages, each with the sections it holds (written once, at the split)."""
    lines = [f"## {plan.REFERENCES_HEADING}", ""]
    lines.append("This page is the guide: the commands in order and what each file is for. The references, by subject:")
    lines.append("")
    for page, (title, _) in plan.PAGES.items():
        titles = []
        for where, chunk in parts:
            head = plan.heading_of(chunk[0])
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
    preamble, parts = plan.chunks((docs / plan.GUIDE).read_text(encoding="utf-8"), plan.GUIDE)
    for page in plan.PAGES:  # a page written already must know its headings too
        if (docs / page).exists():
            plan.chunks((docs / page).read_text(encoding="utf-8"), page)
    pages: dict[str, list[str]] = {plan.GUIDE: list(preamble)}
    for page in plan.PAGES:
        if (docs / page).exists():
            pages[page] = [*(docs / page).read_text(encoding="utf-8").rstrip("\n").splitlines(), ""]
        else:
            title, intro = plan.PAGES[page]
            pages[page] = [f"# {title}", "", intro, ""]
    for page, lines in parts:
        pages[page] += lines
    moved = any(page != plan.GUIDE for page, _ in parts)
    if moved:
        guide = list(preamble)
        if not any(plan.heading_of(line) == (2, plan.REFERENCES_HEADING) for _, chunk in parts for line in chunk[:1]):
            guide += references_index(parts)
        pages[plan.GUIDE] = guide + [line for page, chunk in parts if page == plan.GUIDE for line in chunk]
    texts = {page: "\n".join(lines).rstrip("\n") + "\n" for page, lines in pages.items()}
    if not moved:
        return {
            page: (docs / page).read_text(encoding="utf-8")
            for page in [plan.GUIDE, *plan.PAGES]
            if (docs / page).exists()
        }
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
        lambda m: f"{m.group(1)}{numbered(m.group(3), headings) or plan.GUIDE}{m.group(2)}{m.group(3)}",
        text,
    )
    text = re.sub(
        r"((?:docs/)?)annotate\.md's ([\w -]+)",
        lambda m: f"{m.group(1)}{place_phrase(m.group(2), headings, texts) or plan.GUIDE}'s {m.group(2)}",
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


def main() -> None:
    check = "--check" in sys.argv[1:]
    root = Path.cwd()
    if not (root / plan.PACKAGE).is_dir() or not (root / "bench").is_dir():
        plan.fail(f"run from the repository root ({plan.PACKAGE}/ and bench/ not found in {root})")
    # everything refused is refused before anything changes
    cli = plan.cli_moves(root)
    bench = plan.bench_moves(root)
    texts = split_annotate(root, check=True)
    if check:
        print(f"house_map: would move {len(cli)} command modules, {len(bench)} benches; docs: {', '.join(texts)}")
        return
    for old, new in cli.items():
        git_mv(root, f"{plan.PACKAGE}/{old}.py", f"{plan.PACKAGE}/cli/{new}.py")
    for old, target in bench.items():
        git_mv(root, f"bench/{old}", f"bench/{target}")
    texts = split_annotate(root, check=False)
    if (root / ".git").exists():
        subprocess.run(["git", "add", *(f"docs/{page}" for page in texts)], cwd=root, check=True)
    headings, anchors = doc_index(texts)

    stems = {**plan.all_cli_names(), **cli}
    rules = cli_rules(stems) + bench_rules({**plan.BENCH, **bench})
    changed: list[Path] = []
    for path in plan.text_files(root):
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
            for pattern, replacement in plan.DEEPER:
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
