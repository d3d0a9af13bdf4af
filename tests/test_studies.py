"""paperlib.harness.studies: every grid belongs to one declared study, and the table of contents agrees with it."""

from pathlib import Path

import pytest
import yaml

from paperlib.harness import studies
from paperlib.paper import paper_results
from analysis import report
from paperlib.harness.vocabulary import PRESETS

ROOT = Path(__file__).resolve().parents[1]


def _toc_sections(entries, page: str):
    """The ``sections`` of ``page`` in a parsed _toc.yml (None if the page is not there)."""
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        if entry.get("file") == page:
            return entry.get("sections", [])
        for key in ("parts", "chapters", "sections"):
            found = _toc_sections(entry.get(key, []), page)
            if found is not None:
                return found
    return None


def test_every_grid_file_belongs_to_a_study_and_every_study_grid_exists():
    on_disk = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "grids").glob("*.yaml"))
    assert sorted(studies.grids(*studies.STUDIES)) == on_disk


@pytest.mark.parametrize("grid", studies.grids(*studies.STUDIES))
def test_every_grid_names_its_preset_and_experiment(grid):
    base = yaml.safe_load((ROOT / grid).read_text())["base"]
    assert base.get("preset") in PRESETS and base.get("preset") != "auto", f"{grid} must name its preset in base: never auto"
    assert studies.grid_experiment(grid) == base["experiment"] and studies.grid_preset(grid) == base["preset"]


def test_every_paper_table_is_one_the_paper_prints_and_every_page_exists():
    labels = set(paper_results.paper_results()["table"])
    assert set(studies.TABLES) <= labels
    for name, item in studies.STUDIES.items():
        assert (ROOT / "book" / f"{item.page}.md").exists(), f"{name}: no page book/{item.page}.md"
        assert any(item.page in pages for pages in studies.RUN_INDEXES.values()), f"{name}: no run index lists it"


@pytest.mark.parametrize("index", studies.RUN_INDEXES)
def test_the_table_of_contents_lists_under_each_run_index_exactly_its_studies_runs(index):
    """_toc.yml is static YAML for Jupyter Book; this keeps it what the studies say, in their order."""
    sections = _toc_sections([yaml.safe_load((ROOT / "_toc.yml").read_text())], f"book/{index}")
    assert sections is not None, f"_toc.yml has no page book/{index}"
    globs = [item["glob"] for item in sections if "glob" in item]
    expected = [f"runs/{experiment}/*/notebook" for experiment in studies.indexed_experiments(index)]
    assert globs == expected, "under book/" + index + " _toc.yml should read:\n" + "\n".join(
        f"              - glob: {glob}" for glob in expected)


def test_every_run_a_study_asks_for_is_a_page_of_its_index():
    """A sweep that commits the first record of an experiment folder must not leave its notebook out."""
    indexed = {experiment for index in studies.RUN_INDEXES for experiment in studies.indexed_experiments(index)}
    folders = {run_dir.parent.name for grid in studies.grids(*studies.STUDIES) for _, run_dir in report.grid_runs(grid)}
    assert folders and folders <= indexed


def test_grids_select_by_preset_and_keep_each_grid_once():
    assert studies.grids("tab:cifar10_control", preset="cpu") == ("grids/cifar10_control.yaml",
                                                                  "grids/cifar10_control_seeds.yaml")
    assert studies.grids("tab:mnist_unstructured_comparison_mlp", "tab:mnist_unstructured_comparison_lenet") == \
        studies.study("tab:mnist_unstructured_comparison_mlp").grids
    assert studies.indexed_experiments("runs_dual_optimizers") == ["dual_optimizers"]
    with pytest.raises(KeyError, match="no study is called 'tab:nothing'"):
        studies.grids("tab:nothing")


@pytest.mark.parametrize("name", sorted(studies.TABLES))
def test_no_record_belongs_to_two_grids_of_a_table(name):
    # A table's rows average the records of all its grids: a run asked for by two of them would count twice.
    seen = {}
    for grid in studies.study(name).grids:
        for _, folder in report.grid_runs(grid):
            assert folder not in seen, f"{folder} is asked for by {seen[folder]} and {grid}"
            seen[folder] = grid


def test_every_experiment_folder_has_a_title_and_a_line():
    """The run indexes title every folder of runs/ and every folder a grid writes to from studies.FOLDERS."""
    on_disk = {path.name for path in (ROOT / "runs").iterdir() if path.is_dir()}
    asked = {studies.grid_experiment(grid) for grid in studies.grids(*studies.STUDIES)}
    for experiment in on_disk | asked:
        folder = studies.folder(experiment)
        assert folder.title.strip() and folder.about.strip(), experiment
    assert not set(studies.FOLDERS) - on_disk - asked, "a title for a folder that nothing writes to"
    titles = [folder.title for folder in studies.FOLDERS.values()]
    assert len(set(titles)) == len(titles), "two folders share a title"
    with pytest.raises(KeyError, match="studies.FOLDERS"):
        studies.folder("no_such_folder")


def test_a_folder_names_the_pages_and_paper_tables_its_studies_serve():
    assert studies.folder_pages("mlp_control") == [studies.study("tab:mlp_control").page]
    refs = studies.folder_refs("mlp_control")
    assert refs and all(ref.startswith("Table") for ref in refs)
    assert studies.folder_refs("lenet5_collapse") == []  # a study of the book's own serves no table of the paper
    for index in studies.RUN_INDEXES:
        main = [e for e in studies.indexed_experiments(index) if studies.folder(e).main]
        assert len(main) <= 1, f"{index}: one main table at most, {main}"
