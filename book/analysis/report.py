"""How a page shows a table (:func:`show`), links a run's notebook and reads a record's layers and traces; every
cell comes from a record in ``runs/``."""

import json
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from paperlib.harness import plots, presets, records
from paperlib.harness.run_pages import run_label
from paperlib.harness.grids import complete_records, grid_records, grid_runs  # noqa: F401 (read as report's)


def _fmt(value) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    return f"{value:g}"


def sweep_command(grids) -> str:
    """The command that makes the records of these grid files."""
    return f"python -m paperlib.harness.sweeps {' '.join(map(str, grids))}"


def planned_runs(grids, method: str = "constrained") -> int:
    """How many runs of ``method`` the grid files ask for."""
    return sum(1 for grid in grids for config, _ in grid_runs(grid) if config.method == method)


def missing_runs(grids) -> pd.DataFrame:
    """One row per grid with runs not complete (a run whose parameters no complete record has): how many are
    missing and the sweep that makes them (it skips the complete ones). Empty when every run is in."""
    rows = []
    for grid in dict.fromkeys(grids):
        found = [folder for _, folder in grid_records(grid)]
        missing = sum(folder is None for folder in found)
        if missing:
            rows.append({"grid": str(grid), "missing": f"{missing} of {len(found)}", "command": sweep_command([grid])})
    return pd.DataFrame(rows, columns=["grid", "missing", "command"])


def select(runs: list[dict], **params) -> list[dict]:
    """The records among ``runs`` whose parameters have these values (``model="mlp", seed=0``), in order."""
    return [run for run in runs if all(run["params"].get(name) == value for name, value in params.items())]


def records_of(grids: str | list[str], **params) -> list[dict]:
    """Our complete records of one grid or several (in grid order, each once), found by their parameters
    (:func:`paperlib.harness.grids.grid_records`), whose parameters have these values."""
    grids = [grids] if isinstance(grids, str) else grids
    runs = {(str(run["path"]), run["params"]["run_name"]): run for grid in grids for run in complete_records(grid)}
    return select(list(runs.values()), **params)


def notebook_link(run_dir: str | Path, text: str = "notebook") -> str | None:
    """An HTML link to the run's executed notebook, relative to the page's folder (where jupyter-book runs it);
    None if it has none."""
    notebook = Path(run_dir) / "notebook.ipynb"
    if not notebook.exists():
        return None
    href = Path(os.path.relpath(notebook.with_suffix(".html"), Path.cwd())).as_posix()
    return f'<a href="{href}">{text}</a>'


def counterpart(record: dict, candidates: list[dict], differing: tuple[str, ...]) -> dict | None:
    """The first of ``candidates`` that trained what ``record`` trained but for the ``differing`` parameters,
    which must all differ (a clamped run's unclamped twin); compared as a resumed run compares its checkpoint
    (:func:`~paperlib.harness.presets.differing_parameters`), its name, experiment and machine aside."""
    config = presets.ExperimentConfig(**record["params"])
    unknown = [name for name in differing if name not in config.to_dict()]
    if unknown:
        raise ValueError(f"{unknown} are not parameters of a run (see paperlib.harness.presets.ExperimentConfig)")
    ignore = (*presets.NOT_COMPARED, "experiment", "run_name")
    return next((other for other in candidates
                 if set(presets.differing_parameters(other["params"], config, ignore)) == set(differing)), None)


def final_errors(grid_files: list[str | Path], preset: str) -> pd.DataFrame:
    """Every complete record of the grids made with ``preset``, once each, largest final error first: a collapsed
    run ends far above its best error (``lenet5_collapse``)."""
    rows, seen = [], set()
    for grid_file in grid_files:
        for config, run_dir in grid_records(grid_file):
            if config.preset != preset or run_dir is None or run_dir in seen:
                continue
            seen.add(run_dir)
            metrics = records.load_record(run_dir)["metrics"]
            rows.append({"run": notebook_link(run_dir, config.run_name) or config.run_name, "model": config.model,
                         "method": config.method, "grouping": config.grouping, "target": config.target,
                         "val. error final (%)": metrics["val_error_final"],
                         "val. error best (%)": metrics["val_error_best"]})
    columns = ["run", "model", "method", "grouping", "target", "val. error final (%)", "val. error best (%)"]
    return pd.DataFrame(rows, columns=columns).sort_values("val. error final (%)", ascending=False, ignore_index=True)


