"""The paper's experiments beyond its structured MNIST and CIFAR-10 tables, as our records answer them
(``book/results_unstructured.md``: App. L's unstructured gates against magnitude pruning; ``book/results_beyond.md``:
Table 4's model sizes, App. E's bisection for a penalty, what was not run). A function whose numbers go into the
page's prose returns ``{glue name: number}``; the page glues and formats them.
"""

import functools
import json
import re

import matplotlib.pyplot as plt
import pandas as pd

from paperlib.harness import records, studies
from paperlib.harness.paper_rows import best_feasible_error, best_finetuned_error
from paperlib.method import counting
from paperlib.paper.models import build_model, display_name
from paperlib.paper.paper_numbers import ref
from paperlib.paper.paper_results import paper_cell, paper_results

from . import comparison, report, style
from .comparison import compare_table

#: App. L's target densities, in the order of its tables.
DENSITIES = (0.2, 0.1, 0.05, 0.01)
#: The densities at which the prose compares just-pruned models (at 1% every pruned model is near chance).
ABOVE_ONE_PERCENT = DENSITIES[:3]
#: The fine-tuning epochs of App. L's columns after fine-tuning.
FINETUNING_EPOCHS = (50, 100, 200)
#: Each model's table of App. L (Table 20, Table 21).
PRUNING_TABLES = {"mlp": "tab:mnist_unstructured_comparison_mlp", "lenet5": "tab:mnist_unstructured_comparison_lenet"}
#: App. L's runs at the paper's protocol: constrained and dense, and magnitude pruning.
UNSTRUCTURED_GRID, PRUNING_GRID = studies.grids(PRUNING_TABLES["mlp"], preset="paper")
#: The dense models ``benchmarks/pruning_variants.py`` prunes (its ``--init``), as its table names them.
INITIALISATIONS = {"fan_in": "fan-in init.", "fan_out": "fan-out init.",
                   "authors": "authors' init. (fan-out, ÷ (1 − ρ_init))"}
#: A glued number of ours while its record is missing (the page's table of what was not run gives the command).
NO_RECORD = float("nan")
#: Methods as the page names them.
METHOD_WORDS = {"magnitude_pruning": "magnitude pruning", "constrained": "L0, constrained", "dense": "dense",
                "penalized": "L0, penalized", "louizos": "Louizos et al."}


# --- App. L: magnitude pruning against the paper ---------------------------------------------------

def paper_pruned_error(model: str, density: float, finetune_epochs: int = 0) -> float:
    """The paper's best error (%) of ``model`` magnitude-pruned to ``density``, fine-tuned ``finetune_epochs``."""
    return paper_cell(PRUNING_TABLES[model], method="magnitude_pruning", target=density,
                      finetune_epochs=finetune_epochs, metric="val_error_best").value_num


def paper_dense_error(model: str) -> float:
    """The paper's best error (%) of the dense ``model`` of Table 20 or Table 21."""
    return paper_cell(PRUNING_TABLES[model], method="dense", metric="val_error_best").value_num


def read_pruning_variants(model: str, init: str = "fan_in", seed: int = 0) -> dict:
    """The record of ``benchmarks/pruning_variants.py`` for one dense model: its ``dense_val_error`` and each
    pruned copy's error before fine-tuning, ``pruned_val_error[str(density)][variant]``."""
    path = records.runs_dir() / "pruning_variants" / f"{model}-{init}-s{seed}.json"
    if not path.exists():
        raise FileNotFoundError(f"no record {path}; PAPERLIB_DATA=../shared/data python benchmarks/pruning_variants.py "
                                f"--model {model} --init {init} --seed {seed} writes it")
    return json.loads(path.read_text())


def readable(table: pd.DataFrame) -> pd.DataFrame:
    """A :func:`analysis.comparison.compact` table with its methods in words (:data:`METHOD_WORDS`)."""
    result = table.copy()
    for column in ("row", "method"):
        if column in result:
            for raw, words in METHOD_WORDS.items():
                result[column] = result[column].str.replace(raw, words, regex=False)
    result.attrs = dict(table.attrs)
    return result


