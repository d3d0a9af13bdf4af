"""The paper's experiments beyond its structured MNIST and CIFAR-10 tables, as our records answer them
(the pages ``book/results_unstructured.md`` and ``book/results_beyond.md``).

Most of it is App. L on MNIST: one gate per weight against magnitude pruning of a trained dense model
(Table 20 for the MLP, Table 21 for LeNet5). The page finds our magnitude-pruned models, before
fine-tuning, much worse than the paper's, and fine-tuning erasing the difference. The functions below
give the numbers behind it: our pruned copies of one dense model (``benchmarks/pruning_variants.py``,
:func:`pruning_variants_table`), the magnitude-pruning records through fine-tuning, the dense model each
of those pruned (:func:`dense_phases`), and the constrained runs at 1%. The rest: the dense models'
sizes against Table 4 (:func:`model_statistics`), and App. E's bisection for a penalty (Figure 5)
against one constrained run (:func:`bisection_rows`).

A function whose numbers go into the page's prose returns them as ``{glue name: text}``, formatted as
the prose prints them; the page glues them (myst-nb). Nothing here invents a number: ours come from the
records in ``runs/``, the paper's from ``paper_results.csv``.
"""

import json
import re

import matplotlib.pyplot as plt
import pandas as pd

from paperlib.harness import records, studies
from paperlib.method import counting
from . import report
from .comparison import mean_of
from paperlib.harness.paper_rows import best_feasible_error, best_finetuned_error
from paperlib.paper.models import build_model
from paperlib.paper.paper_numbers import ref
from paperlib.paper.paper_results import paper_cell, paper_results

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
#: What a glued number of ours says while its record is missing (the page says which and how to make it).
NO_RECORD = "(no record yet)"


def _in_words(values, digits: int = 2) -> str:
    """Numbers for a sentence: ``"1.00, 2.00 and 3.00"``."""
    return report.in_words(f"{value:.{digits}f}" for value in values)


# --------------------------------------------------------------------------- #
# App. L: magnitude pruning against the paper
# --------------------------------------------------------------------------- #

def paper_pruned_error(model: str, density: float, finetune_epochs: int = 0) -> float:
    """The paper's best validation error (%) of ``model`` magnitude-pruned to ``density`` and fine-tuned for
    ``finetune_epochs`` epochs (0: just pruned), as Table 20 (MLP) or Table 21 (LeNet5) prints it."""
    return paper_cell(PRUNING_TABLES[model], method="magnitude_pruning", target=density,
                      finetune_epochs=finetune_epochs, metric="val_error_best").value_num


def paper_dense_error(model: str) -> float:
    """The paper's best validation error (%) of the dense ``model`` of Table 20 or Table 21."""
    return paper_cell(PRUNING_TABLES[model], method="dense", metric="val_error_best").value_num


def read_pruning_variants(model: str, init: str = "fan_in", seed: int = 0) -> dict:
    """The record of ``benchmarks/pruning_variants.py`` for one dense model: its validation error
    (``dense_val_error``) and that of each pruned copy before fine-tuning,
    ``pruned_val_error[str(density)][variant]`` (App. L)."""
    path = records.runs_dir() / "pruning_variants" / f"{model}-{init}-s{seed}.json"
    if not path.exists():
        raise FileNotFoundError(f"no record {path}; PAPERLIB_DATA=../shared/data python benchmarks/pruning_variants.py "
                                f"--model {model} --init {init} --seed {seed} writes it")
    return json.loads(path.read_text())


def _pruned(variants: dict, variant: str, densities=ABOVE_ONE_PERCENT) -> list[float]:
    return [variants["pruned_val_error"][str(density)][variant] for density in densities]


def pruning_variants_table(model: str) -> pd.DataFrame:
    """Validation error (%) before fine-tuning of every pruned copy of our dense ``model``s, at App. L's four
    densities, below the paper's (Table 20 or Table 21): one row per dense model (initialisation, seed, its
    error) and way of pruning (every layer, one layer alone, all but the output layer, one global threshold)."""
    rows = {("paper", "as printed (App. L)"): [paper_pruned_error(model, density) for density in DENSITIES]}
    for init, name in INITIALISATIONS.items():
        for path in sorted((records.runs_dir() / "pruning_variants").glob(f"{model}-{init}-s*.json")):
            variants = json.loads(path.read_text())
            dense = f"ours, {name}, seed {variants['seed']}, dense {variants['dense_val_error']:.2f}%"
            for variant in variants["pruned_val_error"][str(DENSITIES[0])]:
                rows[(dense, variant)] = _pruned(variants, variant, DENSITIES)
    table = pd.DataFrame(list(rows.values()), columns=[f"{100 * density:g}%" for density in DENSITIES])
    table.index = pd.MultiIndex.from_tuples(rows, names=["dense model", "pruned"])
    return table