def complete_searches(grid_file: str | Path) -> list[dict]:
    """The complete bisection searches of a grid, in grid order: each one's ``metrics.json`` (its ``evaluations``
    list its trainings) with ``path`` added."""
    return [{**json.loads((run_dir / "metrics.json").read_text()), "path": run_dir}
            for _, run_dir in grid_runs(grid_file) if records.record_status(run_dir) == "complete"]


def grid_to_show(grid_files: list[str | Path]) -> tuple[str | Path, pd.DataFrame]:
    """Which of a figure's grids (most faithful protocol first) to draw, and each grid's progress. A figure
    draws one protocol, never a mix: the first grid whose runs are all complete, else the first with any."""
    done = []
    for grid_file in grid_files:
        found = [run_dir for _, run_dir in grid_records(grid_file)]
        done.append((grid_file, sum(run_dir is not None for run_dir in found), len(found)))
    chosen = next((d for d in done if d[1] == d[2]), None) or next((d for d in done if d[1]), done[0])
    progress = pd.DataFrame([{"grid": str(g), "complete": n, "planned": total, "shown": (g, n, total) == chosen}
                             for g, n, total in done])
    return chosen[0], progress


#: Columns with one value in every row move to the caption; hidden columns are left to the run's notebook.
CAPTION_COLUMNS = ("model", "method", "grouping", "epochs")
HIDDEN_COLUMNS = ("commit",)
#: Compact cells, so that a table of ten or so columns fits the book's text column at 1280 px.
TABLE_STYLES = [
    {"selector": "", "props": "font-size: 0.78em; border-collapse: collapse;"},
    {"selector": "th, td", "props": "padding: 0.15em 0.3em; vertical-align: top;"},
    {"selector": "th", "props": "white-space: normal; text-align: left;"},
    {"selector": "caption", "props": "caption-side: top; text-align: left;"},
]


def _unbroken(value):
    """yes/no as ✓/✗, and a mean ± CI on one line (a narrow column wrapped ``1.77 ± 0.08`` over three)."""
    if isinstance(value, (bool, np.bool_)):
        return "✓" if value else "✗"
    return value.replace(" ± ", "\u00a0±\u00a0") if isinstance(value, str) else value


def show(table: pd.DataFrame, digits: int = 2, caption: str | None = None):
    """A table for the page: numbers rounded, empty cells as dashes, compact. The caption is ``caption``, then
    the columns with one value in every row, then the command that makes the rows not complete yet; a ``status``
    column fills in the ``run`` link of a run without a notebook."""
    attrs = dict(table.attrs)
    table = table.dropna(axis=1, how="all").drop(columns=[c for c in HIDDEN_COLUMNS if c in table])
    if "status" in table:
        link = table.pop("run") if "run" in table else pd.Series(None, index=table.index, dtype=object)
        table.insert(0, "run", link.where(link.notna(), table.pop("status")))
    table.attrs = attrs
    constant = [c for c in CAPTION_COLUMNS
                if c in table and table[c].nunique() == 1
                and (c == "epochs" or table[c].notna().all())]
    values = {c: table[c].dropna().iloc[0] for c in constant}
    captions = [caption] if caption else []
    if constant:
        captions.append(", ".join(f"{c}: {v if isinstance(v, str) else _fmt(v)}" for c, v in values.items()))
    if "command" in table.attrs:
        captions.append(f"rows not complete yet: run <code>{table.attrs['command']}</code>")
    table = table.drop(columns=constant).apply(lambda column: column.map(_unbroken))
    floats = table.columns[[pd.api.types.is_float_dtype(t) for t in table.dtypes]]
    # A column of non-negative numbers (a learning rate, λ_pen, a density) with a non-zero value that ``digits``
    # would round to 0 keeps that value's significant digits: 7e-4 shows as 0.0007, never 0.00. A column that
    # can go negative is a difference: there a near-zero value is zero at the table's precision.
    small = [c for c in floats if (table[c].dropna() >= 0).all()
             and ((table[c] > 0) & (table[c] < 0.5 * 10 ** -digits)).any()]
    for column in floats.difference(small):
        table[column] = table[column].round(digits) + 0.0  # -0.004 shows as 0.00, not -0.00
    styled = table.style.format(precision=digits, na_rep="—")
    if small:
        def keep(value: float) -> str:
            tiny = value != 0 and abs(value) < 0.5 * 10 ** -digits
            return f"{value:.2g}" if tiny else f"{value:.{digits}f}"
        styled = styled.format(keep, subset=small, na_rep="—")
    whole = [c for c in table.columns if pd.api.types.is_float_dtype(table[c]) and table[c].notna().any()
             and (table[c].dropna() % 1 == 0).all()]  # targets, epochs: 30, not 30.00
    if whole:
        styled = styled.format("{:.0f}", subset=whole, na_rep="—")
    styled = (styled.hide(axis="index")
              .set_table_styles(TABLE_STYLES, overwrite=False))
    return styled.set_caption("; ".join(captions)) if captions else styled