@functools.cache
def compare_table_cached(label: str) -> pd.DataFrame:
    """:func:`analysis.comparison.compare_table` of one of App. L's tables, read once per page."""
    return compare_table(label)


def _mean(values) -> float | None:
    return sum(values) / len(values) if values else None


def _pruning_rows(model: str):
    """(row, our values, target label, the paper's best error) of the constrained and magnitude-pruning rows of
    App. L's table for ``model``."""
    table = compare_table_cached(PRUNING_TABLES[model])
    return [(row, values, row["target / λ_pen"], comparison.mean_of(str(row["val. error best (%) paper"])))
            for (_, row), values in zip(table.iterrows(), table.attrs["values"])
            if row["method"] in ("constrained", "magnitude_pruning")]


def error_density(model: str, finetune_epochs: int = 200) -> pd.DataFrame:
    """App. L's error against density for ``model``: per source (paper, ours), method and target, the density
    reached (%; a magnitude-pruned model has exactly its target) and the best error (%; magnitude pruning after
    ``finetune_epochs`` of fine-tuning); ours is the mean over our seeds."""
    rows = []
    for row, values, label, paper_error in _pruning_rows(model):
        pruned, target = row["method"] == "magnitude_pruning", float(label.rstrip("%"))
        if pruned and row["fine-tuned (epochs)"] != str(finetune_epochs):
            continue
        paper_density, densities = row.get("L0-density (%) paper"), values.get("l0_density")
        rows += [{"source": "paper", "method": row["method"], "target (%)": target, "error (%)": paper_error,
                  "density (%)": target if pruned or paper_density is None else comparison.mean_of(str(paper_density))},
                 {"source": "ours", "method": row["method"], "target (%)": target,
                  "density (%)": target if pruned or not densities else _mean(densities),
                  "error (%)": _mean(values.get("val_error_best"))}]
    return pd.DataFrame(rows, columns=["source", "method", "target (%)", "density (%)", "error (%)"])


#: The marker of each method in :func:`plot_error_density`.
METHOD_MARKERS = {"constrained": "o", "magnitude_pruning": "s"}


def plot_error_density(tables: dict[str, pd.DataFrame], finetune_epochs: int = 200) -> plt.Figure:
    """One panel per model (``{"MLP": error_density("mlp"), ...}``): best error against density on log scales,
    the paper's and ours in the book's styles (:mod:`analysis.style`), a marker per method."""
    fig, axes = plt.subplots(1, len(tables), figsize=(7, 3.4), squeeze=False)
    for ax, (title, table) in zip(axes[0], tables.items()):
        for source in ("paper", "ours"):
            for method, marker in METHOD_MARKERS.items():
                points = table[(table["source"] == source) & (table["method"] == method)].dropna(subset=["error (%)"])
                points = points.sort_values("density (%)")
                words = METHOD_WORDS[method] + (f", fine-tuned {finetune_epochs} ep"
                                                if method == "magnitude_pruning" else "")
                ax.plot(points["density (%)"], points["error (%)"], ms=7,
                        label=f"{source}: {words}", **style.line(source, marker=True, marker_shape=marker))
        ax.set(xscale="log", yscale="log", xlabel="density (%)", title=title)
        ax.set_xticks([1, 2, 5, 10, 20], ["1", "2", "5", "10", "20"])
        ax.set_yticks([0.5, 1, 2, 5, 10, 20, 50], ["0.5", "1", "2", "5", "10", "20", "50"])
        ax.grid(alpha=0.3, which="both")
    axes[0, 0].set_ylabel("best validation error (%)")
    style.legend_below(fig, axes[0, 0], bottom=0.2)
    return fig