def pruned_copies(model: str, variants: dict) -> dict[str, str]:
    """Our dense ``model`` and its pruned copies before fine-tuning, beside the paper's (App. L): the dense error
    (``<model>_dense``; the paper's ``<model>_paper_dense``) and, at 20, 10 and 5%, every layer pruned as App. L
    says (``<model>_just_pruned``; the paper's ``<model>_paper_just_pruned``) and one threshold over all layers
    (``<model>_global``)."""
    return {f"{model}_dense": f"{variants['dense_val_error']:.2f}",
            f"{model}_just_pruned": _in_words(_pruned(variants, "every layer")),
            f"{model}_paper_just_pruned": _in_words(paper_pruned_error(model, d) for d in ABOVE_ONE_PERCENT),
            f"{model}_global": _in_words(_pruned(variants, "one global threshold")),
            f"{model}_paper_dense": f"{paper_dense_error(model):.2f}"}


def mlp_layers_pruned_alone(variants: dict) -> dict[str, str]:
    """Which of the MLP's layers makes its just-pruned error: the output layer pruned alone to 20%
    (``mlp_out_20``) and to 10% (``mlp_out_10``); the most that the first or second layer alone costs down to
    10%, in points over the dense model (``mlp_first_two_cost``); every layer but the output pruned at 20, 10
    and 5% (``mlp_but_output``) and at 1% (``mlp_but_output_1``), against the paper's 1% (``mlp_paper_1``,
    Table 20)."""
    errors = variants["pruned_val_error"]
    first_two = max(errors[str(density)][f"fc{layer} alone"] for density in DENSITIES[:2] for layer in (1, 2))
    return {"mlp_out_20": f"{errors['0.2']['fc3 alone']:.1f}", "mlp_out_10": f"{errors['0.1']['fc3 alone']:.0f}",
            "mlp_first_two_cost": f"{first_two - variants['dense_val_error']:.1f}",
            "mlp_but_output": _in_words(_pruned(variants, "all but the output layer")),
            "mlp_but_output_1": f"{errors['0.01']['all but the output layer']:.1f}",
            "mlp_paper_1": f"{paper_pruned_error('mlp', 0.01):.2f}"}


def initialisations(variant_records: list[dict]) -> dict[str, str]:
    """Dense models initialised otherwise than ours (``--init``): each one's dense error
    (``<model>_<init>_dense``) and its error pruned in every layer to 20% (``<model>_<init>_pruned_20``)."""
    numbers = {}
    for variants in variant_records:
        name = f"{variants['model']}_{variants['init']}"
        numbers[f"{name}_dense"] = f"{variants['dense_val_error']:.2f}"
        numbers[f"{name}_pruned_20"] = f"{variants['pruned_val_error']['0.2']['every layer']:.2f}"
    return numbers


def lenet5_first_convolution(variants: dict) -> dict[str, str]:
    """LeNet5's first convolution (500 weights) pruned alone to 20%, the others dense (``lenet5_conv1_20``)."""
    return {"lenet5_conv1_20": f"{variants['pruned_val_error']['0.2']['conv1 alone']:.2f}"}


def constrained_runs(grid_file: str, target: float, key: str = "model") -> dict[str, dict]:
    """The complete constrained records of a grid at ``target``, by their ``key`` metric (model, grouping)."""
    return {run["metrics"][key]: run for run in report.complete_records(grid_file)
            if run["metrics"]["method"] == "constrained" and run["metrics"]["target"] == target}


