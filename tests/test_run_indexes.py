"""The run indexes (paperlib.harness.run_indexes), on the records of runs/: every run once, in groups titled from
studies.FOLDERS, a long folder in parts, the main table's group open, runs and protocols named in words."""

import dataclasses
import re

import pandas as pd
import pytest

from paperlib.harness import protocols, records, run_indexes, studies

INDEX = "runs_dynamics"  # a small index: two folders, a dozen runs


def _show(frame: pd.DataFrame):
    return frame.style  # what the pages pass (report.show) returns a Styler too


@pytest.fixture(scope="module")
def groups():
    return run_indexes.index_groups(INDEX)


def test_every_run_of_an_index_is_listed_once_under_its_folders_title(groups):
    assert [g.experiment for g in groups] == sorted(studies.indexed_experiments(INDEX),
                                                    key=lambda e: not studies.folder(e).main)
    for group in groups:
        assert group.title == studies.folder(group.experiment).title
        assert group.runs == len(records.find_records(group.experiment))
        assert group.pages == studies.folder_pages(group.experiment)


def test_the_main_tables_group_is_open_and_the_others_folded(groups):
    main = [g for g in groups if studies.folder(g.experiment).main]
    assert groups[0].unfolded and [g for g in groups if g.unfolded] == (main or groups[:1])
    html = run_indexes.group_html(groups[0], _show)
    assert html.startswith("<details open") and groups[0].title in html
    assert run_indexes.group_html(groups[1], _show).startswith("<details ") and not groups[1].unfolded


def test_a_groups_line_links_the_pages_that_show_it(groups):
    html = run_indexes.group_html(groups[0], _show)
    for page in groups[0].pages:
        assert f'{page}.html"' in html


def test_runs_and_protocols_are_named_in_words(groups):
    raw = re.compile(r"\b(True|False|cpu2|preset|stand-in)\b|_lr|fan_out")
    for group in groups:
        for label, rows in group.parts:
            assert not raw.search(label)
            for _, row in rows.iterrows():
                assert not raw.search(row["run"].split(">", 1)[-1]), row["run"]
                assert row["protocol"].split(",")[0] in protocols.DEFINITIONS
    table = run_indexes.protocol_table(groups)
    assert set(table["protocol"]) <= set(protocols.DEFINITIONS) and table["what it is"].str.len().min() > 0


def test_a_split_folder_is_listed_in_parts_named_by_their_values(monkeypatch):
    folder = studies.folder("dual_restarts")
    monkeypatch.setitem(studies.FOLDERS, "dual_restarts",
                        dataclasses.replace(folder, split=("dual_restarts", "preset")))
    group = run_indexes.folder_group("dual_restarts")
    labels = [label for label, _ in group.parts]
    assert len(labels) == len(set(labels)) > 1 and sum(len(rows) for _, rows in group.parts) == group.runs
    assert all(re.fullmatch(r"dual restarts: (yes|no), [\w ]+ protocol", label) for label in labels), labels
    html = run_indexes.group_html(group, _show)
    assert html.count("<details") == 1 + len(labels)


def test_a_folder_without_records_says_so():
    group = run_indexes.Group("nothing", "A title", "A line.", [], [])
    assert group.runs == 0 and "<details" in run_indexes.group_html(group, _show)
