"""The package's import graph has no circle: each module can be read knowing only the ones below it."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "paperlib"


def imports_within_the_package() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at the top or inside a function (``from .x import y``)."""
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    graph = {}
    for path in PACKAGE.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found |= {node.module.split(".")[0]} if node.module else {alias.name for alias in node.names}
        graph[path.stem] = found & modules
    return graph


def test_no_module_of_paperlib_imports_itself_through_others():
    graph = imports_within_the_package()
    assert "training" in graph["run"] and "run" not in graph["distributed"]  # the launcher is the command line's
    done, circles = set(), []

    def visit(module, path):
        for imported in graph[module]:
            if imported in path:
                circles.append(path[path.index(imported):] + [imported])
            elif imported not in done:
                visit(imported, path + [imported])
        done.add(module)

    for module in sorted(graph):
        visit(module, [module])
    assert not circles, f"import circles: {circles}"


def test_no_module_imports_a_module_that_the_package_shadows_with_a_function():
    # paperlib/__init__.py binds paperlib.purge and paperlib.sparsify to functions; `from . import purge` in a
    # module of the package would then get the function, not the module
    shadowed = {"purge", "sparsify"}
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
                assert not shadowed & {alias.name for alias in node.names}, f"{path.name}: from . import {shadowed}"
