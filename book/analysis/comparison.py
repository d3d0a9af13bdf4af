"""The paper's numbers beside ours, cell by cell.

:func:`compare` takes one of the paper's result tables (its LaTeX label, as in
:mod:`paperlib.paper.paper_results`) and the grid files whose runs reproduce it, and
returns one row per row of the paper's table: for each metric the paper's value
(with its printed 95% CI), ours (mean ± 95% CI over the seeds with a complete
record), and the difference; :data:`paperlib.harness.studies.TABLES` names the grids of each table, so
``compare_table(label)`` is what a page shows. The ``protocol`` column says
which records were used: the ``paper`` preset's where any exist, otherwise the
``cpu`` ones, each named by the protocol its own parameters define
(:func:`paperlib.harness.protocols.record_protocol`: ``paper protocol``, ``short protocol``, ...), with
their epochs and number of seeds. Nothing here invents a number: the paper's
come from ``paper_results.csv``, ours from ``metrics.json`` and ``history.csv``.

Our CI is Student's t with n − 1 degrees of freedom
(:func:`analysis.intervals.mean_ci`); the paper's is shown as printed, the
authors' 1.96 · std / sqrt(n), narrower at the same n. With one seed there is no
CI. Whether a difference exceeds what the runs' spread explains
is :func:`agreement`'s question.

"Best" validation errors are only comparable when they are taken at epochs where
the constraint holds: early in training a constrained model is still dense and
often has its lowest error. For constrained runs, ours is therefore the best
error among the epochs where every constrained expected density is within
:data:`~paperlib.harness.rules.FEASIBLE_POINTS` of its target (at most that much above it, :func:`paperlib.harness.rules.feasible`); for
penalized and dense runs it is the best error over training. The paper does not
say how its "best" column was taken; the authors' code
(``get_results/neurips/comparison_tables.py``) takes the lowest error of any epoch
of any seed, feasible or not. :func:`authors_best_error` takes ours that way too.
A magnitude-pruning row of App. L is the best error of the fine-tuning so far
(:func:`best_finetuned_error`).
"""

import statistics
from pathlib import Path

import pandas as pd

from paperlib.harness import index, protocols, records, rules
from paperlib.harness.paper_rows import (MODEL_FAMILIES, ROW_KEYS, describe_key, largest_gap, matches, our_value,
                                        paper_key, printed_cell, target_label)
from paperlib.harness.studies import TABLES
from paperlib.harness.vocabulary import METRIC_LABELS
from paperlib.paper.paper_numbers import ref
from paperlib.paper.paper_results import paper_results, paper_runs

from .intervals import difference_interval, mean_ci
from .report import grid_runs, notebook_link, show


def _format(mean: float, ci: float | None, digits: int = 2) -> str:
    return f"{mean:.{digits}f}" + ("" if ci is None else f" ± {ci:.{digits}f}")


def split_cell(cell: str) -> tuple[float, float | None]:
    """The mean and CI of a cell of a :func:`compare` table (``"1.50 ± 0.04"``, or ``"1.50"``: no CI)."""
    mean, _, ci = cell.partition(" ± ")
    return float(mean), float(ci) if ci else None


def mean_of(cell: str) -> float:
    """The mean of a cell of a :func:`compare` table (``"1.50 ± 0.04"`` or ``"1.50"``), as a float."""
    return split_cell(cell)[0]


def _chosen_runs(runs: list[tuple[object, Path]]) -> list[tuple[object, Path]]:
    """The complete runs of the protocol shown: the paper preset's if any is complete, else the cpu preset's."""
    complete = [(c, d) for c, d in runs if records.record_status(d) == "complete"]
    by_preset = ([(c, d) for c, d in complete if c.preset == preset] for preset in ("paper", "cpu"))
    return next((chosen for chosen in by_preset if chosen), [])


def is_superseded(text) -> bool:
    """Whether a ``protocol`` cell names a record made with settings its preset no longer gives."""
    return f", {protocols.SUPERSEDED}" in str(text)


def is_paper_protocol(text) -> bool:
    """Whether a ``protocol`` cell names the paper's protocol, at its settings today."""
    name = protocols.protocol_name("paper")
    return (str(text) == name or str(text).startswith(name + ", ")) and not is_superseded(text)


def has_protocol(text) -> bool:
    """Whether a ``protocol`` cell names one of the book's protocols (a row with records), not "not run" or a
    quoted row."""
    return str(text).startswith(tuple(set(protocols.NAMES.values())))


