"""The paper's numbers beside ours, cell by cell (:func:`compare`, :func:`compare_table` for a table of
:data:`paperlib.harness.studies.TABLES`).

A row's records are found by their parameters (:func:`paperlib.harness.grids.grid_records`, never by folder): the
``paper`` preset's where any is complete, else the ``cpu`` one's; its ``protocol`` names them by the protocol their own parameters define (:func:`paperlib.harness.protocols.record_protocol`), with
epochs and seeds. Our CI is Student's t with n − 1 degrees of freedom (:func:`analysis.intervals.mean_ci`); the
paper's is printed as is (the authors' 1.96 · std / sqrt(n), narrower at the same n). Whether a difference
exceeds what the runs' spread explains is :func:`agreement`'s question.

"Best" errors compare only where the constraint holds: early in training a constrained model is still dense and
often has its lowest error. Ours is the best error of the epochs where every constrained density is within
:data:`~paperlib.harness.rules.FEASIBLE_POINTS` of its target (:func:`paperlib.harness.rules.feasible`); the
authors' code takes the lowest error of any epoch of any seed (:func:`paperlib.harness.paper_rows.authors_best_error`).
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
from .report import grid_records, grid_runs, notebook_link


def split_cell(cell: str) -> tuple[float, float | None]:
    """The mean and CI of a :func:`compare` cell (``"1.50 ± 0.04"``, or ``"1.50"``: no CI)."""
    mean, _, ci = cell.partition(" ± ")
    return float(mean), float(ci) if ci else None


def mean_of(cell) -> float:
    """The mean of a :func:`compare` cell; NaN for a cell without one (where the paper prints none)."""
    return split_cell(cell)[0] if isinstance(cell, str) and cell.strip() else float("nan")


def is_paper_protocol(text) -> bool:
    """Whether a ``protocol`` cell names the paper's protocol at its settings today (not superseded)."""
    name = protocols.protocol_name("paper")
    return (str(text) == name or str(text).startswith(name + ", ")) and f", {protocols.SUPERSEDED}" not in str(text)


def has_protocol(text) -> bool:
    """Whether a ``protocol`` cell names one of the book's protocols (a row with records)."""
    return str(text).startswith(tuple(set(protocols.NAMES.values())))


def _protocol(loaded: list[dict], paper_model: str) -> str:
    """A row's ``protocol``: its records' protocols, epochs and seeds, and models and GPUs that differ."""
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


def _runs(grid: str | Path, where: dict | None) -> list[tuple[object, Path, Path | None]]:
    """(configuration, folder it writes to, folder of its complete record or None) of each run of a grid whose
    configuration has the values ``where``."""
    return [(config, folder, found) for (config, folder), (_, found) in zip(grid_runs(grid), grid_records(grid))
            if all(getattr(config, name) == value for name, value in (where or {}).items())]


def _command(key: dict, matching: list[tuple], by_grid: dict) -> str:
    """The command that makes a missing row at the paper's protocol: the sweep of a grid that runs it at the
    ``paper`` preset, else one papermill run of the grids' notebook (App. L's pruning rows: its own)."""
    import yaml

    paper = [grid for grid in sorted(by_grid, key=str)
             if any(run in matching and run[0].preset == "paper" for run in by_grid[grid])]
    if paper:
        return f"python -m paperlib.harness.sweeps {paper[0]}"
    specs = [yaml.safe_load((records.project_root() / grid).read_text()) for grid in by_grid]
    notebook = "book/magnitude_pruning.ipynb" if key["method"] == "magnitude_pruning" else specs[0]["notebook"]
    spec = next((s for s in specs if s["notebook"] == notebook), specs[0])
    params = {"experiment": (spec.get("base") or {}).get("experiment"), "model": MODEL_FAMILIES[key["model"]][0],
              "method": key["method"],
              "grouping": key["grouping"] if key["grouping"] in ("model", "layer")
              and key["method"] != "magnitude_pruning" else None,
              "sparsity": key["sparsity"] if key["sparsity"] != "structured" else None, "preset": "paper",
              "lmbda" if key["method"] == "penalized" else "target":
                  key["lmbda"] if key["method"] == "penalized" else key["target"],
              "gates_lr": key["gates_lr"]}
    options = " ".join(f"-p {name} {value if not isinstance(value, list) else repr(str(value))}"
                       for name, value in params.items() if value)
    return f"papermill {notebook} out.ipynb {options}"


