"""The house as docs/architecture.md draws it, kept so: the package's top is four rooms (cli/, pipeline/, stages/,
report/) and the simulations beside them (testing/) plus `__init__` and `__main__`; imports (module-level and
function-level alike) only run downwards (the command line imports the stages and nothing imports the command line,
nothing of the pipeline imports the simulations, the frame imports no stage, annotate's label statistics and
aggregation import no platform or step, the rater model's EM imports none of its decision), no import circle among
the installed modules, annotate's top folder holds its sub-packages and at most three modules, no module passes 400
lines, and bench/ is grouped by subject with no circle between its subjects."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "csts_pipeline"
TOP_NAMES = {"pipeline", "stages", "report"}  # the package's floors; never top-level import names
ROOMS = {"cli", "pipeline", "stages", "report"}  # the package's top, beside __init__.py and __main__.py
SIMULATIONS = "testing"  # beside the rooms: what the tests and the benches share (crowds, models, a server)
ANNOTATE_ROOMS = ("steps", "crowd", "labels", "aggregation", "release")  # annotate's sub-packages, by subject
BENCH = REPO / "bench"
BENCH_SUBJECTS = {"pipeline", "embed", "mine", "filter", "train", "annotate", "gpu"}
BENCH_SHARED = {"shared_data.py"}  # what every subject may import, at bench/'s top


def modules() -> dict[str, Path]:
    """Import name -> file for every module of the package: the folder path is the import name."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = [p for p in path.relative_to(REPO).with_suffix("").parts if p != "__init__"]
        found[".".join(parts)] = path
    return found


def module_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports anywhere: at module level and inside functions alike (an import put off
    to call time is still an arrow of the house; hiding one in a function must not hide a circle)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found & known


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_circle_and_imports_run_downwards():
    found = modules()
    graph = {name: module_imports(path, set(found)) - {name} for name, path in found.items()}
    assert cycles(graph) == []
    frame = {n: g for n, g in graph.items() if n.startswith("csts_pipeline.pipeline")}
    assert {n: sorted(i for i in g if not i.startswith("csts_pipeline.pipeline")) for n, g in frame.items()} == {
        n: [] for n in frame
    }
    statistics = ("csts_pipeline.stages.annotate.labels", "csts_pipeline.stages.annotate.aggregation")
    upward = {n: sorted(i for i in g if ".annotate.crowd" in i or ".annotate.steps" in i) for n, g in graph.items()}
    assert {n: up for n, up in upward.items() if n.startswith(statistics) and up} == {}
    crowd = {n: sorted(i for i in g if ".annotate.steps" in i) for n, g in graph.items() if ".annotate.crowd" in n}
    assert {n: up for n, up in crowd.items() if up} == {}


def test_the_package_top_is_four_rooms():
    """A newcomer opening csts_pipeline/ meets the rooms and the simulations, not the command modules side by side."""
    top = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__" and (p.is_dir() or p.suffix == ".py")}
    assert top == ROOMS | {SIMULATIONS, "__init__.py", "__main__.py"}


def test_nothing_of_the_pipeline_imports_the_simulations():
    """csts_pipeline/testing/ serves the tests and the benches: it imports the rooms, none of them imports it."""
    found = modules()
    graph = {name: module_imports(path, set(found)) - {name} for name, path in found.items()}
    inside = f"csts_pipeline.{SIMULATIONS}"
    into = {
        n: sorted(i for i in g if i == inside or i.startswith(f"{inside}."))
        for n, g in graph.items()
        if not (n == inside or n.startswith(f"{inside}."))
    }
    assert {n: i for n, i in into.items() if i} == {}
    assert any(i.startswith("csts_pipeline.stages") for n, g in graph.items() if n.startswith(inside) for i in g)


def test_the_command_line_imports_the_stages_and_nothing_imports_it():
    found = modules()
    graph = {name: module_imports(path, set(found)) - {name} for name, path in found.items()}
    cli = "csts_pipeline.cli"
    outside = {n: sorted(i for i in g if i == cli or i.startswith(f"{cli}.")) for n, g in graph.items()}
    up = {
        n: i
        for n, i in outside.items()
        if i and not (n == cli or n.startswith(f"{cli}.")) and n != "csts_pipeline.__main__"
    }
    assert up == {}
    into_stages = {
        i for n, g in graph.items() if n.startswith(f"{cli}.") for i in g if i.startswith("csts_pipeline.stages")
    }
    assert into_stages


def test_annotate_is_split_by_subject_and_no_module_is_long():
    top = sorted(p.name for p in (PACKAGE / "stages" / "annotate").glob("*.py"))
    assert len(top) <= 3, top
    assert {"steps", "crowd", "labels", "aggregation", "release"} <= {
        p.name for p in (PACKAGE / "stages" / "annotate").iterdir()
    }
    long = {str(p.relative_to(REPO)): n for p in modules().values() if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def test_code_names_its_modules_by_the_installed_names_only():
    """`pipeline`, `stages` and `report` exist as top-level names only in a source checkout (tests import from it
    too), never in the installed wheel: code that imports or looks up a module by such a name works in the tests
    and fails installed. Every import and every module named in a string goes through csts_pipeline."""
    lookup = re.compile(r"""(files|import_module|find_spec)\(\s*["'](pipeline|stages|report)\b""")
    dotted = re.compile(r"""["'](pipeline|stages|report)\.(\w+)[\w.]*(:\w+)?["']""")
    found = []
    for path in modules().values():
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            root = node.module.split(".")[0] if isinstance(node, ast.ImportFrom) and node.module else None
            if root in TOP_NAMES:
                found.append(f"{path.relative_to(REPO)}: from {node.module} import")
        found += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in lookup.finditer(text)]
        for m in dotted.finditer(text):
            root, first = m.group(1), m.group(2)
            if (PACKAGE / root / first).is_dir() or (PACKAGE / root / f"{first}.py").is_file():
                found.append(f"{path.relative_to(REPO)}: {m.group(0)}")
    assert found == []


