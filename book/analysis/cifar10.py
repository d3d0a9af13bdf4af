"""results_cifar10's opening: the claim "a constraint sets the density" judged by the book's one rule at each
CIFAR-10 protocol (the CPU and GPU protocols, the paper's; the superseded pilot's on results_cifar10_misses)."""

from dataclasses import dataclass

import pandas as pd

from paperlib.harness import index, presets, records, rules
from paperlib.harness.protocols import protocol_name

from analysis import control, misses, report


@dataclass(frozen=True)
class Protocol:
    label: str
    preset: str
    model: str
    grids: tuple[str, ...]          # the control table's grids at this protocol
    gates_lr: float
    needs_gpu: bool = False         # trained only on a lent GPU: "not tested here" until a trip brings records
    free_needed: float | None = None  # its rows are judged only if its free density (%) reaches this


#: The free density (%) a protocol's gates must reach for its control table to be judged: the rule that chose the CPU
#: protocol's gates' lr and the GPU protocol's width (grids/cifar10_cpu_free_gates.yaml, _gpu_free_gates.yaml).
FREE_DENSITY_NEEDED = 85.0
#: The CIFAR-10 protocols: the pilot (superseded), the CPU protocol, the GPU protocol.
PROTOCOLS = (
    Protocol(protocol_name("cpu", "cifar10"), "cpu", "wrn-16-1", control.CONTROL_GRIDS, 6.0),
    Protocol(protocol_name("cpu2", "cifar10"), "cpu2", "wrn-16-1", control.CPU_CONTROL_GRIDS, presets.CPU2_GATES_LR),
    Protocol(protocol_name("gpu", "cifar10"), "gpu", "wrn-16-4", ("grids/cifar10_gpu_control.yaml",), 6.0,
             needs_gpu=True, free_needed=FREE_DENSITY_NEEDED),
)
PILOT, CPU, GPU = PROTOCOLS
PAPER_MODEL = "wrn-28-10"
#: The pilot protocol's flagship (model-wise 70%), outside its control table.
PILOT_FLAGSHIP_GRID = STAND_IN_FLAGSHIP_GRID = "grids/cifar10_flagship.yaml"
#: The free-gates runs that chose the CPU protocol's gates' learning rate.
CPU_FREE_GATES_GRIDS = ("grids/cifar10_free_gates.yaml", "grids/cifar10_cpu_free_gates.yaml")
#: How a protocol's verdict reads when its free density is under the one its rule asks for.
FREE_TOO_LOW = "not judged: free density under {:g}%"


def gates_per_block(model: str) -> str:
    """The gated blocks' numbers of gates, smallest to largest (``16/32/64``)."""
    sizes = sorted({round(100 / points) for points in rules.gate_points(model)[1].values()})
    return "/".join(str(size) for size in sizes)


def free_density(model: str, gates_lr: float, free: list[dict]) -> float | None:
    """The model-wise free-gates density (%) of ``model`` at ``gates_lr``, mean over seeds; None without a run."""
    found = [run["metrics"]["l0_density"] for run in free
             if (run["params"]["model"], run["params"]["grouping"], run["params"]["gates_lr"])
             == (model, "model", gates_lr)]
    return 100 * sum(found) / len(found) if found else None


def constrained_runs(grids, seed: int | None = None) -> list[dict]:
    return control.table_runs(grids, "constrained", seed)


def protocol_outcomes(protocol: Protocol, free: list[dict] | None = None) -> list[rules.Outcome]:
    """Each constrained run of ``protocol`` that is in, judged by the book's rule against the free-gates runs."""
    free = rules.free_gates_records() if free is None else free
    return [rules.judge_record(run, free).outcome for run in constrained_runs(protocol.grids)]


def paper_outcomes() -> list[rules.Outcome]:
    """The paper's constrained rows of its CIFAR-10 control table judged by the same rule (every target binds: its
    free density, 91.63%, is above them all)."""
    points = control.paper_points("tab:cifar10_control")
    model, layers = rules.gate_points(PAPER_MODEL)
    return [rules.judge_run([row["L0-density (%)"] - 100 * row["target"]], [rules.Binding.BINDS],
                            [model if row["grouping"] == "model" else max(layers.values())])
            for _, row in points[points["method"] == "constrained"].iterrows()]


def _row(label, model, epochs, free, outcomes, planned, needs_gpu=False, gates_lr=None, free_needed=None) -> dict:
    counts = rules.tally(outcomes)
    passed, judged = rules.passed_and_judged(outcomes)
    verdict = rules.claim_verdict(passed, judged, complete=len(outcomes) == planned).value
    if needs_gpu and not outcomes:
        verdict = rules.Verdict.NOT_TESTED.value
    elif free_needed is not None and free is not None and free < free_needed:
        verdict = FREE_TOO_LOW.format(free_needed)
    return {"protocol": label, "model": model.replace("wrn", "WRN"), "epochs": epochs,
            "gates' lr": "–" if gates_lr is None else f"{gates_lr:g}", "gates per block": gates_per_block(model),
            "free density (%)": "–" if free is None else f"{free:.1f}", "runs": f"{len(outcomes)} of {planned}",
            **{outcome.value: counts[outcome] for outcome in rules.Outcome}, "verdict": verdict}