def unstructured_summary(model: str) -> pd.DataFrame:
    """App. L's table for ``model``, one row per target: the constrained run's density and best error, and the
    magnitude-pruned model's best error just pruned and fine-tuned 200 epochs, the paper's beside ours (mean)."""
    cells = {}
    for row, values, target, paper in _pruning_rows(model):
        ours, cell = _mean(values.get("val_error_best")), cells.setdefault(target, {"target": target})
        if row["method"] == "constrained":
            method = "L0, constrained"
            cell.update({(method, "density paper"): comparison.mean_of(str(row["L0-density (%) paper"])),
                         (method, "density ours"): _mean(values.get("l0_density")),
                         (method, "error paper"): paper, (method, "error ours"): ours})
        elif row["fine-tuned (epochs)"] in ("0", "200"):
            when = "just pruned" if row["fine-tuned (epochs)"] == "0" else "fine-tuned 200 ep"
            cell.update({(f"magnitude pruning, {when}", "paper"): paper, (f"magnitude pruning, {when}", "ours"): ours})
    result = pd.DataFrame(list(cells.values())).set_index("target")
    result.columns = pd.MultiIndex.from_tuples(result.columns)
    return result.rename_axis(index="target").reset_index()


def not_run(reasons: dict[str, str]) -> pd.DataFrame:
    """What was not run, one row per command at the paper's protocol (:func:`analysis.comparison.compare`'s
    ``missing``): the paper's table, the rows it would fill and why not (``reasons``, by table label). Rows that
    differ only in their target or λ_pen share one command, a loop over the values."""
    groups: dict[tuple[str, str], dict] = {}
    for label, reason in reasons.items():
        table = compare_table(label)
        for _, row in table.iterrows():
            if row["method"] == "louizos" or comparison.has_protocol(row["protocol"]):
                continue
            grouping = row["grouping"] if row["method"] != "dense" and row["grouping"] != "—" else ""
            command = table.attrs["missing"][" ".join(part for part in (row["model"], row["method"], grouping,
                                                                         row["target / λ_pen"]) if part)]
            varying = re.search(r" -p (target|lmbda) (\S+)", command) if command.startswith("papermill") else None
            group = groups.setdefault((label, command.replace(varying[0], "") if varying else command),
                                      {"table": ref(label), "what": {}, "why not": reason, "values": [],
                                       "name": varying and varying[1]})
            words = METHOD_WORDS.get(row["method"], row["method"]) + (
                f", {row['grouping']}-wise" if row["grouping"] in ("model", "layer") else "")
            group["what"].setdefault(words, []).append(row["target / λ_pen"])
            group["values"] += [varying[2]] if varying else []
    rows = []
    for (_, stem), group in groups.items():
        name, values = group["name"], list(dict.fromkeys(group["values"]))
        command = stem if not values else f"{stem} -p {name} {values[0]}" if len(values) == 1 else \
            f"for v in {' '.join(values)}; do {stem} -p {name} $v; done"
        what = "; ".join(f"{words} {', '.join(dict.fromkeys(v for v in settings if v))}".strip()
                         for words, settings in group["what"].items())
        rows.append({"table": group["table"], "what": what, "why not": group["why not"], "command": command})
    return pd.DataFrame(rows, columns=["table", "what", "why not", "command"])


def pruning_variants_table(model: str) -> pd.DataFrame:
    """Error (%) before fine-tuning of every pruned copy of our dense ``model``s at App. L's densities, below the
    paper's: one row per dense model (initialisation, seed, error) and way of pruning."""
    rows = {("paper", "as printed (App. L)"): [paper_pruned_error(model, density) for density in DENSITIES]}
    for init, name in INITIALISATIONS.items():
        for path in sorted((records.runs_dir() / "pruning_variants").glob(f"{model}-{init}-s*.json")):
            variants = json.loads(path.read_text())
            dense = f"ours, {name}, seed {variants['seed']}, dense {variants['dense_val_error']:.2f}%"
            for variant in variants["pruned_val_error"][str(DENSITIES[0])]:
                rows[(dense, variant)] = [variants["pruned_val_error"][str(d)][variant] for d in DENSITIES]
    table = pd.DataFrame(list(rows.values()), columns=[f"{100 * density:g}%" for density in DENSITIES])
    table.index = pd.MultiIndex.from_tuples(rows, names=["dense model", "pruned"])
    return table