def mlp_at_one_percent(record: dict) -> dict[str, str]:
    """The constrained MLP asked for 1% on every layer (Table 20): its final model density (``mlp1_density``),
    its first two layers' (``mlp1_first_two``) and its output layer's (``mlp1_output``), in %, and its final
    error (``mlp1_final_error``): where a layer misses its target, the table gives the run no best error."""
    metrics = record["metrics"]
    layers = [100 * density for density in metrics["l0_density_per_layer"].values()]
    return {"mlp1_density": f"{100 * metrics['l0_density']:.2f}", "mlp1_first_two": _in_words(layers[:2], 1),
            "mlp1_output": f"{layers[2]:.1f}", "mlp1_final_error": f"{metrics['val_error_final']:.2f}"}


def lenet5_at_one_percent(record: dict) -> dict[str, str]:
    """The constrained LeNet5 asked for 1% on every layer (Table 21): its final model density
    (``lenet1_density``), its lowest and highest layer's (``lenet1_layers``), in %, and its best error at the
    epochs where every constraint holds (``lenet1_best``)."""
    metrics = record["metrics"]
    layers = [100 * density for density in metrics["l0_density_per_layer"].values()]
    return {"lenet1_density": f"{100 * metrics['l0_density']:.2f}",
            "lenet1_layers": f"{min(layers):.2f} and {max(layers):.2f}",
            "lenet1_best": f"{best_feasible_error(record):.2f}"}


def magnitude_pruning_runs(model: str) -> list[dict]:
    """The complete magnitude-pruning records of ``model`` at the paper's protocol, in grid order."""
    return [run for run in report.complete_records(PRUNING_GRID) if run["metrics"]["model"] == model]


def mlp_pruning_against_paper(table: pd.DataFrame) -> dict[str, str]:
    """Our magnitude-pruned MLP against the paper's, from the comparison of Table 20
    (:func:`analysis.comparison.compare_table`), over its rows with our records: the seeds behind each mean
    (``mlp_pruned_seeds``); our mean best error before fine-tuning at 20, 10 and 5% (``mlp_just_pruned_mean``);
    and the range of ours minus the paper's after 50 or more epochs of fine-tuning, at those densities
    (``mlp_finetuned_deltas``) and at 1% (``mlp1_finetuned_deltas``)."""
    rows = table[(table["method"] == "magnitude_pruning") & table["val. error best (%) ours"].notna()]
    above_one = rows["target / λ_pen"] != "1%"
    finetuned = rows["fine-tuned (epochs)"] != "0"
    return {"mlp_pruned_seeds": re.search(r"\d+ seeds?", rows["protocol"].iloc[0])[0],
            "mlp_just_pruned_mean": _in_words(rows[above_one & ~finetuned]["val. error best (%) ours"].map(mean_of)),
            "mlp_finetuned_deltas": _range(rows[above_one & finetuned]["val. error best (%) Δ"]),
            "mlp1_finetuned_deltas": _range(rows[~above_one & finetuned]["val. error best (%) Δ"])}


def _range(deltas: pd.Series) -> str:
    deltas = deltas.astype(float)
    return f"{deltas.min():+.2f} to {deltas.max():+.2f}"


def finetuned_errors(record: dict, epochs=FINETUNING_EPOCHS) -> list[float]:
    """A magnitude-pruning record's best validation error after each of ``epochs`` epochs of fine-tuning
    (App. L's columns: the best so far)."""
    return [best_finetuned_error(record, finetune_epochs) for finetune_epochs in epochs]


def mlp_one_percent_by_seed(runs: list[dict]) -> dict[str, str]:
    """The MLP magnitude-pruned to 1%, seed by seed (Table 20): each seed's best error after 50, 100 and 200
    epochs of fine-tuning (``mlp1_ft_seeds``) and how far apart the seeds end (``mlp1_seed_spread``), beside
    the paper's cells (``mlp1_ft_paper``) and how much its own cell falls from 100 to 200 epochs
    (``mlp1_paper_drop``). ``runs``: the MLP's magnitude-pruning records."""
    at_one = sorted((run for run in runs if run["metrics"]["target"] == 0.01), key=lambda run: run["params"]["seed"])
    if not at_one:
        raise ValueError(f"no magnitude-pruning record at 1% among the {len(runs)} given: "
                         f"python -m paperlib.harness.sweeps {PRUNING_GRID}")
    paper = [paper_pruned_error("mlp", 0.01, epochs) for epochs in FINETUNING_EPOCHS]
    last = [finetuned_errors(run)[-1] for run in at_one]
    return {"mlp1_ft_seeds": "; ".join(f"seed {run['params']['seed']}: {_in_words(finetuned_errors(run))}"
                                       for run in at_one),
            "mlp1_ft_paper": _in_words(paper), "mlp1_paper_drop": f"{paper[1] - paper[2]:.1f}",
            "mlp1_seed_spread": f"{max(last) - min(last):.1f}"}


