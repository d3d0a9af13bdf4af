"""Sphinx extension of the book (``_config.yml``, ``sphinx: extra_extensions``): the pages of run notebooks are titled
by their run (:func:`paperlib.harness.run_pages.run_title`) and say that they are shown as they ran."""

from . import records, run_pages
from .run_pages import run_page_remarks

RUN_PAGE_PARTS = 4  # runs/<experiment>/<run name>/notebook


def _is_run_page(docname: str) -> bool:
    parts = docname.split("/")
    return len(parts) == RUN_PAGE_PARTS and parts[0] == "runs" and parts[-1] == "notebook"


def _title_run_page(app, doctree) -> None:
    """Name a run notebook's page after its run (:func:`paperlib.harness.run_pages.run_title`) in the navigation, which
    would otherwise take the heading of a notebook executed before its header was written (its template's, the same for
    every run of a grid), and say under the heading that the page is shown as it ran, and whether it was resumed or its
    settings are superseded."""
    from docutils import nodes

    docname = app.env.docname
    if not _is_run_page(docname):
        return
    _, experiment, run, _ = docname.split("/")
    run_dir = records.runs_dir() / experiment / run
    name = f"{experiment}/{run}"
    if records.record_status(run_dir) == "complete":
        name = run_pages.run_title(records.record_params(run_dir))
    app.env.titles[docname] = nodes.title("", name)
    toc = app.env.tocs.get(docname)  # the navigation shows a page by its toc's first entry
    first = next(iter(toc.findall(nodes.reference)), None) if toc is not None else None
    if first is not None:
        first.children = [nodes.Text(name)]
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is not None:
        note = nodes.paragraph()
        note += nodes.emphasis("", "The executed notebook of this run, shown as it ran (the book does not "
                                   f"re-execute it).{run_page_remarks(run_dir)}")
        section.insert(1, note)
    for cell in doctree.findall(nodes.container):  # the training log scrolls in a box instead of filling screens
        if "cell" in cell["classes"] and any("run_experiment(" in block.astext()
                                             for block in cell.findall(nodes.literal_block)):
            cell["classes"].append("tag_scroll-output")



def setup(app):
    """Sphinx extension: titles for the pages of run notebooks (see :func:`_title_run_page`)."""
    app.connect("doctree-read", _title_run_page, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