def _pct(density: float) -> str:
    return f"{100 * density:g}"  # a glue name's suffix: 0.2 -> "20", 0.05 -> "5"


def pruned_numbers(mlp: dict[str, dict], lenet5: dict) -> dict[str, float]:
    """Our dense models and their copies before fine-tuning (:func:`read_pruning_variants`; ``mlp`` by ``--init``),
    beside the paper's: per model, the dense error (``<model>_dense``, the paper's ``<model>_paper_dense``) and, at
    20, 10 and 5%, every layer pruned (``<model>_just_pruned_<d>``, the paper's ``<model>_paper_just_pruned_<d>``)
    and one global threshold (``<model>_global_<d>``). Which MLP layer makes its error: the output layer alone
    (``mlp_out_<d>``), the most the first or second layer alone costs down to 10% (``mlp_first_two_cost``), all but
    the output layer (``mlp_but_output_<d>``), the paper's 1% (``mlp_paper_1``). The other initialisations' dense
    and 20% errors (``mlp_<init>_dense``, ``mlp_<init>_pruned_20``); LeNet5's conv1 alone at 20%."""
    numbers = {}
    for model, variants in (("mlp", mlp["fan_in"]), ("lenet5", lenet5)):
        numbers |= {f"{model}_dense": variants["dense_val_error"], f"{model}_paper_dense": paper_dense_error(model)}
        for density in ABOVE_ONE_PERCENT:
            errors = variants["pruned_val_error"][str(density)]
            numbers |= {f"{model}_just_pruned_{_pct(density)}": errors["every layer"],
                        f"{model}_paper_just_pruned_{_pct(density)}": paper_pruned_error(model, density),
                        f"{model}_global_{_pct(density)}": errors["one global threshold"]}
    errors = mlp["fan_in"]["pruned_val_error"]
    first_two = max(errors[str(density)][f"fc{layer} alone"] for density in DENSITIES[:2] for layer in (1, 2))
    numbers |= {"mlp_out_20": errors["0.2"]["fc3 alone"], "mlp_out_10": errors["0.1"]["fc3 alone"],
                "mlp_first_two_cost": first_two - mlp["fan_in"]["dense_val_error"],
                **{f"mlp_but_output_{_pct(d)}": errors[str(d)]["all but the output layer"] for d in DENSITIES},
                "mlp_paper_1": paper_pruned_error("mlp", 0.01)}
    for init, variants in mlp.items():
        if init != "fan_in":
            numbers |= {f"mlp_{init}_dense": variants["dense_val_error"],
                        f"mlp_{init}_pruned_20": variants["pruned_val_error"]["0.2"]["every layer"]}
    return numbers | {"lenet5_conv1_20": lenet5["pruned_val_error"]["0.2"]["conv1 alone"]}


def constrained_runs(grid_file: str, target: float, key: str = "model") -> dict[str, dict]:
    """The complete constrained records of a grid at ``target``, by their ``key`` parameter (model, grouping)."""
    return {run["params"][key]: run for run in report.select(report.complete_records(grid_file),
                                                             method="constrained", target=target)}


def at_one_percent(constrained: dict[str, dict]) -> dict[str, float]:
    """The constrained models asked for 1% on every layer (``constrained``: by model), in %: the MLP's model,
    first two layers' (the higher) and output layer's density and its final error (where a layer misses its
    target the table gives the run no best error); LeNet5's model, lowest and highest layer density and its best
    error at the epochs where every constraint holds."""
    mlp, lenet5 = (constrained[model]["metrics"] for model in ("mlp", "lenet5"))
    mlp_layers, lenet5_layers = ([100 * d for d in m["l0_density_per_layer"].values()] for m in (mlp, lenet5))
    return {"mlp1_density": 100 * mlp["l0_density"], "mlp1_first_two": max(mlp_layers[:2]),
            "mlp1_output": mlp_layers[2], "mlp1_final_error": mlp["val_error_final"],
            "lenet1_density": 100 * lenet5["l0_density"], "lenet1_lowest": min(lenet5_layers),
            "lenet1_highest": max(lenet5_layers), "lenet1_best": best_feasible_error(constrained["lenet5"])}