def lenet5_finetuning(runs: list[dict]) -> dict[str, str]:
    """The magnitude-pruned LeNet5 through fine-tuning, beside the paper's (Table 21). At 20%: its best error
    after one epoch (``lenet5_ft_1``) and after 50, 100 and 200 (``lenet5_ft``; the paper's
    ``lenet5_paper_ft``). At 1%: its best error before fine-tuning and after 50, 100 and 200 epochs
    (``lenet5_1_ft``; the paper's ``lenet5_1_paper``). Ours is :data:`NO_RECORD` where ``runs`` (LeNet5's
    magnitude-pruning records) has none at that density."""
    by_target = {run["metrics"]["target"]: run for run in runs}
    at_20, at_1 = by_target.get(0.2), by_target.get(0.01)
    from_zero = (0, *FINETUNING_EPOCHS)
    return {"lenet5_ft_1": NO_RECORD if at_20 is None else f"{best_finetuned_error(at_20, 1):.2f}",
            "lenet5_ft": NO_RECORD if at_20 is None else _in_words(finetuned_errors(at_20)),
            "lenet5_paper_ft": _in_words(paper_pruned_error("lenet5", 0.2, e) for e in FINETUNING_EPOCHS),
            "lenet5_1_ft": NO_RECORD if at_1 is None else _in_words(finetuned_errors(at_1, from_zero)),
            "lenet5_1_paper": _in_words(paper_pruned_error("lenet5", 0.01, e) for e in from_zero)}


def missing_pruning_records(runs: list[dict], model: str) -> str:
    """Markdown naming App. L's densities at which ``runs`` (``model``'s magnitude-pruning records) has no
    record, with the command that makes them; empty when every density has one."""
    done = {run["metrics"]["target"] for run in runs}
    missing = [f"{100 * density:g}%" for density in DENSITIES if density not in done]
    if not missing:
        return ""
    return report.no_record_line(f"the magnitude-pruned {model} at {report.in_words(missing)} "
                                 "at the paper's protocol", [PRUNING_GRID])


def dense_baseline(model: str) -> dict | None:
    """App. L's dense ``model`` at the paper's protocol (the dense row of Table 20 or Table 21), or None while
    its record is not complete."""
    folder = next((folder for config, folder in report.grid_runs(UNSTRUCTURED_GRID)
                   if config.method == "dense" and config.model == model), None)
    if folder is None:
        raise ValueError(f"{UNSTRUCTURED_GRID} has no dense {model} run")
    return records.load_record(folder) if records.record_status(folder) == "complete" else None


def dense_epochs(history: list[dict]) -> list[tuple[str, str, str]]:
    """(epoch, validation error, training loss) of each epoch of a dense training, as recorded."""
    return [(row["epoch"], row["val_error"], row["train_loss"]) for row in history if row["phase"] in ("init", "train")]


def dense_phases(runs: list[dict], baseline: dict | None) -> pd.DataFrame:
    """The dense model each magnitude-pruning record pruned (App. L prunes a trained dense model): its target,
    whose dense phase it pruned (``first_phase_of``: another target's run, else its own), the CPU that trained
    it, the dense model's error at the end of that phase and the pruned model's before fine-tuning; and whether
    its own dense phase is the ``baseline`` record's training, epoch by epoch (None where it pruned another
    run's, or without a baseline)."""
    rows = []
    for run in runs:
        metrics, history = run["metrics"], run["history"]
        end_of_dense = [row for row in history if row["phase"] == "train"][-1]
        pruned = next(row for row in history if row["phase"] == "pruned")
        same = None if baseline is None or "first_phase_of" in metrics else \
            dense_epochs(history) == dense_epochs(baseline["history"])
        rows.append({"target": f"{100 * metrics['target']:g}%", "dense phase": metrics.get("first_phase_of", "its own"),
                     "trained on": metrics["device_name"], "dense error (%)": float(end_of_dense["val_error"]),
                     "just pruned (%)": float(pruned["val_error"]), "dense phase = dense baseline record": same})
    return pd.DataFrame(rows, columns=["target", "dense phase", "trained on", "dense error (%)", "just pruned (%)",
                                       "dense phase = dense baseline record"])


