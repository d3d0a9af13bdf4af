"""paperlib's three layers, read from the source: the method (any model, torch only), the paper's side (its
models, their purge, magnitude pruning, its printed numbers) and the experiment harness. Each imports only the
layers below it, the package has no import circle, and every library a layer imports is declared."""

import ast
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "paperlib"
#: Bottom to top: a layer may import its own modules and those of the layers before it.
LAYERS = ("method", "paper", "harness")
#: Import name -> the distribution that provides it, as pyproject.toml declares it.
DISTRIBUTIONS = {"torch": "torch", "torchvision": "torchvision", "numpy": "numpy", "pandas": "pandas", "tqdm": "tqdm",
                 "yaml": "pyyaml", "matplotlib": "matplotlib", "papermill": "papermill", "IPython": "ipython",
                 "PIL": "pillow", "docutils": "docutils", "submitit": "submitit", "zmq": "pyzmq",
                 "traitlets": "traitlets"}


def modules() -> dict[str, Path]:
    """``layer.module`` -> its file, for every module of the three layers."""
    return {f"{path.parent.name}.{path.stem}": path for layer in LAYERS for path in (PACKAGE / layer).glob("*.py")
            if path.stem != "__init__"}


def imported(path: Path) -> tuple[set[str], set[str]]:
    """The package's modules a file imports (as ``layer.module``, at the top or inside a function) and the
    other top-level names it imports (libraries; the standard library's and paperlib's own left out)."""
    layer = path.parent.name
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name.split(".")
                if name[0] == "paperlib":
                    inside.add(".".join(name[1:3]))
                else:
                    outside.add(name[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                name = node.module.split(".")
                if name[0] != "paperlib":
                    outside.add(name[0])
                    continue
                parts = name[1:]
            else:
                parts = ([layer] if node.level == 1 else []) + (node.module.split(".") if node.module else [])
            if len(parts) >= 2:
                inside.add(".".join(parts[:2]))
            elif len(parts) == 1 and parts[0] in LAYERS:  # from ..method import gates
                inside |= {f"{parts[0]}.{alias.name}" for alias in node.names}
            elif len(parts) == 1:  # from .x import y, inside a layer
                inside.add(f"{layer}.{parts[0]}")
            else:  # from .. import __version__
                inside |= {f"{layer}.{alias.name}" for alias in node.names if f"{layer}.{alias.name}" in modules()}
    return inside & set(modules()), outside - set(sys.stdlib_module_names) - {"paperlib"}


def test_the_folders_are_the_three_layers_and_nothing_else():
    assert sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py") == ["__init__.py"]
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(LAYERS)
    assert all((PACKAGE / layer / "__init__.py").exists() for layer in LAYERS)


@pytest.mark.parametrize("name", sorted(modules()))
def test_a_module_imports_only_its_own_layer_and_those_below(name):
    layer = name.split(".")[0]
    allowed = set(LAYERS[:LAYERS.index(layer) + 1])
    inside, _ = imported(modules()[name])
    upward = sorted(m for m in inside if m.split(".")[0] not in allowed)
    assert not upward, f"paperlib/{name.replace('.', '/')}.py ({layer}) imports {upward} from a layer above it"


def test_the_method_imports_only_torch():
    libraries = {lib for name, path in modules().items() if name.startswith("method.") for lib in imported(path)[1]}
    assert libraries == {"torch"}


def test_every_library_a_layer_imports_is_declared_in_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {req.split("==")[0] for req in project["dependencies"]}
    extras = {req.split("==")[0] for group in project["optional-dependencies"].values() for req in group}
    for name, path in modules().items():
        for library in imported(path)[1]:
            assert library in DISTRIBUTIONS, f"paperlib/{name.replace('.', '/')}.py imports {library}: add it above"
            declared = core if name.split(".")[0] in ("method", "paper") else core | extras
            assert DISTRIBUTIONS[library] in declared, f"{name} imports {library}, which pyproject.toml does not declare"


def test_the_package_never_imports_the_book():
    for name, path in modules().items():
        assert "analysis" not in imported(path)[1], f"paperlib/{name}: the book's analysis imports paperlib, not back"


def test_the_import_checker_sees_upward_and_library_imports(tmp_path):
    # the checker itself: a method module importing the harness, and numpy, must be seen
    fake = tmp_path / "method" / "bad.py"
    fake.parent.mkdir()
    fake.write_text("import numpy as np\nfrom ..harness.presets import resolve_config\n"
                    "def f():\n    from ..harness import records\n")
    inside, outside = imported(fake)
    assert {"harness.presets", "harness.records"} <= inside and outside == {"numpy"}


def test_no_module_of_paperlib_imports_itself_through_others():
    graph = {name: imported(path)[0] - {name} for name, path in modules().items()}
    assert "harness.training" in graph["harness.run"] and "harness.run" not in graph["harness.distributed"]
    done, circles = set(), []

    def visit(module, path):
        for other in graph[module]:
            if other in path:
                circles.append(path[path.index(other):] + [other])
            elif other not in done:
                visit(other, path + [other])
        done.add(module)

    for module in sorted(graph):
        visit(module, [module])
    assert not circles, f"import circles: {circles}"


def test_no_module_imports_a_module_that_the_package_shadows_with_a_function():
    # paperlib/__init__.py binds paperlib.purge and paperlib.sparsify to functions: `from paperlib import purge`
    # gets the function, so inside the package the modules are imported by their layer's path
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "paperlib":
                assert not {"purge", "sparsify"} & {a.name for a in node.names}, f"{path}: from paperlib import purge"