def _protocol(loaded: list[dict], paper_model: str) -> str:
    """A row's ``protocol``: the protocols its records' own parameters define
    (:func:`paperlib.harness.protocols.record_protocol`), their epochs and seeds, and models and GPUs that differ."""
    metrics = [record["metrics"] for record in loaded]
    epochs, seeds = sorted({m["epochs_completed"] for m in metrics}), len(loaded)
    models = sorted({record["params"]["model"] for record in loaded})
    names = "/".join(dict.fromkeys(protocols.record_protocol(record["params"]) for record in loaded))
    text = f"{names}, {'/'.join(map(str, epochs))} ep, {seeds} seed{'s' if seeds > 1 else ''}"
    if models != [MODEL_FAMILIES[paper_model][0]]:
        text += f", {'/'.join(models)}"
    on_gpu = sum(m.get("device") == "cuda" for m in metrics)
    if on_gpu:
        text += ", on GPU" if on_gpu == seeds else f", {on_gpu} on GPU"
    return text


#: The notebook that runs a method, where it is not the grids' own (App. L's magnitude-pruning rows).
METHOD_NOTEBOOKS = {"magnitude_pruning": "book/magnitude_pruning.ipynb"}


def _command(key: dict, matching: list[tuple[object, Path]], by_grid: dict) -> str:
    """The commands that produce a missing row: the sweep of its grid (if one runs it), and one papermill
    run at the paper's protocol where no grid runs it at the ``paper`` preset."""
    import yaml

    commands = [f"python -m paperlib.harness.sweeps {g}" for g in sorted(by_grid, key=str)
                if any(run in matching for run in by_grid[g])]
    if any(config.preset == "paper" for config, _ in matching):
        return " ; ".join(commands)
    specs = [yaml.safe_load((records.project_root() / g).read_text()) for g in by_grid]
    notebook = METHOD_NOTEBOOKS.get(key["method"], specs[0]["notebook"])
    spec = next((s for s in specs if s["notebook"] == notebook), specs[0])
    params = {"experiment": (spec.get("base") or {}).get("experiment"), "model": MODEL_FAMILIES[key["model"]][0],
              "method": key["method"]}
    if key["grouping"] in ("model", "layer") and key["method"] != "magnitude_pruning":
        params["grouping"] = key["grouping"]
    if key["sparsity"] != "structured":
        params["sparsity"] = key["sparsity"]
    params["preset"] = "paper"
    if key["method"] == "penalized":
        params["lmbda"] = key["lmbda"]
    elif key["target"] is not None:
        params["target"] = key["target"]
    if key["gates_lr"] is not None:
        params["gates_lr"] = key["gates_lr"]
    options = " ".join(f"-p {name} {value if not isinstance(value, list) else repr(str(value))}"
                       for name, value in params.items() if value)
    paper = f"papermill {notebook} out.ipynb {options}"
    return " ; ".join([*commands, f"at the paper's protocol: {paper}" if commands else paper])


