"""The package's code stays readable at a glance: no function over 60 lines, and no call passing more than 5
arguments by position (a sixth argument without its name is one a reader must count to). Read with `ast`, so
nothing is imported."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "csts_pipeline"
MAX_LINES = 60
MAX_POSITIONAL = 5

# calls whose positional arguments have no names to give: %-style logging (the values of the format string, in its
# order, formatted only when the line is shown) and builtins that take any number of arguments
LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical"}
VARIADIC = {"zip", "print", "min", "max", "map"}


def _positional(call: ast.Call) -> int:
    return sum(not isinstance(arg, ast.Starred) for arg in call.args)


def _exempt(call: ast.Call) -> bool:
    """A %-style logging call (`log.info("... %d ...", n, ...)`) or a variadic builtin."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in VARIADIC
    first = call.args[0] if call.args else None
    formatted = isinstance(first, ast.Constant) and isinstance(first.value, str) and "%" in first.value
    return isinstance(func, ast.Attribute) and func.attr in LOG_METHODS and formatted


def too_big() -> Counter[tuple[str, str, str]]:
    """(file, "def", name) of each function over MAX_LINES lines and (file, "call", callee) of each call passing
    more than MAX_POSITIONAL arguments by position, counted."""
    found: Counter[tuple[str, str, str]] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_LINES:
                    found[(name, "def", node.name)] += 1
            elif isinstance(node, ast.Call) and _positional(node) > MAX_POSITIONAL and not _exempt(node):
                found[(name, "call", ast.unparse(node.func))] += 1
    return found


def test_no_long_function_and_no_call_with_more_than_five_positional_arguments():
    over = dict(too_big())
    assert not over, (
        f"functions over {MAX_LINES} lines ('def') and calls passing more than {MAX_POSITIONAL} arguments by "
        f"position ('call'): split the function; make the callee's options keyword-only (`*`) and name them: {over}"
    )