def compare(table: str, grid_files: list[str | Path], metrics: list[str] | None = None,
            digits: int = 2, where: dict | None = None) -> pd.DataFrame:
    """The paper's ``table`` beside our records from ``grid_files``, one row per row of the paper's table.

    Per metric: ``<metric> paper``, ``<metric> ours`` (mean ± CI) and ``<metric> Δ`` (ours − paper's); then
    ``protocol``, ``device`` and ``runs``. A row without a complete record says "not run" (or "partial record").
    ``attrs``: ``missing`` ({row: command at the paper's protocol}), ``values`` (per row, {metric: values}) and
    ``per_run`` (per row, one {"seed", "run", metric: value} per run). ``where`` keeps the runs whose
    configuration has these values (where a grid also varies what the paper's table holds fixed).
    """
    paper = paper_results()
    cells = paper[(paper["table"] == table) & (paper["source_kind"] == "table")]
    if cells.empty:
        raise ValueError(f"the paper has no table labelled {table!r}; labels: {sorted(paper['table'].unique())}")
    metrics = metrics or [m for m in METRIC_LABELS if m in set(cells["metric"])]
    by_grid = {grid: _runs(grid, where) for grid in grid_files}
    ours = list({str(run[1]): run for runs in by_grid.values() for run in runs}.values())
    rows, values_by_row, per_run, missing = [], [], [], {}
    # A row's density has no fine-tuning column and its errors "0" epochs: one row of the paper's table.
    if (cells["finetune_epochs"] != "").any():
        cells = cells.assign(finetune_epochs=cells["finetune_epochs"].replace("", "0"))
    for _, row_cells in cells.groupby(list(ROW_KEYS), sort=False):
        key = paper_key(row_cells)
        row = {"model": key["model"], "method": key["method"], "grouping": key["grouping"] or "—",
               "target / λ_pen": describe_key(key)}
        if (row_cells["finetune_epochs"] != "").any():
            row["fine-tuned (epochs)"] = row_cells["finetune_epochs"].iloc[0]
        matching = [run for run in ours if matches(run[0], key)]
        complete = [(c, found) for c, _, found in matching if found is not None]
        chosen = next((runs for runs in ([(c, d) for c, d in complete if c.preset == preset]
                                         for preset in ("paper", "cpu")) if runs), [])
        loaded = [records.load_record(d) for _, d in chosen]
        per_run.append([{"seed": c.seed, "run": notebook_link(d, f"seed {c.seed}") or f"seed {c.seed}",
                         **{metric: our_value(r, metric, key["finetune_epochs"]) for metric in metrics}}
                        for (c, d), r in zip(chosen, loaded)])
        values_by_row.append({metric: [run[metric] for run in per_run[-1] if run[metric] is not None]
                              for metric in metrics})
        for metric, values in values_by_row[-1].items():
            label, printed = METRIC_LABELS[metric], row_cells[row_cells["metric"] == metric]
            cell = printed.iloc[0] if len(printed) else None
            row[f"{label} paper"] = None if cell is None else printed_cell(cell)
            if metric == "pruned_architecture":
                row[f"{label} ours"] = " / ".join(values) or None
            elif values:
                mean, ci = mean_ci(values)
                row[f"{label} ours"] = f"{mean:.{digits}f}" + ("" if ci is None else f" ± {ci:.{digits}f}")
                if cell is not None and pd.notna(cell["value_num"]):
                    row[f"{label} Δ"] = f"{mean - cell['value_num']:+.{digits}f}"
        if chosen:
            row["protocol"] = _protocol(loaded, key["model"])
            row["device"] = index.where_ran([r["metrics"].get("device") for r in loaded], [c.seed for c, _ in chosen])
            row["runs"] = " ".join(notebook_link(d, f"s{c.seed}") or f"s{c.seed}" for c, d in chosen)
        elif key["method"] == "louizos":
            row["protocol"] = "Louizos et al., quoted"
        else:
            started = any(records.record_status(d) == "partial" for _, d, _ in matching)
            row["protocol"] = "partial record (training)" if started else "not run"
            label = (key["model"], key["method"], key["grouping"] if key["method"] != "dense" else "", describe_key(key))
            missing[" ".join(part for part in label if part)] = _command(key, matching, by_grid)
        rows.append(row)
    result = pd.DataFrame(rows)
    keys = [c for c in ("model", "method", "grouping", "target / λ_pen", "fine-tuned (epochs)") if c in result]
    values = [f"{label} {side}" for label in METRIC_LABELS.values() for side in ("paper", "ours", "Δ")
              if f"{label} {side}" in result]
    result = result[[*keys, *values, *(c for c in ("protocol", "device", "runs") if c in result)]]
    result.attrs.update(missing=missing, values=values_by_row, per_run=per_run)
    return result


def compare_table(table: str, metrics: list[str] | None = None, digits: int = 2) -> pd.DataFrame:
    """:func:`compare` for one of the paper's tables, with the records :data:`TABLES` names for it."""
    if table not in TABLES:
        raise ValueError(f"no grid reproduces {table!r}; the tables compared: {sorted(TABLES)}")
    return compare(table, list(TABLES[table].grids), metrics, digits, TABLES[table].where)


def overview(threshold: float = rules.AGREE_POINTS) -> pd.DataFrame:
    """One row per table of :data:`TABLES`: its rows with records at the paper's protocol, at another or none,
    and how many numbers compared at the paper's protocol are within ``threshold`` points (Louizos et al.'s
    quoted rows are not counted)."""
    rows = []
    for label, source in TABLES.items():
        table = compare_table(label)
        table = table[table["method"] != "louizos"]
        at_paper, recorded = table["protocol"].map(is_paper_protocol), table["protocol"].map(has_protocol)
        deltas = [abs(float(d)) for column in table if column.endswith(" Δ") for d in table[at_paper][column].dropna()]
        rows.append({"table": f'<a href="{source.page}.html">{ref(label)}</a>', "rows": len(table),
                     "paper protocol": int(at_paper.sum()), "another protocol": int((recorded & ~at_paper).sum()),
                     "no record": int((~recorded).sum()), "numbers compared": len(deltas),
                     f"within {threshold:g} pts": sum(d <= threshold for d in deltas)})
    return pd.DataFrame(rows)