def compare(table: str, grid_files: list[str | Path], metrics: list[str] | None = None,
            digits: int = 2, where: dict | None = None) -> pd.DataFrame:
    """The paper's ``table`` beside our records from ``grid_files``, one row per row of the paper's table.

    Columns: the row's method, grouping and target or λ_pen; for each metric
    ``<metric> paper``, ``<metric> ours`` and ``<metric> Δ`` (ours minus the
    paper's, for numeric metrics); ``protocol``; ``runs`` (links to the runs'
    notebooks). Rows the paper reports but our grids do not run, or whose
    records are not complete yet, show the paper's value and "not run"; the
    commands that would produce them are in ``attrs["missing"]``
    (``{row description: command}``), and our values behind each row, one
    ``{metric: [value per run]}`` per row, are in ``attrs["values"]``, and each run's own, one list per row of
    ``{"seed", "run" (its notebook's link), metric: value or None}``, in ``attrs["per_run"]``. ``where``
    keeps only the runs whose configuration has these values (e.g. ``{"detach_gates": True}`` where a
    grid also varies what the paper's table holds fixed).
    """
    paper = paper_results()
    cells = paper[(paper["table"] == table) & (paper["source_kind"] == "table")]
    if cells.empty:
        raise ValueError(f"the paper has no table labelled {table!r}; "
                         f"labels: {sorted(paper['table'].unique())}")
    metrics = metrics or [m for m in METRIC_LABELS if m in set(cells["metric"])]
    by_grid = {grid: [(config, folder) for config, folder in grid_runs(grid)
                      if all(getattr(config, name) == value for name, value in (where or {}).items())]
               for grid in grid_files}
    ours = list({str(folder): (config, folder) for runs in by_grid.values() for config, folder in runs}.values())
    rows, values_by_row, per_run, missing = [], [], [], {}
    # A row's density has no fine-tuning column and its errors "0" epochs: one row of the paper's table.
    cells = cells.assign(finetune_epochs=cells["finetune_epochs"].replace("", "0")) \
        if (cells["finetune_epochs"] != "").any() else cells
    for _, row_cells in cells.groupby(list(ROW_KEYS), sort=False):
        key = paper_key(row_cells)
        row = {"model": key["model"], "method": key["method"], "grouping": key["grouping"] or "—",
               "target / λ_pen": describe_key(key)}
        if (row_cells["finetune_epochs"] != "").any():
            row["fine-tuned (epochs)"] = row_cells["finetune_epochs"].iloc[0]
        matching = [(c, d) for c, d in ours if matches(c, key)]
        chosen = _chosen_runs(matching)
        loaded = [records.load_record(d) for _, d in chosen]
        values_by_row.append({})
        per_run.append([{"seed": c.seed, "run": notebook_link(d, f"seed {c.seed}") or f"seed {c.seed}",
                         **{metric: our_value(r, metric, key["finetune_epochs"]) for metric in metrics}}
                        for (c, d), r in zip(chosen, loaded)])
        for metric in metrics:
            label = METRIC_LABELS[metric]
            printed = row_cells[row_cells["metric"] == metric]
            paper_value = None
            if not printed.empty:
                cell = printed.iloc[0]
                paper_value = cell["value_num"] if pd.notna(cell["value_num"]) else cell["value"]
                row[f"{label} paper"] = printed_cell(cell)
            else:
                row[f"{label} paper"] = None
            values = [v for v in (our_value(r, metric, key["finetune_epochs"]) for r in loaded) if v is not None]
            values_by_row[-1][metric] = values
            if metric == "pruned_architecture":
                row[f"{label} ours"] = " / ".join(values) or None
                continue
            if values:
                mean, ci = mean_ci(values)
                row[f"{label} ours"] = _format(mean, ci, digits)
                if isinstance(paper_value, float):
                    row[f"{label} Δ"] = f"{mean - paper_value:+.{digits}f}"
        if chosen:
            row["protocol"] = _protocol(loaded, key["model"])
            row["device"] = index.where_ran([r["metrics"].get("device") for r in loaded], [c.seed for c, _ in chosen])
            row["runs"] = " ".join(notebook_link(d, f"s{c.seed}") or f"s{c.seed}" for c, d in chosen)
        elif key["method"] == "louizos":
            row["protocol"] = "Louizos et al., quoted"
        else:
            started = any(records.record_status(d) == "partial" for _, d in matching)
            row["protocol"] = "partial record (training)" if started else "not run"
            label = (key["model"], key["method"], key["grouping"] if key["method"] != "dense" else "", describe_key(key))
            missing[" ".join(part for part in label if part)] = _command(key, matching, by_grid)
        rows.append(row)
    result = pd.DataFrame(rows)
    keys = [c for c in ("model", "method", "grouping", "target / λ_pen", "fine-tuned (epochs)") if c in result]
    values = [f"{label} {side}" for label in METRIC_LABELS.values() for side in ("paper", "ours", "Δ")
              if f"{label} {side}" in result]
    result = result[[*keys, *values, *(c for c in ("protocol", "device", "runs") if c in result)]]
    result.attrs["missing"] = missing
    result.attrs["values"] = values_by_row
    result.attrs["per_run"] = per_run
    return result


#: Our dataset names -> the paper's (``paper_results.csv``).
def compare_table(table: str, metrics: list[str] | None = None, digits: int = 2) -> pd.DataFrame:
    """:func:`compare` for one of the paper's tables, with the records :data:`TABLES` names for it."""
    if table not in TABLES:
        raise ValueError(f"no grid reproduces {table!r}; the tables compared: {sorted(TABLES)}")
    source = TABLES[table]
    return compare(table, list(source.grids), metrics, digits, source.where)


