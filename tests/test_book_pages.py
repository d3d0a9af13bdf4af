"""The book's executable pages (results and teaching) run top to bottom, on the records committed in runs/."""

import re
from pathlib import Path

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p for p in (ROOT / "book").glob("*.md") if "{code-cell}" in p.read_text())
# A code cell's body after its directive options (":tags: [hide-input]" lines).
CODE_CELL = re.compile(r"```\{code-cell\}[^\n]*\n(?::[^\n]*\n)*(.*?)```", re.DOTALL)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_runs(page, monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.chdir(ROOT / "book")  # where jupyter-book executes the page
    monkeypatch.syspath_prepend(str(ROOT / "book"))  # its kernel imports from there: book/analysis
    monkeypatch.delenv("PAPERLIB_RUNS", raising=False)
    cells = CODE_CELL.findall(page.read_text())
    assert cells, f"{page.name} has no code cells"
    namespace = {}
    for cell in cells:
        exec(compile(cell, str(page), "exec"), namespace)
    matplotlib.pyplot.close("all")


RESULT_PAGES = sorted((ROOT / "book").glob("results_*.md"))


@pytest.mark.parametrize("page", RESULT_PAGES, ids=lambda p: p.name)
def test_result_pages_hide_their_code(page):
    """Readers scan tables and figures; the report code stays one click away (tag hide-input)."""
    headers = re.findall(r"```\{code-cell\}[^\n]*\n((?::[^\n]*\n)*)", page.read_text())
    assert headers and all("hide-input" in header for header in headers)


TEACHING = [ROOT / "book" / f"{name}.ipynb" for name in ("lagrangian", "gates", "purging")]


@pytest.mark.parametrize("notebook", TEACHING, ids=lambda p: p.name)
def test_teaching_pages_fold_their_code_and_end_with_exercises(notebook):
    """Every code cell is folded or removed, and the page ends with 2-3 exercises whose solutions fold."""
    import json

    cells = json.loads(notebook.read_text())["cells"]
    folded = {"hide-input", "remove-input", "remove-cell"}
    shown = [i for i, c in enumerate(cells)
             if c["cell_type"] == "code" and not folded & set(c["metadata"].get("tags", []))]
    assert not shown, f"{notebook.name}: code cells {shown} show their code (tag them hide-input)"
    markdown = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    start = next(i for i, text in enumerate(markdown) if re.search(r"^## Exercises$", text, re.M))
    exercises = "\n".join(markdown[start:])
    solutions = re.findall(r"^:::\{admonition\} Solution\n:class: dropdown$", exercises, re.M)
    assert 2 <= len(re.findall(r"^\*\*Exercise \d", exercises, re.M)) == len(solutions) <= 3


RUN_COMMAND = re.compile(r"python -m paperlib\.harness\.run ([^`\n]+)`")


def test_every_run_command_a_page_names_resolves_to_a_configuration():
    """A command a page gives for a run it did not make must run as written: its parameters parse and its preset
    knows the dataset and model (a command without ``dataset=cifar10`` fails on a WideResNet)."""
    from paperlib.harness.presets import resolve_config
    from paperlib.harness.run import parse

    commands = [match for page in (ROOT / "book").glob("*.md") for match in RUN_COMMAND.findall(page.read_text())]
    assert commands, "no page names a paperlib.harness.run command: the pattern no longer finds them"
    for command in commands:
        resolve_config(**parse(command.split()))