def test_architecture_lists_every_module_with_its_room():
    """docs/architecture.md's "Every module, by room" has a row per module of the package, and no row for a module
    that is gone: a newcomer reads the house from it."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(csts_pipeline/[\w/]+\.py)` \| [^|]+ \|", text, re.M))
    present = {str(path.relative_to(REPO)) for path in modules().values()}
    assert {"missing": sorted(present - listed), "gone": sorted(listed - present)} == {"missing": [], "gone": []}


def room(module: str) -> str:
    """The room of the house a module lives in: the command line, the frame (pipeline), the registry (stages), a
    stage, annotate's sub-packages, the report."""
    parts = module.split(".")[1:]
    if not parts or parts[0] in ("cli", "__main__"):
        return "command line"
    if parts[0] == "stages" and len(parts) > 1:
        sub = parts[2] if parts[1] == "annotate" and len(parts) > 2 else None
        return f"annotate.{sub}" if sub in ANNOTATE_ROOMS else parts[1]
    return parts[0]


def test_the_rooms_form_no_circle():
    """The drawing of the house by rooms (the imports between rooms) has no circle: every arrow runs one way."""
    found = modules()
    arrows: dict[str, set[str]] = {}
    for name, path in found.items():
        for target in module_imports(path, set(found)):
            if room(name) != room(target):
                arrows.setdefault(room(name), set()).add(room(target))
    rooms = {room(name) for name in found}
    assert len(rooms) >= 12 and sum(map(len, arrows.values())) >= 30
    assert cycles({r: arrows.get(r, set()) for r in rooms}) == []


def bench_modules() -> dict[str, Path]:
    """Import name -> file for every module of bench/."""
    return {
        ".".join(p.relative_to(REPO).with_suffix("").parts): p
        for p in BENCH.rglob("*.py")
        if "__pycache__" not in p.parts
    }


def test_bench_is_grouped_by_subject():
    """Every bench lies in one subject's folder (BENCH_SUBJECTS above: a new bench goes into the folder of the stage
    it measures, or pipeline/ for whole runs and the frame, gpu/ for what needs the GPU lease); only what every
    subject shares (BENCH_SHARED) and the checks of every bench at once (test_*.py) stay at bench/'s top, and no
    subject folder nests another. A bench's own tests sit beside it (bench/<subject>/test_<name>.py)."""
    top = sorted(p.name for p in BENCH.iterdir() if p.is_file() and p.suffix in (".py", ".sh"))
    top = [name for name in top if not name.startswith("test_")]  # the checks of every bench at once
    assert set(top) <= BENCH_SHARED, f"bench/: modules outside a subject folder: {sorted(set(top) - BENCH_SHARED)}"
    folders = {p.name for p in BENCH.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == BENCH_SUBJECTS
    nested = [str(p.relative_to(REPO)) for p in BENCH.rglob("*.py") if len(p.relative_to(BENCH).parts) > 2]
    assert nested == []


def test_bench_subjects_form_no_circle():
    """The benches' imports between subjects run one way (whole runs and the GPU run use embed's and mine's data
    makers, never the reverse)."""
    found = bench_modules()
    arrows: dict[str, set[str]] = {}
    for name, path in found.items():
        for target in module_imports(path, set(found)):
            source_room, target_room = name.split(".")[1], target.split(".")[1]
            if source_room != target_room and f"{target_room}.py" not in BENCH_SHARED:
                arrows.setdefault(source_room, set()).add(target_room)
    rooms = {name.split(".")[1] for name in found}
    assert cycles({r: arrows.get(r, set()) for r in rooms}) == []


def test_the_rater_models_decision_sits_above_its_em():
    """aggregation/ holds the label policies (aggregators.py) and the rater model's decision, how far each worker
    is trusted and by what evidence, in at most five modules; the EM they run (aggregation/em/) imports none of them
    but thresholds.py, where every number the model decides by is named."""
    found = modules()
    graph = {name: module_imports(path, set(found)) - {name} for name, path in found.items()}
    aggregation = "csts_pipeline.stages.annotate.aggregation"
    decision = sorted(
        p.stem for p in (PACKAGE / "stages" / "annotate" / "aggregation").glob("*.py") if p.stem != "__init__"
    )
    assert "thresholds" in decision and len(set(decision) - {"aggregators"}) <= 5, decision
    allowed = {f"{aggregation}.thresholds", aggregation}
    upward = {
        n: sorted(
            i for i in g if i.startswith(aggregation) and not i.startswith(f"{aggregation}.em") and i not in allowed
        )
        for n, g in graph.items()
        if n.startswith(f"{aggregation}.em")
    }
    assert {n: i for n, i in upward.items() if i} == {}
    assert any(i.startswith(f"{aggregation}.em") for n, g in graph.items() if n == f"{aggregation}.trust" for i in g)