def agreement(table: str, metric: str = "val_error_final", level: float = 0.95) -> pd.DataFrame:
    """Whether ours differs from the paper's by more than chance, per row with records at the paper's protocol
    and a printed CI: ours − the paper's mean, against the half-width of the interval that difference falls in
    with probability ``level`` if both came from one distribution (:func:`analysis.intervals.difference_interval`,
    with the caption's number of runs). The paper's CI alone is not that interval: one run of ours falls outside
    a 5-run CI about half the time by chance."""
    runs = paper_runs(table)
    if runs is None:
        raise ValueError(f"the paper does not say how many runs {table!r} aggregates; "
                         f"tables that do: {sorted(t for t in TABLES if paper_runs(t))}")
    compared, label = compare_table(table, [metric]), METRIC_LABELS[metric]
    interval = f"{level:.0%} chance interval"
    rows = []
    for (_, row), values in zip(compared.iterrows(), compared.attrs["values"]):
        paper, ours = row[f"{label} paper"], values.get(metric)
        if not ours or not is_paper_protocol(row["protocol"]) or " ± " not in str(paper):
            continue
        paper_mean, paper_ci = split_cell(paper)
        delta, half = statistics.fmean(ours) - paper_mean, difference_interval(paper_ci, runs, ours, level)
        rows.append({"table": ref(table), "row": f"{row['model']} {row['method']} {row['grouping']} "
                     f"{row['target / λ_pen']}", "paper": paper, "ours": row[f"{label} ours"], "our runs": len(ours),
                     "Δ": delta, interval: half, "beyond chance": abs(delta) > half, "protocol": row["protocol"]})
    return pd.DataFrame(rows, columns=["table", "row", "paper", "ours", "our runs", "Δ", interval, "beyond chance",
                                       "protocol"])


def misses(table: pd.DataFrame, threshold: float = rules.AGREE_POINTS) -> pd.DataFrame:
    """The cells of a :func:`compare` table where ours differs from the paper's by more than ``threshold`` points."""
    rows = [{"row": f"{row['method']} {row['grouping']} {row['target / λ_pen']}", "metric": column[:-2],
             "paper": row[f"{column[:-2]} paper"], "ours": row[f"{column[:-2]} ours"], "Δ": row[column],
             "protocol": row["protocol"]}
            for _, row in table.iterrows() for column in table if column.endswith(" Δ")
            if isinstance(row[column], str) and abs(float(row[column])) > threshold]
    return pd.DataFrame(rows, columns=["row", "metric", "paper", "ours", "Δ", "protocol"])


def distance_to_target(grid_files: list[str | Path]) -> pd.DataFrame:
    """Every complete constrained record of the grids' runs (found by their parameters): how far its final
    expected densities are from their targets (the largest gap over its constraints, in points; positive: above)."""
    rows = []
    runs = {str(folder): (config, folder) for grid in grid_files for config, folder in grid_records(grid)
            if folder is not None}  # each once
    for config, folder in runs.values():
        if config.method != "constrained":
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


#: A method as a table's row names it, in words.
METHOD_NAMES = {"louizos": "Louizos et al.", "magnitude_pruning": "magnitude pruning"}


def row_name(method: str, grouping: str, setting: str = "") -> str:
    """A row of the paper's tables in words: ``Louizos et al., model-wise λ_pen 0.1/N``."""
    grouped = f", {grouping}-wise" if grouping in ("model", "layer") else ""
    return f"{METHOD_NAMES.get(method, method)}{grouped} {setting}".strip()


def compact(table: pd.DataFrame) -> pd.DataFrame:
    """A :func:`compare` table that fits the page: the row in words in one column (:func:`row_name`) and each
    difference next to our value (``1.50 ± 0.04 (+0.14)``)."""
    compacted = table[[c for c in ("model",) if c in table]].copy()
    compacted["row"] = [row_name(*names) for names in zip(table["method"], table["grouping"], table["target / λ_pen"])]
    for column in [c for c in ("fine-tuned (epochs)",) if c in table]:
        compacted[column] = table[column]
    for label in METRIC_LABELS.values():
        for side in ("paper", "ours"):
            if f"{label} {side}" in table:
                shown, delta = table[f"{label} {side}"], table.get(f"{label} Δ")
                if side == "ours" and delta is not None:
                    shown = shown.where(delta.isna(), shown + " (" + delta.fillna("") + ")")
                compacted[f"{label} {side}"] = shown
    for column in [c for c in ("protocol", "device", "runs") if c in table]:
        compacted[column] = table[column]
    compacted.attrs = dict(table.attrs)
    return compacted
