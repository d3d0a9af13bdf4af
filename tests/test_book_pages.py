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


def _toc_globs(entries) -> list[str]:
    globs = []
    for entry in entries:
        if isinstance(entry, dict):
            globs += [entry["glob"]] if "glob" in entry else []
            for key in ("parts", "chapters", "sections"):
                globs += _toc_globs(entry.get(key, []))
    return globs


def test_every_run_notebook_a_result_table_links_to_is_a_page(monkeypatch):
    """The run notebooks of the grids that result pages cite are pages (a glob of _toc.yml takes each),
    including runs not made yet: a sweep that commits the first record of an experiment folder must not
    leave its notebook out of the book."""
    from fnmatch import fnmatch

    monkeypatch.delenv("PAPERLIB_RUNS", raising=False)

    import yaml

    from paperlib import comparison, report

    globs = _toc_globs([yaml.safe_load((ROOT / "_toc.yml").read_text())])
    grids = sorted({g for page in RESULT_PAGES for g in re.findall(r"grids/[\w.-]+\.yaml", page.read_text())}
                   | {g for source in comparison.TABLES.values() for g in source.grids})
    assert grids and globs
    linked = [run_dir / "notebook" for grid in grids for _, run_dir in report.grid_runs(grid)]
    assert linked
    missing = [str(p.relative_to(ROOT)) for p in linked
               if not any(fnmatch(p.relative_to(ROOT).as_posix(), pattern) for pattern in globs)]
    assert not missing, f"add a glob for these to _toc.yml: {missing}"
