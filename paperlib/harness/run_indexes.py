"""The run indexes of the book (``book/runs_*.md``): every record of an index's experiment folders, in groups.

An index lists the folders of :func:`paperlib.harness.studies.indexed_experiments`, one group each, as
:data:`paperlib.harness.studies.FOLDERS` titles and describes them, with the paper's tables they serve and links to the
pages that show them; a folder with a ``split`` is listed in parts (``constrained, model-wise``). A group that holds its
page's main table comes first and unfolded (else the first group is unfolded). Each run is named by what it trains and
by its protocol, linked to its executed notebook. In a page: ``run_indexes.groups_html(run_indexes.index_groups(
"runs_mnist"), report.show)``.
"""

import html
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import plots, presets, protocols, records, run_pages, studies
from .index import device_kind
from .protocols import protocol_name, record_protocol

#: The order of a split's parts, by parameter; values not listed come after, in the order found.
PART_ORDER = {"method": ["constrained", "penalized", "dense", "magnitude_pruning"], "grouping": ["model", "layer"],
              "dual_optimizer": ["gradient_ascent", "augmented_lagrangian", "nupi"],
              "model": ["mlp", "lenet5"]}


@dataclass
class Group:
    """One experiment folder of an index: its title and line, the paper's tables it serves, the pages that show it, its
    runs in parts (``[("", rows)]`` when it is not split) and whether the index shows it unfolded."""

    experiment: str
    title: str
    about: str
    refs: list[str]
    pages: list[str]
    parts: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    unfolded: bool = False

    @property
    def runs(self) -> int:
        return sum(len(rows) for _, rows in self.parts)


def page_link(page: str) -> str:
    """An HTML link to the book page ``book/<page>.md``, named by its title, relative to the working directory (the
    folder of the page being executed)."""
    target = records.project_root() / "book" / f"{page}.html"
    return f'<a href="{Path(os.path.relpath(target, Path.cwd())).as_posix()}">{run_pages.page_title(page)}</a>'


def notebook_link(run_dir: Path, text: str) -> str:
    """An HTML link to the book page of a run's executed notebook, or ``text`` alone if it has none."""
    notebook = Path(run_dir) / "notebook.ipynb"
    if not notebook.exists():
        return text
    return f'<a href="{Path(os.path.relpath(notebook.with_suffix(".html"), Path.cwd())).as_posix()}">{text}</a>'


def part_label(params: dict, split: tuple[str, ...]) -> str:
    """The part of a split folder a run belongs to, in words: ``constrained, model-wise``, ``LeNet5``, ``nuPI, MLP`` (no
    grouping for a dense or pruned run, which has none)."""
    words = []
    for name in split:
        value = presets.parameter(params, name)
        if name == "grouping" and params.get("method") in ("dense", "magnitude_pruning"):
            continue
        words.append({"method": lambda v: v.replace("_", " "),
                      "grouping": lambda v: run_pages.GROUPING_LABELS.get(v, v),
                      "model": run_pages.model_label,
                      "dual_optimizer": lambda v: run_pages.DUAL_OPTIMIZER_LABELS.get(v, v),
                      "preset": lambda v: protocol_name(v, params.get("dataset")),
                      "sparsity": str}.get(name, lambda v: run_pages.changed(name, v))(value))
    return ", ".join(words)


def _part_key(params: dict, split: tuple[str, ...]) -> tuple:
    key = []
    for name in split:
        order = PART_ORDER.get(name, [])
        value = presets.parameter(params, name)
        key.append(order.index(value) if value in order else len(order))
    return tuple(key)


def run_row(run_dir: Path) -> dict:
    """One run of an index: its label linked to its notebook, its protocol, epochs, status and final numbers, and notes
    a reader needs before trusting the row (``resumed``: its log starts mid-training; ``on GPU``)."""
    metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    if metrics.get("kind") == "bisection search":  # its trainings have their own rows
        return {"run": notebook_link(run_dir, run_pages.run_title(metrics).split(" — ")[0]),
                "protocol": protocol_name(metrics["preset"], "mnist"),
                "epochs": f"{metrics['epochs']} a training", "status": metrics["status"],
                "notes": f"{metrics['num_trainings']} trainings"}
    record = records.load_record(run_dir)
    params = record["params"]
    notes = []
    if metrics.get("git_commits_resumed_at"):
        notes.append("resumed")
    if device_kind(metrics.get("device")) == "GPU":
        notes.append("on GPU")
    return {"run": notebook_link(run_dir, run_pages.run_label(params)), "protocol": record_protocol(params),
            "epochs": f"{metrics['epochs_completed']} of {metrics['epochs_planned']}", "status": metrics["status"],
            **{name: value for name, value in plots.result_columns(record).items() if name != "epochs"},
            "notes": ", ".join(notes)}


