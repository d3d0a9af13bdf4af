"""results_cifar10's opening: the claim "a constraint sets the density" judged at each CIFAR-10 protocol
(the CPU protocol, the GPU protocol, the paper's; the superseded pilot protocol on the appendix page
results_cifar10_misses), by the book's one rule (:mod:`paperlib.harness.rules`). Each protocol is named as
:mod:`paperlib.harness.protocols` names it."""

from dataclasses import dataclass

import pandas as pd

from paperlib.harness import index, presets, rules, studies
from paperlib.harness.protocols import protocol_name
from paperlib.paper.paper_results import paper_results

from analysis import control, report


@dataclass(frozen=True)
class Protocol:
    label: str
    preset: str
    model: str
    grids: tuple[str, ...]          # the control table's grids at this protocol
    gates_lr: float
    needs_gpu: bool = False         # trained only on a lent GPU: "not tested here" until a trip brings records


#: The CIFAR-10 protocols: the pilot (superseded), the CPU protocol, the GPU protocol.
PROTOCOLS = (
    Protocol(protocol_name("cpu", "cifar10"), "cpu", "wrn-16-1", studies.grids("tab:cifar10_control", preset="cpu"),
             6.0),
    Protocol(protocol_name("cpu2", "cifar10"), "cpu2", "wrn-16-1", control.CPU_CONTROL_GRIDS, presets.CPU2_GATES_LR),
    Protocol(protocol_name("gpu", "cifar10"), "gpu", "wrn-16-4", ("grids/cifar10_gpu_control.yaml",), 6.0,
             needs_gpu=True),
)
PILOT, CPU, GPU = PROTOCOLS
PAPER_MODEL = "wrn-28-10"
#: The pilot protocol's flagship (model-wise 70%, the README's command before the CPU protocol), outside its
#: control table.
PILOT_FLAGSHIP_GRID = STAND_IN_FLAGSHIP_GRID = "grids/cifar10_flagship.yaml"


def gates_per_block(model: str) -> str:
    """The gated blocks' numbers of gates, smallest to largest (``16/32/64``)."""
    sizes = sorted({round(100 / points) for points in rules.gate_points(model)[1].values()})
    return "/".join(str(size) for size in sizes)


def free_density(model: str, gates_lr: float, free: list[dict]) -> float | None:
    """The model-wise free-gates density (%) of ``model`` at ``gates_lr``, mean over seeds; None without a run."""
    found = [run["metrics"]["l0_density"] for run in free
             if run["params"]["model"] == model and run["params"]["grouping"] == "model"
             and run["params"]["gates_lr"] == gates_lr]
    return 100 * sum(found) / len(found) if found else None


def _planned(grids) -> int:
    return sum(1 for grid in grids for config, _ in report.grid_runs(grid) if config.method == "constrained")


def _row(label, model, epochs, free, outcomes, planned, needs_gpu=False, gates_lr=None) -> dict:
    counts = rules.tally(outcomes)
    passed, judged = rules.passed_and_judged(outcomes)
    verdict = rules.claim_verdict(passed, judged, complete=len(outcomes) == planned)
    if needs_gpu and not outcomes:
        verdict = rules.Verdict.NOT_TESTED
    return {"protocol": label, "model": model.replace("wrn", "WRN"), "epochs": epochs,
            "gates' lr": "–" if gates_lr is None else f"{gates_lr:g}", "gates per block": gates_per_block(model), "free density (%)": "–" if free is None else f"{free:.1f}",
            "runs": f"{len(outcomes)} of {planned}",
            **{outcome.value: counts[outcome] for outcome in rules.Outcome},
            "verdict": verdict.value}


def paper_outcomes() -> list[rules.Outcome]:
    """The paper's constrained rows of its CIFAR-10 control table judged by the same rule: its printed density
    against the target, every target binding (its free density, 91.63%, is above them all)."""
    points = control.paper_points("tab:cifar10_control")
    constrained = points[points["method"] == "constrained"]
    model, layers = rules.gate_points(PAPER_MODEL)
    outcomes = []
    for _, row in constrained.iterrows():
        gate = model if row["grouping"] == "model" else max(layers.values())
        gap = row["L0-density (%)"] - 100 * row["target"]
        outcomes.append(rules.judge_run([gap], [rules.Binding.BINDS], [gate]))
    return outcomes


def paper_free_density() -> float:
    """Table 12's layer-wise 100% row at the gates lr of 6: the density the loss alone leaves."""
    cells = paper_results()
    cell = cells[(cells["table"] == "tab:cifar10") & (cells["method"] == "constrained") & (cells["target"] == "1")
                 & (cells["gates_lr"] == "6") & (cells["metric"] == "l0_density")]
    return float(cell["value"].iloc[0])


