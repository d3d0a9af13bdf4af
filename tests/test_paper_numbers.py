"""The paper's numbers (Table 1, Eq. 9, Appendix E): made from its LaTeX, and the only ones the book names."""

import json
import re
from pathlib import Path

import pytest

from paperlib.paper import paper_numbers

ROOT = Path(__file__).resolve().parents[1]
TEX = ROOT.parent / "shared" / "paper" / "controlled_sparsity.tex"


@pytest.mark.skipif(not TEX.exists(), reason="the paper's LaTeX (../shared/paper) is not beside the repository")
def test_the_committed_numbers_are_those_the_latex_gives(tmp_path):
    out = paper_numbers.write_numbers(TEX, tmp_path / "numbers.csv")
    committed = (ROOT / "paperlib" / "paper" / paper_numbers.NUMBERS_FILE).read_text()
    assert out.read_text() == committed, "rewrite it: python -m paperlib.paper.paper_numbers ../shared/paper/controlled_sparsity.tex"


def test_numbers_a_reader_of_the_pdf_sees():
    ref = paper_numbers.ref
    assert [ref(f"eq:{name}") for name in ("pen_original", "dual_restart", "hard_concrete", "exp_l0_closed_form",
                                           "validation_gates", "rho_init_prob", "detach_gate")] == [
        "Eq. 1", "Eq. 6", "Eq. 7", "Eq. 8", "Eq. 9", "Eq. 11", "Eq. 13"]
    assert ref("eq:gda_updates") == "Eq. 5"  # its label sits on an unnumbered row of the align
    assert max(int(n) for kind, n in paper_numbers.given() if kind == "equation") == 13
    assert [ref(label) for label in ("tab:mnist", "tab:model_stats", "tab:optim_wrn", "tab:cifar10_control")] == [
        "Table 1", "Table 4", "Table 6", "Table 13"]
    assert [ref(label) for label in ("fig:cifar10_comparison", "fig:increase_lr", "fig:wd_overpen")] == [
        "Figure 4", "Figure 7", "Figure 8"]  # two \captionof in one figure environment
    assert [ref(label) for label in ("sec:experiments:large_models", "app:bisection", "app:exp_details:cifar10")] == [
        "§5.5", "Appendix E", "Appendix J.4"]
    assert {("section", "4"), ("appendix", "J.7")} <= paper_numbers.given()  # numbered, without a label
    with pytest.raises(ValueError, match="no label 'tab:nothing'"):
        ref("tab:nothing")


def test_references_are_read_as_a_reader_reads_them():
    found = paper_numbers.references("Tables 7-9 and eqs. 7 and 8 (App. J.2, §5.5, §A.1); Figure 4. Table 1.")
    assert [(kind, number) for kind, number, _ in found] == [
        ("table", "7"), ("table", "9"), ("equation", "7"), ("equation", "8"), ("appendix", "J.2"),
        ("section", "5.5"), ("appendix", "A.1"), ("figure", "4"), ("table", "1")]
    assert [n for _, n, _ in paper_numbers.references("(30% in Fig. 2, 30% and 70% in Fig. 6)")] == ["2", "6"]
    assert paper_numbers.unknown_references("eq. 14, Table 23, App. M, Figure 4, §5.7") == [
        "eq. 14 (equation 14)", "Table 23 (table 23)", "App. M (appendix M)", "§5.7 (section 5.7)"]


def test_a_label_in_prose_becomes_its_number_and_the_word_before_it_is_not_written_twice():
    prose = ("(§`sec:experiments:large_models`, Fig. `fig:cifar10_comparison`, App. `app:all_comparisons:cifar10`) "
             "at their medians (eq. `eq:validation_gates`), as in `tab:mnist`; `grouping=\"layer\"` stays.")
    assert paper_numbers.cite_by_number(prose) == (
        "(§5.5, Figure 4, Appendix K.2) at their medians (Eq. 9), as in Table 1; `grouping=\"layer\"` stays.")
    with pytest.raises(ValueError, match="no label 'eq:nothing'"):
        paper_numbers.cite_by_number("eq. `eq:nothing`")


def _prose(path: Path) -> str:
    """What a reader reads of a page: a notebook's markdown cells, a MyST page outside its code cells."""
    if path.suffix == ".ipynb":
        return "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]
                         if cell["cell_type"] == "markdown")
    return re.sub(r"```\{code-cell\}.*?```", "", path.read_text(), flags=re.DOTALL)


READ = sorted([*ROOT.glob("book/*.md"), *ROOT.glob("book/*.ipynb"), *ROOT.glob("paperlib/*.py"),
               *ROOT.glob("grids/*.yaml"), ROOT / "README.md", *ROOT.glob("tests/*.py")])


@pytest.mark.parametrize("path", READ, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_book_names_only_numbers_the_paper_gives(path):
    text = path.read_text() if path.suffix != ".ipynb" else _prose(path)
    if path.name == "test_paper_numbers.py":
        text = ""  # its examples of numbers the paper lacks are on purpose
    assert not paper_numbers.unknown_references(text)


PAGES = sorted([*ROOT.glob("book/*.md"), *ROOT.glob("book/*.ipynb"), *ROOT.glob("runs/*/*/notebook.ipynb")])


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_name_the_papers_parts_by_number_not_by_latex_label(path):
    prose = _prose(path)
    labels = re.findall(r"`((?:tab|fig|eq|app|sec):[\w:]+)`", prose)
    assert not labels, f"write {[paper_numbers.ref(label) for label in labels]} (paperlib.paper.paper_numbers.ref)"
    assert not paper_numbers.unknown_references(prose)