def folder_group(experiment: str) -> Group:
    """The group of an index for the experiment folder ``experiment``: its runs, in parts if it is split."""
    about = studies.folder(experiment)
    parts: dict[str, tuple[tuple, list[dict]]] = {}
    found = [(run_dir, records.record_params(run_dir)) for run_dir in records.find_records(experiment)]
    for run_dir, params in sorted(found, key=lambda item: "method" in item[1]):  # bisection searches first
        split = about.split if "method" in params else ()
        label = part_label(params, split)
        parts.setdefault(label, (_part_key(params, split), []))[1].append(run_row(run_dir))
    ordered = sorted(parts.items(), key=lambda item: item[1][0])
    return Group(experiment, about.title, about.about, studies.folder_refs(experiment),
                 studies.folder_pages(experiment),
                 [(label, pd.DataFrame(sorted(rows, key=_protocol_rank)).dropna(axis=1, how="all"))
                  for label, (_, rows) in ordered])


def _protocol_rank(row: dict) -> int:
    """A row's place by its protocol, in the order of :data:`~paperlib.harness.protocols.NAMES` (the paper's first);
    rows of one protocol keep the order of their run names."""
    names = list(dict.fromkeys(protocols.NAMES.values()))
    base = row["protocol"].split(",")[0]
    return names.index(base) if base in names else len(names)


def index_groups(index: str) -> list[Group]:
    """The groups of the run index ``index`` (``runs_mnist``): a main table's folders first, unfolded (or, if none is,
    the first folder), then the others in the order of :data:`~paperlib.harness.studies.STUDIES`."""
    experiments = studies.indexed_experiments(index)
    main = [e for e in experiments if studies.folder(e).main]
    groups = [folder_group(e) for e in main + [e for e in experiments if e not in main]]
    for group in groups[:max(1, len(main))]:
        group.unfolded = True
    return groups


def _protocols(group: Group) -> str:
    """``paper protocol 100, short protocol 20``: how many of a group's runs each protocol made (its superseded settings
    counted with it; each row says which)."""
    counts = pd.concat([rows["protocol"] for _, rows in group.parts if "protocol" in rows] or [pd.Series()])
    counts = counts.str.split(",").str[0].value_counts()
    if len(counts) == 1:
        return counts.index[0]
    return ", ".join(f"{name} {n}" for name, n in counts.items())


def group_html(group: Group, show) -> str:
    """A group as a ``<details>`` whose summary holds its title, tables, number of runs and protocols, and its line with
    links to its pages; then its tables, made by ``show`` (as the book's ``report.show``), one folded per part."""
    refs = f" ({', '.join(group.refs)})" if group.refs else ""
    count = f"{group.runs} run{'s' if group.runs != 1 else ''}"
    if group.runs:
        count += f", {_protocols(group)}"
    pages = ", ".join(page_link(page) for page in group.pages)
    about = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(group.about, quote=False))
    summary = (f"<summary><strong>{group.title}</strong>{refs} · {count}<br>"
               f"<span>{about}{' Shown on ' + pages + '.' if pages else ''}</span></summary>")
    opened = " open" if group.unfolded else ""
    if not group.parts:
        body = "<p>No record yet.</p>"
    elif len(group.parts) == 1 and not group.parts[0][0]:
        body = show(group.parts[0][1]).to_html()
    else:
        body = "".join(f"<details{opened} style=\"margin-left: 1.2em\"><summary>{label} · {len(rows)}</summary>"
                       f"{show(rows).to_html()}</details>" for label, rows in group.parts)
    return f"<details{opened} style=\"margin-bottom: 0.6em\">{summary}{body}</details>"


def protocol_table(groups: list[Group]) -> pd.DataFrame:
    """The protocols of the runs of ``groups``, each with what it stands for
    (:data:`~paperlib.harness.protocols.DEFINITIONS`), in the order of :data:`~paperlib.harness.protocols.NAMES`."""
    found = {row.split(",")[0] for group in groups for _, rows in group.parts if "protocol" in rows
             for row in rows["protocol"]}
    names = [name for name in dict.fromkeys(protocols.NAMES.values()) if name in found]
    return pd.DataFrame({"protocol": names, "what it is": [protocols.DEFINITIONS[name] for name in names]})


def groups_html(groups: list[Group], show):
    """Groups of an index (:func:`index_groups`) as HTML for its page, each as :func:`group_html` makes it."""
    from IPython.display import HTML

    return HTML("".join(group_html(group, show) for group in groups))