def protocol_answers(protocols: tuple[Protocol, ...] = PROTOCOLS, paper: bool = True) -> pd.DataFrame:
    """One row per protocol (then the paper's): model, epochs, gates' lr and blocks, free density, constrained
    runs in, each outcome's count, the claim's verdict, and where the runs trained."""
    free = rules.free_gates_records()
    rows = []
    for protocol in protocols:
        epochs = presets.resolve_config(dataset="cifar10", preset=protocol.preset, model=protocol.model,
                                        target=0.5).epochs
        free_at = free_density(protocol.model, protocol.gates_lr, free)
        rows.append({**_row(protocol.label, protocol.model, epochs, free_at, protocol_outcomes(protocol, free),
                            report.planned_runs(protocol.grids), protocol.needs_gpu, protocol.gates_lr,
                            protocol.free_needed),
                     "device": index.where_ran([r["metrics"].get("device") for r in constrained_runs(protocol.grids)],
                                               mixed="CPU {cpu}, GPU {gpu} runs")})
    if paper:
        outcomes = paper_outcomes()
        rows.append({**_row(protocol_name("paper"), PAPER_MODEL, 200, misses.paper_free_densities()[6], outcomes,
                            len(outcomes), gates_lr=6.0), "device": "GPU"})
    return pd.DataFrame(rows).set_index("protocol")


def gates_lr_candidates() -> pd.DataFrame:
    """Each gates' learning rate tried for the CPU protocol: its model-wise free-gates run's density and final
    error (%), and whether the density reaches :data:`FREE_DENSITY_NEEDED`, or that it is not in yet."""
    rows = {}
    for grid in CPU_FREE_GATES_GRIDS:
        for config, folder in report.grid_records(grid):
            if config.grouping != "model":  # the layer-wise free run at the chosen rate is not a candidate
                continue
            m = records.load_record(folder)["metrics"] if folder else None
            rows[config.gates_lr] = {"gates lr": f"{config.gates_lr:g}",
                                     "free density (%)": f"{100 * m['l0_density']:.2f}" if m else "–",
                                     "final error (%)": f"{m['val_error_final']:.2f}" if m else "–",
                                     f"≥ {FREE_DENSITY_NEEDED:g}%": ("✓" if 100 * m["l0_density"]
                                                                    >= FREE_DENSITY_NEEDED else "✗") if m
                                     else "not in yet"}
    return pd.DataFrame([rows[lr] for lr in sorted(rows, reverse=True)])


def beside_pilot(protocol: Protocol, free: list[dict] | None = None) -> pd.DataFrame:
    """Each constrained run of ``protocol`` beside the pilot protocol's seed-0 run of its setting: final density
    (%), outcome and final error (%) at each, named by each protocol's short name."""
    free = rules.free_gates_records() if free is None else free
    stand_in = {(row["grouping"], str(row["target"])): row
                for _, row in control.run_rows(constrained_runs((*PILOT.grids, PILOT_FLAGSHIP_GRID), seed=0),
                                               None, free).iterrows()}
    old, new = PILOT.label.removesuffix(" protocol"), protocol.label.removesuffix(" protocol")
    rows = []
    for _, row in control.run_rows(constrained_runs(protocol.grids), None, free).iterrows():
        before = stand_in.get((row["grouping"], str(row["target"])), {})
        rows.append({"run": row["condition"],
                     f"density, {old} (%)": before.get("L0-density (%)"), f"density, {new} (%)": row["L0-density (%)"],
                     f"outcome, {old}": before.get("outcome"), f"outcome, {new}": row["outcome"],
                     f"error, {old} (%)": before.get("val. error final (%)"),
                     f"error, {new} (%)": row["val. error final (%)"]})
    return pd.DataFrame(rows)


#: The device check's experiment: the pilot protocol's model-wise seed-0 runs trained again on a lent GPU
#: (grids/cifar10_device_check.yaml), so that a device's difference is told apart from a seed's.
DEVICE_CHECK = "cifar10_device_check"


def device_check_rows(runs: list[dict], checks: list[dict]) -> pd.DataFrame:
    """One row per setting of the device check: the final L0-density and final error (%) of seed 0 on the CPU
    (``runs``) and on the GPU (``checks``), their difference (GPU minus CPU), and the difference between seeds 1 and
    2 on the GPU (2 minus 1), the nearest measure of a seed's own spread."""
    found = {}
    for run in [*runs, *checks]:
        p, m = run["params"], run["metrics"]
        if p["method"] == "constrained" and p["grouping"] == "model":
            found[(p["target"], p["seed"], index.device_kind(m.get("device")))] = (100 * m["l0_density"],
                                                                                  m["val_error_final"])
    rows = []
    for target in sorted({p["params"]["target"] for p in checks}):
        cpu, gpu = found.get((target, 0, "CPU")), found.get((target, 0, "GPU"))
        one, two = found.get((target, 1, "GPU")), found.get((target, 2, "GPU"))
        if not (cpu and gpu):
            continue
        row = {"setting": control.condition({"method": "constrained", "grouping": "model", "target": target})}
        for i, what in enumerate(("density", "error")):
            row[f"{what}, seed 0 CPU (%)"], row[f"{what}, seed 0 GPU (%)"] = cpu[i], gpu[i]
            row[f"{what}: GPU − CPU (points)"] = gpu[i] - cpu[i]
            row[f"{what}: seed 2 − seed 1, GPU (points)"] = two[i] - one[i] if one and two else None
        rows.append(row)
    return pd.DataFrame(rows)
