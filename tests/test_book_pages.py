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