def overview(threshold: float = rules.AGREE_POINTS) -> pd.DataFrame:
    """One row per table of :data:`TABLES` (its number in the paper, linked to its page): how many of its rows have
    records at the paper's protocol, at another of the book's protocols or none, and how many of the numbers compared at
    the paper's protocol are within ``threshold`` points of the paper's (rows quoted from Louizos et al.
    are not counted)."""
    rows = []
    for label, source in TABLES.items():
        table = compare_table(label)
        table = table[table["method"] != "louizos"]
        protocol = table["protocol"]
        paper_rows = table[protocol.map(is_paper_protocol)]
        deltas = [abs(float(d)) for column in table if column.endswith(" Δ")
                  for d in paper_rows[column].dropna()]
        rows.append({"table": f'<a href="{source.page}.html">{ref(label)}</a>', "rows": len(table),
                     "paper protocol": int(protocol.map(is_paper_protocol).sum()),
                     "another protocol": int((protocol.map(has_protocol) & ~protocol.map(is_paper_protocol)).sum()),
                     "no record": int((~protocol.map(has_protocol)).sum()),
                     "numbers compared": len(deltas),
                     f"within {threshold:g} pts": sum(d <= threshold for d in deltas)})
    return pd.DataFrame(rows)


def agreement(table: str, metric: str = "val_error_final", level: float = 0.95) -> pd.DataFrame:
    """Whether ours differs from the paper's by more than chance, row by row of the paper's ``table``.

    For every row with records at the paper's protocol and a printed CI: ours
    minus the paper's mean, and the half-width of the interval that difference
    falls in with probability ``level`` if our runs and the paper's came from
    one distribution (:func:`analysis.intervals.difference_interval`, with the
    number of runs the table's caption states). The paper's CI alone is not
    that interval: one run of ours falls outside a 5-run CI about half the time
    by chance.
    """
    runs = paper_runs(table)
    if runs is None:
        raise ValueError(f"the paper does not say how many runs {table!r} aggregates; "
                         f"tables that do: {sorted(t for t in TABLES if paper_runs(t))}")
    compared = compare_table(table, [metric])
    label = METRIC_LABELS[metric]
    rows = []
    for (_, row), values in zip(compared.iterrows(), compared.attrs["values"]):
        paper, ours = row[f"{label} paper"], values.get(metric)
        if not ours or not is_paper_protocol(row["protocol"]) or " ± " not in str(paper):
            continue
        paper_mean, paper_ci = split_cell(paper)
        delta = statistics.fmean(ours) - paper_mean
        half = difference_interval(paper_ci, runs, ours, level)
        description = f"{row['model']} {row['method']} {row['grouping']} {row['target / λ_pen']}"
        rows.append({"table": ref(table), "row": description, "paper": paper, "ours": row[f"{label} ours"],
                     "our runs": len(ours), "Δ": delta, f"{level:.0%} chance interval": half,
                     "beyond chance": abs(delta) > half, "protocol": row["protocol"]})
    columns = ["table", "row", "paper", "ours", "our runs", "Δ", f"{level:.0%} chance interval", "beyond chance",
               "protocol"]
    return pd.DataFrame(rows, columns=columns)


def misses(table: pd.DataFrame, threshold: float = rules.AGREE_POINTS) -> pd.DataFrame:
    """The cells of a :func:`compare` table where ours differs from the paper's by more than ``threshold`` points."""
    rows = []
    for _, row in table.iterrows():
        for column in [c for c in table if c.endswith(" Δ")]:
            delta = row[column]
            if isinstance(delta, str) and abs(float(delta)) > threshold:
                metric = column[:-2]
                rows.append({"row": f"{row['method']} {row['grouping']} {row['target / λ_pen']}", "metric": metric,
                             "paper": row[f"{metric} paper"], "ours": row[f"{metric} ours"], "Δ": delta,
                             "protocol": row["protocol"]})
    return pd.DataFrame(rows, columns=["row", "metric", "paper", "ours", "Δ", "protocol"])


def distance_to_target(grid_files: list[str | Path]) -> pd.DataFrame:
    """For every complete constrained record of the grids (with its model, grouping and target): how far
    its final expected densities are from their targets (the largest gap over its constraints, in points;
    positive: above the target)."""
    rows = []
    runs = {str(folder): (config, folder) for grid in grid_files for config, folder in grid_runs(grid)}  # each once
    for config, folder in runs.values():
        if config.method != "constrained" or records.record_status(folder) != "complete":
            continue
        record = records.load_record(folder)
        worst = largest_gap(record)
        rows.append({"run": notebook_link(folder, config.run_name) or config.run_name,
                     "model": config.model, "grouping": config.grouping, "target": target_label(config.target),
                     "protocol": f"{protocols.record_protocol(record['params'])}, "
                                 f"{record['metrics']['epochs_completed']} ep",
                     "sparsity": config.sparsity, "largest gap (points)": worst,
                     "within 1 point": abs(worst) <= rules.ON_TARGET_POINTS})
    return pd.DataFrame(rows, columns=["run", "model", "grouping", "target", "protocol", "sparsity",
                                       "largest gap (points)", "within 1 point"])


