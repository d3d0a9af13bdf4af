"""The labels of a run's page: its title, its one-line description, the pages that cite it, its table.

A run's executed notebook (``runs/<experiment>/<run>/notebook.ipynb``) is a page of the book. Its first cell is written
from the record after execution (:func:`write_header`, called by :mod:`paperlib.harness.sweeps`): a heading that names
the run, which the book takes as the page's title, one line of its parameters, and links to the pages that cite it.
Everything here is a function of the record's ``params.json`` and ``metrics.json`` and of
:mod:`paperlib.harness.studies`; nothing is typed by hand.

Example::

    >>> run_title({"dataset": "mnist", "model": "mlp", "method": "constrained", "grouping": "model",
    ...            "target": 0.2, "seed": 0, "preset": "paper"})
    'MLP on MNIST, constrained, model-wise 20%, seed 0 — paper protocol'
"""

import io
import json
import os
from functools import cache
from pathlib import Path

import pandas as pd

from . import presets, protocols, records, studies
from .index import device_kind
from .protocols import protocol_name, record_protocol
from ..paper import paper_numbers
from .vocabulary import DATASET_LABELS, METRIC_LABELS, WIDE_RESNET, short_number

MODEL_LABELS = {"mlp": "MLP", "lenet5": "LeNet5", "resnet18": "ResNet-18", "resnet50": "ResNet-50"}
GROUPING_LABELS = {"model": "model-wise", "layer": "layer-wise"}
DUAL_OPTIMIZER_LABELS = {"gradient_ascent": "gradient ascent", "nupi": "nuPI",
                         "augmented_lagrangian": "augmented Lagrangian"}
#: A switch of :data:`~paperlib.harness.presets.SWITCHES` off its default, in words (the dual optimiser: its label).
SWITCH_LABELS = {"dual_restarts": "dual restarts: no", "detach_gates": "gates not detached", "pretrained": "pretrained",
                 "autocast_bf16": "bf16 autocast"}
#: Short column names of a run page's table (:func:`run_table`); every value is a percentage.
SHORT_COLUMNS = {"l0_density": "density", "params_pct": "params", "macs_pct": "MACs",
                 "val_error_best": "best err.", "val_error_final": "final err."}
#: A hyper-parameter a run changes from its preset (:data:`~paperlib.harness.presets.NAMED_IF_CHANGED`), in words.
PARAMETER_LABELS = {"batch_size": "batch size", "optimizer": "optimiser", "lr_milestones": "lr milestones",
                    "lr_gamma": "lr decay", "weight_decay": "weight decay", "gates_optimizer": "gates' optimiser",
                    "gates_lr": "gates' lr", "schedule_gates": "gates' lr decayed with the weights'",
                    "dual_lr": "dual lr", "nupi_kp": "nuPI kp", "nupi_ema": "nuPI EMA", "rho_init": "initial ρ",
                    "linear_init": "linear layers initialised by", "clamp_log_alpha": "log α clamped",
                    "finetune_epochs": "fine-tuning epochs", "finetune_lr": "fine-tuning lr"}
#: A parameter's value in words, where its value is a code (``fan_out``).
VALUE_LABELS = {"fan_out": "fan-out", "fan_in": "fan-in"}


def model_label(model: str) -> str:
    """``MLP``, ``LeNet5``, ``WRN-28-10``, ``ResNet-18``: a model as the paper writes it."""
    match = WIDE_RESNET.fullmatch(model)
    return f"WRN-{match[1]}-{match[2]}" if match else MODEL_LABELS.get(model, model)


def percent(value) -> str:
    """A density or a list of densities (a fraction) in percent: ``20%``, ``50/30/70/10%``."""
    values = value if isinstance(value, list) else [value]
    return "/".join(short_number(round(100 * v, 4)) for v in values) + "%"