def display_all(items) -> None:
    """Show outputs in order: a figure (then closed), Markdown (a ``str``) or any displayable; None is skipped."""
    from IPython.display import Markdown, display

    for item in items:
        if item is None:
            continue
        if isinstance(item, plt.Figure):
            display(item)
            plt.close(item)
        else:
            display(Markdown(item) if isinstance(item, str) else item)


def layer_densities(record: dict) -> pd.DataFrame:
    """Per gated layer: target, expected L0-density (eq. 3) and the share of groups whose median (eq. 9) is
    non-zero at the last saved epoch. They differ for undecided gates: one whose median is 0 is still active in
    up to half of the training samples."""
    metrics, medians = record["metrics"], record["gate_medians"]
    last = medians[max(medians, key=int)]
    targets = record["params"]["target"]
    rows = []
    for i, (layer, expected) in enumerate(metrics["l0_density_per_layer"].items()):
        values = last[layer]
        if isinstance(values, dict):  # unstructured layers store counts
            total = sum(values["histogram_20_bins"])
            kept = total - values["zero"]
        else:
            total, kept = len(values), sum(v > 0 for v in values)
        rows.append({"layer": layer, "target (%)": 100 * (targets[i] if isinstance(targets, list) else targets),
                     "expected L0-density (%)": 100 * expected, "groups kept at test time (%)": 100 * kept / total,
                     "groups kept": f"{kept} of {total}"})
    return pd.DataFrame(rows)


def layer_densities_by_run(runs: list[dict]) -> pd.DataFrame:
    """:func:`layer_densities` of runs of one model, a row per run: ``expected / kept`` (%) per layer and target."""
    rows = []
    for run in runs:
        table = layer_densities(run)
        name = run_label(run["params"])
        row = {"run": notebook_link(run["path"], name) or name}
        for _, layer in table.iterrows():
            header = f"{layer['layer']} ({layer['target (%)']:g}%)"
            row[header] = f"{layer['expected L0-density (%)']:.1f} / {layer['groups kept at test time (%)']:.1f}"
        rows.append(row)
    return pd.DataFrame(rows)


def plot_density_traces(runs: list[dict], label_key: str = "run_name") -> plt.Figure:
    """Model L0-density and multiplier against epochs for several runs on shared axes (Figs. 2, 5)."""
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.2))
    for i, run in enumerate(runs):
        steps = plots.steps_frame(run)
        if steps.empty:
            continue
        label = str(run["metrics"].get(label_key, run["params"]["run_name"]))
        axes[0].plot(steps["epoch"], 100 * steps["l0_density"], color=f"C{i}", label=label)
        target = run["params"]["target"]
        if isinstance(target, (int, float)):
            axes[0].axhline(100 * target, color=f"C{i}", ls="--", lw=0.8)
        if "lambda_0" in steps:
            axes[1].plot(steps["epoch"], steps["lambda_0"], color=f"C{i}", label=label)
    axes[0].set(xlabel="epoch", ylabel="model L0-density (%)")
    axes[1].set(xlabel="epoch", ylabel="Lagrange multiplier")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=9)
    fig.tight_layout()
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:  # under both panels, where ten run names do not cover the curves
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(2, len(labels)),
                   fontsize=9, frameon=False)
    return fig


def fractional_medians(record: dict) -> tuple[str, float]:
    """The first gated layer of a record and the share of its gate medians (eq. 9) strictly between 0 and 1 at the
    last saved epoch: the gates that scale their weights at test time instead of keeping or removing them."""
    last = record["gate_medians"][max(record["gate_medians"], key=int)]
    layer = next(iter(last))
    return layer, sum(0.0 < m < 1.0 for m in last[layer]) / len(last[layer])
