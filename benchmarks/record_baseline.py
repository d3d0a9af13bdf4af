"""Record the two short runs that pin the numbers across a refactoring (issue: training methods apart from the runner).

    PAPERLIB_DATA=../shared/data python benchmarks/record_baseline.py DIR

writes the records of a 2-epoch MLP and a 2-epoch LeNet5 run (constrained,
layer-wise, cpu preset, seed 0) under DIR; ``compare`` checks that two such
folders agree bit for bit in every field but timings and commits.
"""

import os
import sys
from pathlib import Path

#: Fields that legitimately differ between two runs of the same parameters: timings, provenance, and how the
#: data is named (records name it by a checksum of the examples read since they stopped naming its folder).
VOLATILE = ("wall_time_s", "git_commit", "git_commits_resumed_at", "device_name", "torch_version",
            "location", "content_sha256")

RUNS = [dict(model="mlp", grouping="layer", target=[0.3, 0.3, 0.3]),
        dict(model="lenet5", grouping="layer", target=[0.5, 0.3, 0.7, 0.1])]


def record(folder: Path) -> None:
    os.environ["PAPERLIB_RUNS"] = str(folder)
    os.environ["PAPERLIB_CHECKPOINTS"] = str(folder / ".checkpoints")
    from paperlib.harness.training import run_experiment

    for run in RUNS:
        run_experiment(progress=False, experiment="baseline", dataset="mnist", preset="cpu", epochs=2, seed=0,
                       rerun=True, **run)


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def compare(a: Path, b: Path) -> list[str]:
    """Differences between two baseline folders (empty when bit-identical but for volatile fields)."""
    from paperlib.harness.presets import ExperimentConfig
    from paperlib.harness.records import load_record

    defaults = ExperimentConfig().to_dict()
    problems = []
    for run_a in sorted((a / "baseline").iterdir()):
        run_b = b / "baseline" / run_a.name
        ra, rb = _strip(load_record(run_a)), _strip(load_record(run_b))
        # A parameter that one record predates compares as its default, as in presets.config_differences.
        ra["params"], rb["params"] = {**defaults, **ra["params"]}, {**defaults, **rb["params"]}
        for key in ("params", "metrics", "history", "steps", "gate_medians"):
            if key != "path" and ra[key] != rb[key]:
                problems.append(f"{run_a.name}: {key} differs")
    return problems


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        found = compare(Path(sys.argv[2]), Path(sys.argv[3]))
        print("\n".join(found) or "bit-identical")
        sys.exit(1 if found else 0)
    record(Path(sys.argv[1]))