def magnitude_pruning_runs(model: str) -> list[dict]:
    """The complete magnitude-pruning records of ``model`` at the paper's protocol, in grid order."""
    return report.select(report.complete_records(PRUNING_GRID), model=model)


def mlp_pruning_against_paper(table: pd.DataFrame) -> dict[str, float]:
    """Our magnitude-pruned MLP against the paper's (Table 20's comparison): the seeds behind each mean, and the
    lowest and highest of ours minus the paper's after 50 or more epochs of fine-tuning, at 20 to 5% and at 1%."""
    rows = table[(table["method"] == "magnitude_pruning") & table["val. error best (%) ours"].notna()]
    above_one = rows["target / λ_pen"] != "1%"
    finetuned = rows["fine-tuned (epochs)"] != "0"
    deltas = rows["val. error best (%) Δ"].astype(float)
    return {"mlp_pruned_seeds": int(re.search(r"(\d+) seeds?", rows["protocol"].iloc[0])[1]),
            "mlp_finetuned_low": deltas[above_one & finetuned].min(),
            "mlp_finetuned_high": deltas[above_one & finetuned].max(),
            "mlp1_finetuned_low": deltas[~above_one & finetuned].min(),
            "mlp1_finetuned_high": deltas[~above_one & finetuned].max()}


def finetuned_errors(record: dict, epochs=FINETUNING_EPOCHS) -> list[float]:
    """A magnitude-pruning record's best error after each of ``epochs`` of fine-tuning (the best so far)."""
    return [best_finetuned_error(record, finetune_epochs) for finetune_epochs in epochs]


def mlp_one_percent_by_seed(runs: list[dict]) -> dict[str, float]:
    """The MLP magnitude-pruned to 1%: how far apart its seeds end after 200 epochs of fine-tuning (points) and
    how much the paper's cell falls from 100 to 200 epochs."""
    at_one = report.select(runs, target=0.01)
    if not at_one:
        raise ValueError(f"no magnitude-pruning record at 1% among the {len(runs)} given: "
                         f"python -m paperlib.harness.sweeps {PRUNING_GRID}")
    last = [finetuned_errors(run)[-1] for run in at_one]
    return {"mlp1_seed_spread": max(last) - min(last),
            "mlp1_paper_drop": paper_pruned_error("mlp", 0.01, 100) - paper_pruned_error("mlp", 0.01, 200)}


def lenet5_finetuning(runs: list[dict]) -> dict[str, float]:
    """The magnitude-pruned LeNet5 through fine-tuning beside the paper's: at 20%, after 1 and 200 epochs; at 1%,
    after 200 (the paper's is the same before and after); :data:`NO_RECORD` where ``runs`` has none."""
    by_target = {run["params"]["target"]: run for run in runs}
    at_20, at_1 = by_target.get(0.2), by_target.get(0.01)
    return {"lenet5_ft_1": NO_RECORD if at_20 is None else best_finetuned_error(at_20, 1),
            "lenet5_ft_200": NO_RECORD if at_20 is None else best_finetuned_error(at_20, 200),
            "lenet5_paper_ft_200": paper_pruned_error("lenet5", 0.2, 200),
            "lenet5_1_ft_200": NO_RECORD if at_1 is None else best_finetuned_error(at_1, 200),
            "lenet5_1_paper": paper_pruned_error("lenet5", 0.01, 200)}


def dense_baseline(model: str) -> dict | None:
    """App. L's dense ``model`` at the paper's protocol (found by its parameters), or None while it has no record."""
    found = [folder for config, folder in report.grid_records(UNSTRUCTURED_GRID)
             if config.method == "dense" and config.model == model]
    if not found:
        raise ValueError(f"{UNSTRUCTURED_GRID} has no dense {model} run")
    return records.load_record(found[0]) if found[0] is not None else None


