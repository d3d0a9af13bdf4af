"""Migrate records to one home for each value: parameters in ``params.json``, results in ``metrics.json``.

Records made before 2026-11-28 repeat eleven of their parameters in ``metrics.json``
(:data:`PARAMETER_KEYS`: ``experiment``, ``run_name``, ``preset``, ``method``, ``model``, ``dataset``,
``sparsity``, ``grouping``, ``target``, ``lmbda``, ``seed``; the oldest call the target ``target_density``).
This removes them from the ``metrics.json`` of every complete training record under ``runs/`` (one with a
``params.json``), after checking that each removed value equals the parameter's: a record where one differs is
listed and left as it is. ``device`` and ``threads`` stay: in ``params.json`` they are what was asked
(``auto``, a thread count), in ``metrics.json`` what the run had (``cpu`` or ``cuda``, torch's threads).

It also rewrites, in the code cells of a record's executed notebook, a read of one of those keys from
``record["metrics"]`` into a read from ``record["params"]`` (the bisection notebook's
``record["metrics"]["run_name"]``), so that its re-execution (``pytest --nbval``) reads what the record now
holds; no output and no number changes.

Idempotent: a migrated record is left unchanged, so it can be run again after new records land. Records that are
not complete (a training under way) and folders git does not track (a record not yet committed) are skipped.
Every file is rewritten atomically, in the form the harness writes it.

    python benchmarks/migrate_records.py            # migrate runs/
    python benchmarks/migrate_records.py --check    # list what would change; exit 1 if anything would
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from paperlib.harness import records

#: Parameters that records made before 2026-11-28 repeat in ``metrics.json``.
PARAMETER_KEYS = ("experiment", "run_name", "preset", "method", "model", "dataset", "sparsity", "grouping", "target",
                  "lmbda", "seed")
#: Their names in ``metrics.json`` where they differ from the parameter's.
LEGACY_NAMES = {"target_density": "target"}
#: A read of one of them from a record's metrics, in a notebook's code.
METRICS_READ = re.compile(r"""\[(["'])metrics\1\](\s*)(\[|\.get\()(\s*)(["'])(%s)\5""" % "|".join(PARAMETER_KEYS))


def tracked_folders(runs: Path) -> set[Path]:
    """The record folders git tracks under ``runs`` (every one when ``runs`` is outside a git work tree)."""
    try:
        listed = subprocess.run(["git", "ls-files", "--", "."], cwd=runs, capture_output=True, text=True,
                                check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return {path.parent for path in runs.glob("*/*/metrics.json")}
    return {(runs / name).parent for name in listed if name.endswith("metrics.json")}


def migrated_metrics(params: dict, metrics: dict) -> tuple[dict, list[str]]:
    """``metrics`` without the keys that repeat ``params``, and the keys whose values disagree (kept then)."""
    kept, disagree = {}, []
    for key, value in metrics.items():
        name = LEGACY_NAMES.get(key, key)
        if name not in PARAMETER_KEYS:
            kept[key] = value
        elif name in params and params[name] == value:
            continue
        else:
            kept[key] = value
            disagree.append(f"{key}: metrics {value!r}, params {params.get(name, '(absent)')!r}")
    return kept, disagree


def migrated_notebook(content: dict) -> int:
    """Rewrite reads of a parameter from ``record["metrics"]`` in a notebook's code cells; how many cells changed."""
    changed = 0
    for cell in content.get("cells", []):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        new = METRICS_READ.sub(r"[\1params\1]\2\3\4\5\6\5", source)
        if new != source:
            cell["source"] = new.splitlines(keepends=True)
            changed += 1
    return changed


def migrate(run_dir: Path, write: bool = True) -> tuple[list[str], list[str]]:
    """Migrate one record folder: (what changed, disagreements found)."""
    metrics_file, params_file = run_dir / "metrics.json", run_dir / "params.json"
    metrics = json.loads(metrics_file.read_text())
    if metrics.get("status") != "complete":
        return [], []
    changed = []
    # a bisection search's record has no params.json: its metrics.json is its parameters and results
    params = json.loads(params_file.read_text()) if params_file.exists() else {}
    kept, disagree = migrated_metrics(params, metrics) if params else (metrics, [])
    if disagree:
        return [], disagree
    if kept != metrics:
        changed.append("metrics.json: -" + ", -".join(key for key in metrics if key not in kept))
        if write:
            records.write_json(metrics_file, kept)
    notebook = run_dir / "notebook.ipynb"
    if notebook.exists():
        content = json.loads(notebook.read_text())
        if migrated_notebook(content):
            changed.append("notebook.ipynb: reads parameters from record['params']")
            if write:
                records.write_notebook(notebook, content)
    return changed, []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=None, help="the records' folder (default: runs/)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a record would change")
    args = parser.parse_args(argv)
    runs = (args.runs or records.runs_dir()).resolve()
    tracked = tracked_folders(runs)
    counts = {"changed": 0, "unchanged": 0, "skipped": 0, "disagree": 0}
    for metrics_file in sorted(runs.glob("*/*/metrics.json")):
        run_dir = metrics_file.parent
        if run_dir not in tracked:
            print(f"skipped (not tracked by git): {run_dir.relative_to(runs)}")
            counts["skipped"] += 1
            continue
        changed, disagree = migrate(run_dir, write=not args.check)
        for line in disagree:
            print(f"DISAGREE {run_dir.relative_to(runs)}: {line}")
        counts["disagree" if disagree else "changed" if changed else "unchanged"] += 1
        for line in changed:
            print(f"{'would change' if args.check else 'changed'} {run_dir.relative_to(runs)}: {line}")
    print(", ".join(f"{count} {name}" for name, count in counts.items()))
    return 1 if counts["disagree"] or (args.check and counts["changed"]) else 0


if __name__ == "__main__":
    sys.exit(main())