# --------------------------------------------------------------------------- #
# Table 4: the dense models' sizes
# --------------------------------------------------------------------------- #

#: Table 4's models as we build and count them: (our name, classes of its head, input shape). Each has the head
#: of the dataset it trains on here: WideResNet-28-10 has CIFAR-10's 10 classes, where the paper's 36.5M
#: include CIFAR-100's 100 (book/errata.md).
MODEL_STATS = {"MLP": ("mlp", 10, (1, 28, 28)), "LeNet5": ("lenet5", 10, (1, 28, 28)),
               "WideResNet-28-10": ("wrn-28-10", 10, (3, 32, 32)), "ResNet18": ("resnet18", 200, (3, 64, 64)),
               "ResNet50": ("resnet50", 1000, (3, 224, 224))}


def model_statistics(models: dict[str, tuple[str, int, tuple[int, ...]]] = MODEL_STATS) -> pd.DataFrame:
    """Table 4 beside our counts: each dense model's parameters and MACs as the paper prints them and as
    :mod:`paperlib.method.counting` counts them (the paper's convention), with its input and the classes of its
    head (``classes``)."""
    printed = paper_results()
    printed = printed[printed["table"] == "tab:model_stats"].set_index(["model", "metric"])["value"]
    rows = []
    for name, (model, classes, shape) in models.items():
        dense = build_model(model, classes, gated=False)
        rows.append({"model": name, "params paper": printed.get((name, "params_count")),
                     "params ours": f"{counting.count_params(dense):,}",
                     "MACs paper": printed.get((name, "macs_count")),
                     "MACs ours": f"{counting.count_macs(dense, shape, 'paper'):,}",
                     "input": "×".join(map(str, shape)), "classes": classes})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- #
# App. E: a bisection for a penalty against one constrained run
# --------------------------------------------------------------------------- #

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
    """Figure 5 from our searches (``report.complete_searches``): each training's λ_pen and L0-density, labelled
    by the iteration that asked for it (the two endpoints are 0), and the target ± tolerance as a band; one
    panel per search."""
    if not searches:
        raise ValueError(f"no search to plot: python -m paperlib.harness.sweeps {BISECTION_GRID}")
    fig, axes = plt.subplots(1, len(searches), figsize=(4.5 * len(searches), 3.3), squeeze=False)
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
    the λ_pen whose density came closest to the target, that density, and the run's notebook; a search without
    a complete record gives its status, and the table's ``attrs["command"]`` the sweep that makes it."""
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


def bisection_against_constraint(searches: list[dict], constrained: dict[str, dict]) -> str:
    """App. E's point in two sentences: the trainings our searches took against the paper's count, and the
    density that the constrained MLP asked for 50% reached in one run per grouping (``constrained``: its records
    by grouping, at the protocol of Table 10); a no-record line for what is missing."""
    missing = [report.no_record_line(what, [grid]) for grid, what, found in (
        (BISECTION_GRID, "a bisection search", searches),
        (MLP_CONTROL_GRID, "the constrained MLP at 50%", constrained)) if not found]
    if missing:
        return " ".join(missing)
    qualifier, value = paper_bisection_trainings()
    searched = report.in_words(f"{s['num_trainings']} trainings ({s['grouping']}-wise)" for s in searches)
    asked = report.in_words(f"{100 * run['metrics']['l0_density']:.2f}% ({grouping}-wise, final error "
                            f"{run['metrics']['val_error_final']:.2f}%)"
                            for grouping, run in sorted(constrained.items(), reverse=True))
    epochs = report.in_words(sorted({run["metrics"]["epochs_completed"] for run in constrained.values()}))
    return (f"Our searches took {searched} of {searches[0]['epochs']} epochs each; the paper says "
            f"{QUALIFIER_WORDS.get(qualifier, qualifier)} {value}. The constrained MLP asked for 50% ends at "
            f"{asked} in one run each, at its own protocol of {epochs} epochs ({ref('tab:mlp_control')}).")