def dense_epochs(history: list[dict]) -> list[tuple[str, str, str]]:
    """(epoch, validation error, training loss) of each epoch of a dense training, as recorded."""
    return [(row["epoch"], row["val_error"], row["train_loss"]) for row in history if row["phase"] in ("init", "train")]


def dense_phases(runs: list[dict], baseline: dict | None) -> pd.DataFrame:
    """The dense model each magnitude-pruning record pruned: whose dense phase (``first_phase_of``: another
    target's run, else its own), where it trained, its error and the pruned model's; and whether its own dense
    phase is the ``baseline`` record's training epoch by epoch (None where it pruned another's)."""
    targets = {run["params"].get("run_name"): run["params"]["target"] for run in runs}
    rows = []
    for run in runs:
        metrics, history = run["metrics"], run["history"]
        shared = metrics.get("first_phase_of")
        end_of_dense = [row for row in history if row["phase"] == "train"][-1]
        pruned = next(row for row in history if row["phase"] == "pruned")
        same = None if baseline is None or "first_phase_of" in metrics else \
            dense_epochs(history) == dense_epochs(baseline["history"])
        phase = "its own" if shared is None else \
            f"the {100 * targets[shared]:g}% run's" if shared in targets else shared
        rows.append({"target": f"{100 * run['params']['target']:g}%", "dense phase": phase,
                     "trained on": metrics["device_name"], "dense error (%)": float(end_of_dense["val_error"]),
                     "just pruned (%)": float(pruned["val_error"]), "dense phase = dense baseline record": same})
    return pd.DataFrame(rows, columns=["target", "dense phase", "trained on", "dense error (%)", "just pruned (%)",
                                       "dense phase = dense baseline record"])


# --- Table 4: the dense models' sizes ----------------------------------------------------------------

#: Table 4's models as we build and count them: (our name, classes of its head, input shape). Each has the head
#: of the dataset it trains on here: WideResNet-28-10 has CIFAR-10's 10 classes, where the paper's 36.5M
#: include CIFAR-100's 100 (book/errata.md).
MODEL_STATS = (("mlp", 10, (1, 28, 28)), ("lenet5", 10, (1, 28, 28)), ("wrn-28-10", 10, (3, 32, 32)),
               ("resnet18", 200, (3, 64, 64)), ("resnet50", 1000, (3, 224, 224)))


def model_statistics(models: tuple[tuple[str, int, tuple[int, ...]], ...] = MODEL_STATS) -> pd.DataFrame:
    """Table 4 beside our counts (:mod:`paperlib.method.counting`, the paper's convention): each dense model's
    parameters and MACs, its input and the classes of its head."""
    printed = paper_results()
    printed = printed[printed["table"] == "tab:model_stats"].set_index(["model", "metric"])["value"]
    rows = []
    for model, classes, shape in models:
        dense, name = build_model(model, classes, gated=False), display_name(model)
        rows.append({"model": name, "params paper": printed.get((name, "params_count")),
                     "params ours": f"{counting.count_params(dense):,}",
                     "MACs paper": printed.get((name, "macs_count")),
                     "MACs ours": f"{counting.count_macs(dense, shape, 'paper'):,}",
                     "input": "×".join(map(str, shape)), "classes": classes})
    return pd.DataFrame(rows)


# --- App. E: a bisection for a penalty against one constrained run ---------------------------------

BISECTION_GRID, = studies.grids("app:bisection")
#: A qualifier of ``paper_results.csv`` in words.
QUALIFIER_WORDS = {">=": "at least"}
#: The constrained MLP the searches are compared with (Table 10 at the paper's protocol).
MLP_CONTROL_GRID = studies.grids("tab:mlp_control", preset="paper")[0]


def paper_bisection_trainings() -> tuple[str, str]:
    """How many trainings App. E says a bisection needs: (qualifier, number) as printed, ``(">=", "6")``."""
    claim = paper_results().query("table == 'app:bisection' and metric == 'training_runs_needed'").iloc[0]
    return claim["qualifier"], claim["value"]