def _protocol_of(command: str) -> tuple[str, str]:
    """(the protocol a missing row's command runs, the command itself), named as
    :mod:`paperlib.harness.protocols` names it, from the label :func:`_command` gives it or from the preset and
    dataset its grid file names ("" when neither says)."""
    import yaml

    label, _, command = command.rpartition(": ") if command.startswith("at the paper") else ("", "", command)
    if label:
        return protocols.protocol_name("paper"), command
    if command.startswith("python -m paperlib.harness.sweeps "):
        grid = records.project_root() / command.split()[-1]
        spec = yaml.safe_load(grid.read_text()) if grid.exists() else {}
        preset = (spec.get("base") or {}).get("preset")
        return (protocols.protocol_name(preset, spec.get("dataset")) if preset else ""), command
    return "", command


def missing_commands(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a :func:`compare` table without a record, as a table: one line per command that produces
    some of them (``rows``), with the protocol it runs; a row that either protocol can make has both
    commands, one line each. Empty when every row has a record."""
    rows_by_command: dict[str, list[str]] = {}
    for row, command in table.attrs["missing"].items():
        rows_by_command.setdefault(command, []).append(row)
    lines = [{"rows": "; ".join(rows), "protocol": protocol, "command": f"<code>{command}</code>"}
             for alternatives, rows in rows_by_command.items()
             for protocol, command in map(_protocol_of, alternatives.split(" ; "))]
    return pd.DataFrame(lines, columns=["rows", "protocol", "command"])


#: A method as a table's row names it, in words.
METHOD_NAMES = {"louizos": "Louizos et al.", "magnitude_pruning": "magnitude pruning"}


def row_name(method: str, grouping: str, setting: str = "") -> str:
    """A row of the paper's tables in words: ``Louizos et al., model-wise λ_pen 0.1/N``."""
    grouped = f", {grouping}-wise" if grouping in ("model", "layer") else ""
    return f"{METHOD_NAMES.get(method, method)}{grouped} {setting}".strip()


def compact(table: pd.DataFrame) -> pd.DataFrame:
    """A :func:`compare` table for the page: the row's method (in words, :data:`METHOD_NAMES`), grouping and target
    in one column, and each difference next to our value (``1.50 ± 0.04 (+0.14)``), so that a table fits the page's
    width."""
    table = table.copy()
    label = pd.Series([row_name(m, g, t) for m, g, t in zip(table["method"], table["grouping"],
                                                            table["target / λ_pen"])], index=table.index)
    keep = [c for c in ("model",) if c in table]
    compacted = pd.concat([table[keep], label.rename("row")], axis=1)
    for column in table.columns:
        if column.endswith(" ours"):
            delta = table.get(column[:-5] + " Δ")
            ours = table[column]
            if delta is not None:
                ours = ours.where(delta.isna(), ours + " (" + delta.fillna("") + ")")
            compacted[column] = ours
        elif column.endswith(" paper") or column in ("fine-tuned (epochs)", "protocol", "device", "runs"):
            compacted[column] = table[column]
    metric_columns = [f"{label} {side}" for label in METRIC_LABELS.values() for side in ("paper", "ours")]
    ordered = [*keep, "row", *(c for c in ("fine-tuned (epochs)",) if c in table),
               *(c for c in metric_columns if c in compacted),
               *(c for c in ("protocol", "device", "runs") if c in table)]
    result = compacted[ordered]
    result.attrs = dict(table.attrs)
    return result


def beside(table: str, metrics: list[str] | None = None, commands: bool = True) -> list:
    """A page's section for one of the paper's tables (:func:`compare_table`, :func:`compact`, shown by
    :func:`~analysis.report.display_all`): the table, then, unless ``commands`` is False (the same rows follow
    in another table), the commands of the rows without a record."""
    compared = compare_table(table, metrics)
    missing = show(missing_commands(compared), caption="Rows without a complete record, and the command that "
                   "produces them") if commands and compared.attrs["missing"] else None
    return [show(compact(compared)), missing]
