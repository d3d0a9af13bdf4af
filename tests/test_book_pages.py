"""The book's executable pages (results and teaching) run top to bottom, on the records committed in runs/."""

import re
from pathlib import Path

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p for p in (ROOT / "book").glob("*.md") if "{code-cell}" in p.read_text())
CODE_CELL = re.compile(r"```\{code-cell\}[^\n]*\n(.*?)```", re.DOTALL)


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