def protocol_answers(protocols: tuple[Protocol, ...] = PROTOCOLS, paper: bool = True) -> pd.DataFrame:
    """One row per protocol of ``protocols`` (then the paper's, if ``paper``): its model, epochs, gates' learning
    rate, gates per block and free density, how many of its constrained runs are in, each
    :class:`~paperlib.harness.rules.Outcome`'s count, the claim's verdict by
    :func:`~paperlib.harness.rules.claim_verdict`, and where the runs trained."""
    free = rules.free_gates_records()
    rows = []
    for protocol in protocols:
        outcomes = protocol_outcomes(protocol, free)
        epochs = presets.resolve_config(dataset="cifar10", preset=protocol.preset, model=protocol.model,
                                        target=0.5).epochs
        rows.append(_row(protocol.label, protocol.model, epochs, free_density(protocol.model, protocol.gates_lr, free),
                         outcomes, _planned(protocol.grids), protocol.needs_gpu, protocol.gates_lr))
        runs = constrained_runs(protocol.grids)
        rows[-1]["device"] = index.where_ran([r["metrics"].get("device") for r in runs],
                                             mixed="CPU {cpu}, GPU {gpu} runs")
    if paper:
        outcomes = paper_outcomes()
        rows.append(_row(protocol_name("paper"), PAPER_MODEL, 200, paper_free_density(), outcomes, len(outcomes),
                         gates_lr=6.0))
        rows[-1]["device"] = "GPU"
    return pd.DataFrame(rows).set_index("protocol")


def protocol_outcomes(protocol: Protocol, free: list[dict] | None = None) -> list[rules.Outcome]:
    """Each constrained run of ``protocol`` that is in, judged by :func:`paperlib.harness.rules.judge_record`
    against the free-gates runs ``free`` (default: :func:`paperlib.harness.rules.free_gates_records`)."""
    free = rules.free_gates_records() if free is None else free
    return [rules.judge_record(run, free).outcome for run in constrained_runs(protocol.grids)]


#: The free-gates runs that choose the CPU protocol's gates learning rate, and the rule's threshold (%).
CPU_FREE_GATES_GRIDS = ("grids/cifar10_free_gates.yaml", "grids/cifar10_cpu_free_gates.yaml")
FREE_DENSITY_NEEDED = 85.0


def gates_lr_candidates() -> pd.DataFrame:
    """Each gates learning rate tried for the CPU protocol: the model-wise free density (%) and final error (%)
    of its free-gates run, whether the density reaches :data:`FREE_DENSITY_NEEDED`, or that it is not in yet."""
    rows = {}
    for grid in CPU_FREE_GATES_GRIDS:
        done = {run["params"]["run_name"]: run for run in report.complete_records(grid)}
        for config, _ in report.grid_runs(grid):
            if config.grouping != "model":  # the layer-wise free run at the chosen rate is not a candidate
                continue
            run = done.get(config.run_name)
            rows[config.gates_lr] = {"gates lr": f"{config.gates_lr:g}",
                                     "free density (%)": f"{100 * run['metrics']['l0_density']:.2f}" if run else "–",
                                     "final error (%)": f"{run['metrics']['val_error_final']:.2f}" if run else "–",
                                     f"≥ {FREE_DENSITY_NEEDED:g}%": ("✓" if 100 * run["metrics"]["l0_density"]
                                                                    >= FREE_DENSITY_NEEDED else "✗") if run
                                     else "not in yet"}
    return pd.DataFrame([rows[lr] for lr in sorted(rows, reverse=True)])


def beside_pilot(protocol: Protocol, free: list[dict] | None = None) -> pd.DataFrame:
    """Each constrained run of ``protocol`` that is in, beside the pilot protocol's seed-0 run of the same
    setting: final density (%), outcome by the book's rule, and final error (%) at each, the columns named by
    each protocol's short name (``pilot``, ``CPU``)."""
    free = rules.free_gates_records() if free is None else free
    stand_in = {(row["grouping"], str(row["target"])): row
                for _, row in control.run_rows(constrained_runs((*PILOT.grids, PILOT_FLAGSHIP_GRID), seed=0),
                                               None, free).iterrows()}
    ours = control.run_rows(constrained_runs(protocol.grids), None, free)
    old, new = PILOT.label.removesuffix(" protocol"), protocol.label.removesuffix(" protocol")
    rows = []
    for _, row in ours.iterrows():
        before = stand_in.get((row["grouping"], str(row["target"])))
        rows.append({"run": row["condition"],
                     f"density, {old} (%)": None if before is None else before["L0-density (%)"],
                     f"density, {new} (%)": row["L0-density (%)"],
                     f"outcome, {old}": None if before is None else before["outcome"],
                     f"outcome, {new}": row["outcome"],
                     f"error, {old} (%)": None if before is None else before["val. error final (%)"],
                     f"error, {new} (%)": row["val. error final (%)"]})
    return pd.DataFrame(rows)


def constrained_runs(grids, seed: int | None = None) -> list[dict]:
    """The complete constrained records of ``grids`` (of ``seed`` only, if given), in the control table's order."""
    runs = [run for grid in grids for run in report.complete_records(grid) if run["params"]["method"] == "constrained"
            and (seed is None or run["params"]["seed"] == seed)]
    return sorted(runs, key=control.table_order)

