"""Re-execute the run notebooks of ``runs/`` from their current templates, without training.

    PYTHONPATH=$PWD PAPERLIB_DATA=../shared/data python benchmarks/regenerate_run_notebooks.py --workers 2
    python benchmarks/regenerate_run_notebooks.py --dry-run          # what would run, and why not the others
    python benchmarks/regenerate_run_notebooks.py runs/mnist/mlp-constrained-model-t0.33-s0-paper  # just these

Each record's notebook is executed again with the parameters papermill recorded in it
(``metadata.papermill``) through :func:`paperlib.harness.sweeps.execute` with ``renew``: the record
is complete, so the notebook only loads it, and the new notebook replaces the old one only
once it has run (then its header is written from the record, :mod:`paperlib.harness.run_pages`).

Resumable: a notebook whose cells are already its template's (after its header)
is skipped, so a stopped regeneration picks up where it was. A notebook whose parameters no longer
resolve to its own record (a preset changed since it ran; ``conftest.py`` reports these as
stale) cannot be re-executed without training: it is listed, and only its first cell is replaced by
the run's header and papermill's cell metadata dropped.
``PAPERLIB_SMOKE`` must be unset (smoke parameters name other runs).
"""

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from paperlib.harness import records, run_pages, sweeps, training

STALE = "stale: made with other parameters than its own now resolve to; only its header is rewritten"


def _template_sources(cells: list[dict]) -> list[tuple[str, list[str]]]:
    """The sources and tags of the cells a run notebook takes unchanged from its template: all but the
    first (its header, :func:`paperlib.harness.run_pages.write_header`) and papermill's injected cell."""
    tags = [c.get("metadata", {}).get("tags", []) for c in cells]
    return [("".join(c["source"]), t) for c, t in zip(cells[1:], tags[1:]) if "injected-parameters" not in t]


def plan(run_dir: Path, force: bool = False) -> tuple[str, dict | None]:
    """(why it is skipped, or ``run``; the arguments of :func:`paperlib.harness.sweeps.execute`) for one record;
    ``force`` executes an up-to-date notebook too (after a change of the plotting code, say)."""
    notebook = run_dir / "notebook.ipynb"
    content = json.loads(notebook.read_text())
    papermill = content["metadata"].get("papermill", {})
    template = records.project_root() / papermill.get("input_path", "")
    if not template.is_file():
        return f"no template ({papermill.get('input_path')})", None
    if records.record_status(run_dir) != "complete":
        return "record not complete", None
    if not force and _template_sources(content["cells"]) == _template_sources(json.loads(template.read_text())["cells"]):
        return "up to date", None
    params = dict(papermill.get("parameters", {}))
    params.pop("threads", None)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    search = metrics.get("kind") == "bisection search"
    dataset = "mnist" if search else records.load_record(run_dir)["params"]["dataset"]  # a search trains on MNIST
    rel = str(template.relative_to(records.project_root()))
    defaults = sweeps.notebook_defaults(str(template))
    if sweeps.record_folder(rel, params, dataset, defaults).resolve() != run_dir.resolve():
        return STALE, None
    if not search:
        try:
            training.check_record_matches(records.load_record(run_dir)["params"],
                                          sweeps.run_config(params, dataset, defaults))
        except RuntimeError:
            return STALE, None
    return "run", {"notebook": rel, "dataset": dataset, "params": params}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="record folders (default: every one with a notebook)")
    parser.add_argument("--workers", type=int, default=1, help="notebooks executed at once (one core each)")
    parser.add_argument("--force", action="store_true",
                        help="execute notebooks already made from their current template too")
    parser.add_argument("--dry-run", action="store_true", help="list what would run and why others would not")
    args = parser.parse_args(argv)
    if os.environ.get("PAPERLIB_SMOKE"):
        parser.error("unset PAPERLIB_SMOKE: smoke parameters name other runs, which would then train")
    folders = args.runs or sorted(p.parent for p in records.runs_dir().glob("*/*/notebook.ipynb"))
    jobs, skipped = [], {}
    for folder in folders:
        why, job = plan(folder, args.force)
        if job is None:
            skipped.setdefault(why, []).append(folder)
        else:
            jobs.append(job)
    for why, found in skipped.items():
        print(f"skip ({why}): {len(found)}", *(f"  {f}" for f in found if why != "up to date"), sep="\n")
    print(f"{len(jobs)} notebooks to execute with {args.workers} workers", flush=True)
    if args.dry_run:
        return 0
    for folder in skipped.get(STALE, []):  # the title, line and links at least; the cells stay as they ran
        records.drop_execution_metadata(folder)
        run_pages.write_header(folder)
    started = time.time()
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        lines = []
        for line in pool.map(lambda job: sweeps.execute(**job, threads=1, commit=False, renew=True), jobs):
            print(line, flush=True)
            lines.append(line)
    print(f"{len(jobs)} notebooks in {(time.time() - started) / 60:.1f} min", flush=True)
    return 1 if any(line.startswith("FAILED") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