def setting(params: dict) -> str:
    """The condition a run trains: ``constrained, layer-wise 30%``, ``penalized, model-wise λ_pen 0.1``, ``dense``,
    ``magnitude pruning to 20%``; ``unstructured`` first for gates on single weights."""
    method = params["method"]
    grouping = GROUPING_LABELS.get(params.get("grouping"), params.get("grouping"))
    words = {"constrained": f"constrained, {grouping} {percent(params['target'])}" if method == "constrained" else "",
             "penalized": f"penalized, {grouping} λ_pen {short_number(params['lmbda'] or 0)}"
             if method == "penalized" else "",
             "dense": "dense",
             "magnitude_pruning": f"magnitude pruning to {percent(params['target'])}"
             if method == "magnitude_pruning" else ""}[method]
    return ("unstructured " if params.get("sparsity") == "unstructured" else "") + words


def changed(name: str, value) -> str:
    """A hyper-parameter and its value in words: ``dual lr 0.003``, ``log α clamped: yes``, ``lr milestones 12/24/32``,
    ``linear layers initialised by fan-out`` (never a raw ``True`` or ``fan_out``)."""
    label = PARAMETER_LABELS.get(name, name.replace("_", " "))
    if isinstance(value, bool):
        return f"{label}: {'yes' if value else 'no'}"
    if isinstance(value, list):
        return f"{label} {'/'.join(map(short_number, value))}"
    return f"{label} {short_number(value) if isinstance(value, (int, float)) else VALUE_LABELS.get(value, value)}"


def variations(params: dict) -> list[str]:
    """What the run changes from its method's and preset's defaults, one short label each (``dual restarts: no``,
    ``nuPI``, ``gates' lr 3``): the same choices its run name spells
    (:func:`paperlib.harness.presets.default_run_name`), in words (:func:`changed`)."""
    found = [SWITCH_LABELS.get(name) or DUAL_OPTIMIZER_LABELS[value]
             for name, value in presets.switched(params).items()]
    if params.get("compile_gates") == "always":
        found.append("compiled gate pass")
    # a pair the presets no longer know has nothing to compare with
    changes = protocols.changed_parameters(params, params["preset"], predated=False) or {}
    return found + [changed(name, value) for name, value in changes.items()]


def run_title(params: dict) -> str:
    """A run's title: model and dataset, condition, variations, seed and protocol (``LeNet5 on MNIST, constrained,
    layer-wise 50/30/70/10%, seed 1 — paper protocol``)."""
    if params.get("kind") == "bisection search":
        return (f"Bisection search for λ_pen: MLP on MNIST, {GROUPING_LABELS[params['grouping']]} "
                f"{percent(params['target'])} ± {percent(params['tolerance'])}, seed {params['seed']} — "
                f"{protocol_name(params['preset'], 'mnist')}")
    return (f"{model_label(params['model'])} on {DATASET_LABELS[params['dataset']]}, {run_condition(params)}"
            f" — {record_protocol(params)}")


def run_condition(params: dict) -> str:
    """What a run trains, without its model and protocol: condition, variations and seed (``constrained, layer-wise
    50/30/70/10%, dual lr 0.003, seed 0``)."""
    return ", ".join([setting(params), *variations(params), f"seed {params['seed']}"])


def run_label(params: dict) -> str:
    """A run named by what it trains, for a list of runs: model, condition, what it changes from its preset, seed
    (``LeNet5, constrained, layer-wise 50/30/70/10%, dual lr 0.003, seed 0``); its protocol is said apart."""
    return f"{model_label(params['model'])}, {run_condition(params)}"