def _closest(search: dict) -> dict:
    """The training of a search whose density came closest to its target."""
    return min(search["evaluations"], key=lambda evaluation: abs(evaluation["l0_density"] - search["target"]))


def plot_bisections(searches: list[dict]) -> plt.Figure:
    """Figure 5 from our searches: each training's λ_pen and L0-density, labelled by its iteration (the two
    endpoints are 0), the target ± tolerance as a band; one panel per search."""
    if not searches:
        raise ValueError(f"no search to plot: python -m paperlib.harness.sweeps {BISECTION_GRID}")
    fig, axes = plt.subplots(1, len(searches), figsize=(min(7.0, 3.5 * len(searches)), 3.2), squeeze=False)
    for ax, search in zip(axes[0], searches):
        points = search["evaluations"]
        ax.scatter([e["lmbda"] for e in points], [100 * e["l0_density"] for e in points], marker="*", s=70)
        for e in points:  # odd iterations labelled below left, so that the last, close ones stay readable
            ax.annotate(str(e["iteration"]), (e["lmbda"], 100 * e["l0_density"]), textcoords="offset points",
                        xytext=(4, 4) if e["iteration"] % 2 == 0 else (-11, -13))
        target, tolerance = 100 * search["target"], 100 * search["tolerance"]
        ax.axhspan(target - tolerance, target + tolerance, color="C2", alpha=0.25)
        ax.set(xscale="log", ylim=(0, 100), xlabel="λ_pen", ylabel="L0-density (%)",
               title=f"{search['grouping']}-wise: {search['num_trainings']} trainings")
    fig.tight_layout()
    return fig


def bisection_rows(grid_file: str = BISECTION_GRID) -> pd.DataFrame:
    """One row per search of the grid: the trainings App. E says a search needs and ours, whether it converged,
    the λ_pen that came closest to the target and its density; ``attrs["command"]`` makes a missing search."""
    searches = {search["grouping"]: search for search in report.complete_searches(grid_file)}
    qualifier, value = paper_bisection_trainings()
    rows = []
    for config, folder in report.grid_runs(grid_file):
        row = {"grouping": config.grouping, "trainings paper": f"{qualifier} {value}"}
        search = searches.get(config.grouping)
        if search:
            closest = _closest(search)
            row.update({"trainings ours": search["num_trainings"], "converged": search["converged"],
                        "λ_pen found": f"{closest['lmbda']:.4g}", "L0-density (%)": 100 * closest["l0_density"],
                        "run": report.notebook_link(folder)})
        else:
            row.update({"trainings ours": None, "run": records.record_status(folder) or "not run"})
        rows.append(row)
    table = pd.DataFrame(rows)
    if len(searches) < len(rows):
        table.attrs["command"] = f"python -m paperlib.harness.sweeps {grid_file}"
    return table


def bisection_against_constraint(searches: list[dict], constrained: dict[str, dict]) -> pd.DataFrame:
    """App. E's point as a table: per grouping, the trainings our bisection search took to land within its
    tolerance of 50% beside the one constrained MLP run asked for 50% (``constrained``, by grouping)."""
    rows = []
    for search in searches:
        closest = _closest(search)
        rows.append({"grouping": search["grouping"], "method": "penalized, bisection on λ_pen",
                     "trainings": search["num_trainings"], "epochs each": search["epochs"],
                     "L0-density (%)": 100 * closest["l0_density"], "error final (%)": None})
    for grouping, run in sorted(constrained.items(), reverse=True):
        rows.append({"grouping": grouping, "method": "constrained, target 50%", "trainings": 1,
                     "epochs each": run["metrics"]["epochs_completed"], "L0-density (%)": 100 * run["metrics"]["l0_density"],
                     "error final (%)": run["metrics"]["val_error_final"]})
    return pd.DataFrame(rows, columns=["grouping", "method", "trainings", "epochs each", "L0-density (%)",
                                       "error final (%)"])