def run_line(params: dict, metrics: dict) -> str:
    """One line of a run's parameters, where it ran and its record, as ``**name** value`` pairs (``**method**
    constrained · **grouping** model-wise · ... · **record** `runs/mnist/...```)."""
    if metrics.get("kind") == "bisection search":
        pairs = {"method": "penalized, λ_pen searched by bisection",
                 "grouping": GROUPING_LABELS[metrics["grouping"]],
                 "target": f"{percent(metrics['target'])} ± {percent(metrics['tolerance'])}",
                 "model": "MLP on MNIST",
                 "protocol": f"{protocol_name(metrics['preset'], 'mnist')}, {metrics['epochs']} epochs a training",
                 "seed": metrics["seed"], "trainings": metrics["num_trainings"]}
    else:
        method = params["method"]
        dual = (f" ({DUAL_OPTIMIZER_LABELS[presets.parameter(params, 'dual_optimizer')]}"
                f"{', dual restarts' if presets.parameter(params, 'dual_restarts') else ''})")
        pairs = {"method": method.replace("_", " ") + (dual if method == "constrained" else ""),
                 "gates": presets.parameter(params, "sparsity")}
        if method in ("constrained", "penalized"):
            pairs["grouping"] = GROUPING_LABELS[params["grouping"]]
        if method in ("constrained", "magnitude_pruning"):
            pairs["target"] = percent(params["target"])
        if method == "penalized":
            pairs["λ_pen"] = short_number(params["lmbda"])
        pairs["model"] = f"{model_label(params['model'])} on {DATASET_LABELS[params['dataset']]}"
        pairs["protocol"] = (f"{record_protocol(params)}, {metrics['epochs_completed']} of "
                             f"{metrics['epochs_planned']} epochs")
        pairs["seed"] = params["seed"]
        device = device_kind(metrics.get("device"))
        pairs["ran on"] = (f"{device} ({metrics['device_name']})" if metrics.get("device_name") else device) + (
            f", {metrics['threads']} thread{'s' if metrics['threads'] != 1 else ''}" if metrics.get("threads") else "")
    pairs["record"] = f"`runs/{params['experiment']}/{params['run_name']}/`"
    return " · ".join(f"**{name}** {value}" for name, value in pairs.items())


@cache
def _citations(runs: Path) -> dict[Path, tuple[str, ...]]:
    """Record folder -> the studies whose grids ask for it (and whose ``where`` it meets), for the records under
    ``runs`` (:func:`paperlib.harness.records.runs_dir`, the key of the cache)."""
    from . import grids  # the grid files' runs, read when citations are asked for

    cited: dict[Path, list[str]] = {}
    for name, item in studies.STUDIES.items():
        for grid in item.grids:
            for config, folder in grids.grid_runs(grid):
                if all(getattr(config, key, None) == value for key, value in (item.where or {}).items()):
                    cited.setdefault(Path(folder).resolve(), []).append(name)
    return {folder: tuple(dict.fromkeys(names)) for folder, names in cited.items()}


def citing_pages(run_dir: Path) -> dict[str, list[str]]:
    """The result pages that cite a record, each with the paper's tables and figures it shows the record in
    (``{"results_mnist": ["Table 10"]}``; an empty list for a study of the book's own). A bisection search's trainings
    are cited through their search."""
    run_dir = Path(run_dir).resolve()
    names = list(_citations(records.runs_dir()).get(run_dir, ()))
    for search in run_dir.parent.glob("search-*/metrics.json"):
        if any(e["run"] == run_dir.name for e in json.loads(search.read_text()).get("evaluations", [])):
            names += _citations(records.runs_dir()).get(search.parent.resolve(), ())
    pages: dict[str, list[str]] = {}
    for name in dict.fromkeys(names):
        refs = pages.setdefault(studies.study(name).page, [])
        if name in studies.TABLES or name in studies.FIGURES:
            refs.append(paper_numbers.ref(name))
    return pages


def run_index(experiment: str) -> str | None:
    """The run index page (``runs_mnist``) that lists an experiment folder's runs, or None."""
    return next((index for index in studies.RUN_INDEXES if experiment in studies.indexed_experiments(index)), None)


def page_title(page: str) -> str:
    """The first heading of a book page ``book/<page>.md``."""
    text = (records.project_root() / "book" / f"{page}.md").read_text()
    return next(line[2:].strip() for line in text.splitlines() if line.startswith("# "))


def _page_link(page: str, notebook_dir: Path) -> str:
    target = records.project_root() / "book" / f"{page}.md"
    return f"[{page_title(page)}]({Path(os.path.relpath(target, notebook_dir)).as_posix()})"


def cited_by_line(run_dir: Path) -> str:
    """``**cited by** Table 10, Table 11 in [MNIST: ...](../../../book/results_mnist.md) · **all runs** [Runs:
    MNIST](...)``: links from a run's page back to the pages that cite it and to its run index."""
    run_dir = Path(run_dir).resolve()
    links = [(", ".join(refs) + " in " if refs else "") + _page_link(page, run_dir)
             for page, refs in citing_pages(run_dir).items()]
    parts = [f"**cited by** {'; '.join(links)}"] if links else []
    index = run_index(run_dir.parent.name)
    if index:
        parts.append(f"**all runs** {_page_link(index, run_dir)}")
    return " · ".join(parts)


def header(run_dir: Path) -> str:
    """The markdown of a run page's first cell: its title as the page's heading, its line, its links."""
    run_dir = Path(run_dir)
    params, metrics = records.record_params(run_dir), json.loads((run_dir / "metrics.json").read_text())
    lines = [f"# {run_title(params)}", run_line(params, metrics), cited_by_line(run_dir)]
    return "\n\n".join(line for line in lines if line)


def write_header(run_dir: Path) -> bool:
    """Replace the first cell of a record's executed notebook (its template's heading) by :func:`header`; whether it
    changed. Raises if that cell is not a markdown cell that opens with a heading."""
    notebook = Path(run_dir) / "notebook.ipynb"
    content = json.loads(notebook.read_text())
    first = content["cells"][0]
    if first["cell_type"] != "markdown" or not "".join(first["source"]).startswith("# "):
        raise ValueError(f"{notebook} does not open with a markdown heading, so it has no cell for its title")
    text = header(run_dir)
    if "".join(first["source"]) == text:
        return False
    first["source"] = text.splitlines(keepends=True)
    records.write_notebook(notebook, content)
    return True


def run_table(record: dict, paper_rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """The run's numbers in one row (in %, 2 decimals), the paper's rows for its setting under it (``paper_rows``, from
    :func:`paperlib.harness.paper_rows.paper_rows_for`), under the short column names of :data:`SHORT_COLUMNS`."""
    from .paper_rows import our_value

    params = record["params"]
    hyper = {}
    if params["method"] in ("constrained", "magnitude_pruning"):
        hyper["target"] = percent(params["target"])[:-1]
    elif params["method"] == "penalized":
        hyper["λ_pen"] = short_number(params["lmbda"])
    ours = {**hyper}
    for metric, column in SHORT_COLUMNS.items():
        value = our_value(record, metric)
        ours[column] = "–" if value is None else f"{value:.2f}"
    rows, labels = [ours], ["ours"]
    if paper_rows is not None and not paper_rows.empty:
        renamed = paper_rows.rename(columns={METRIC_LABELS[m]: c for m, c in SHORT_COLUMNS.items()})
        for _, row in renamed.iloc[1:].iterrows():
            rows.append({**hyper, **{c: row.get(c) if pd.notna(row.get(c)) else "–" for c in SHORT_COLUMNS.values()}})
            labels.append(row[""])
    return pd.DataFrame(rows, index=labels)


def show(fig, colors: int = 32) -> None:
    """Display a figure as a palette PNG (:func:`~paperlib.harness.records.palette_png`), then close it: 32 colours keep
    a run page's lines and text to the eye at about a fifth of matplotlib's bytes."""
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    display(Image(data=records.palette_png(buffer.getvalue(), colors), format="png"))


def run_page_remarks(run_dir: Path) -> str:
    """What a reader of a run's page should know before its log: that the run was resumed (its log starts where it
    resumed), and that its settings are superseded: its protocol gives another configuration today
    (:func:`~paperlib.harness.presets.current_run_name`)."""
    if records.record_status(run_dir) is None or not (Path(run_dir) / "params.json").exists():
        return ""  # no record, or a bisection search's (its trainings have their own pages)
    record = records.load_record(run_dir)
    remarks = []
    if record["metrics"].get("git_commits_resumed_at"):
        remarks.append(" It was stopped and resumed from a checkpoint: its log starts at the epoch it resumed from,"
                       " and every epoch is in its history.")
    if presets.current_run_name(record["params"]) != Path(run_dir).name:
        remarks.append(" Its settings are superseded: today its protocol gives another configuration under the"
                       " same name.")
    return "".join(remarks)
