"""Run records: what a run leaves in ``runs/<experiment>/<run name>/``.

=====================  =======================================================
``params.json``         every resolved parameter of the run (its one home)
``metrics.json``        results only: final numbers and provenance (status, densities,
                        counts, errors, device, data source, git commit, versions)
``history.csv.xz``      one row per epoch (training dynamics)
``steps.csv.xz``        density and multipliers every few steps (dual dynamics)
``gate_medians.json.xz`` test-time gate medians per layer at chosen epochs
``notebook.ipynb``      the executed notebook (added by :mod:`paperlib.harness.sweeps`)
=====================  =======================================================

The data files are xz-compressed (``pandas.read_csv`` reads them as they are): a third smaller than gzip, which leaves
room in what a lent GPU's call carries (the whole tree). Every file is written to a temporary name and moved into place
(``os.replace`` is atomic), so a record is never half-written; a ``complete`` record is never overwritten by a partial
or failed run.
"""

import base64
import csv
import functools
import hashlib
import io
import json
import lzma
import os
import re
import subprocess
import tempfile
from pathlib import Path

STATUSES = ("complete", "partial", "failed")


def project_root() -> Path:
    """The nearest folder above the working directory with ``_config.yml`` and ``paperlib/``; else the folder holding
    this package."""
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / "_config.yml").exists() and (folder / "paperlib").is_dir():
            return folder
    return Path(__file__).resolve().parents[2]


def runs_dir() -> Path:
    """Where records go: ``$PAPERLIB_RUNS`` if set, else ``<project root>/runs``."""
    return Path(os.environ.get("PAPERLIB_RUNS", project_root() / "runs"))


def checkpoints_dir() -> Path:
    """``$PAPERLIB_CHECKPOINTS``, else ``~/.cache/paperlib/checkpoints/<project path>``: outside the work tree, so that
    a run cut by the end of a session resumes in the next one when the work tree is laid anew."""
    default = Path.home() / ".cache" / "paperlib" / "checkpoints" / str(project_root()).strip("/").replace("/", "-")
    return Path(os.environ.get("PAPERLIB_CHECKPOINTS", default))


def run_folder(config) -> Path:
    """The folder of a resolved configuration's record, ``<runs>/<experiment>/<run name>/``: the one place that derives
    it. Smoke runs (CI) never land in ``runs/``: unless ``$PAPERLIB_RUNS`` is set, they go to
    ``<checkpoints>/smoke-runs/``."""
    root = runs_dir()
    if config.smoke and "PAPERLIB_RUNS" not in os.environ:
        root = checkpoints_dir() / "smoke-runs"
    return root / config.experiment / config.run_name


def checkpoint_path(config) -> Path:
    """The checkpoint of a run: ``<checkpoints>/<experiment>/<run name>/last.pt`` (:func:`checkpoints_dir`)."""
    return checkpoints_dir() / config.experiment / config.run_name / "last.pt"


def first_phase_path(config) -> Path:
    """Where a run leaves the state at the end of a first phase that every target shares (a magnitude-pruning run's
    trained dense model), for the runs whose parameters differ from its own in ``target`` alone:
    ``<checkpoints>/<experiment>/first-phase/<model>-s<seed>-<digest of the other parameters>.pt``."""
    shared = {k: v for k, v in config.to_dict().items() if k not in ("target", "run_name", "device", "threads")}
    digest = hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:16]
    return checkpoints_dir() / config.experiment / "first-phase" / f"{config.model}-s{config.seed}-{digest}.pt"


def git_commit() -> str:
    """The commit of the code that ran, ``-dirty`` if the package had uncommitted changes; outside git,
    ``$PAPERLIB_GIT_COMMIT`` (for a copy of a clean checkout run on another machine), else ``unknown``."""
    cwd = Path(__file__).resolve().parents[1]  # the package, all three layers
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=cwd, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("PAPERLIB_GIT_COMMIT", "unknown")
    return commit + ("-dirty" if dirty else "")


#: A record's data files: what :func:`load_record` calls each, and its file.
DATA_FILES = {"history": "history.csv.xz", "steps": "steps.csv.xz", "gate_medians": "gate_medians.json.xz"}


def _xz(data: bytes) -> bytes:
    """``data`` xz-compressed at the strongest preset, with a dictionary just large enough for the data (the size of the
    preset's 64 MiB dictionary's output, in a few MB of memory instead of about 65)."""
    dict_size = max(4096, 1 << (len(data) - 1).bit_length())
    return lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64,
                         filters=[{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": dict_size}])


#: How a file's bytes are stored, by its suffix: (compress, decompress); the same text always gives the same bytes.
CODECS = {".xz": (_xz, lzma.decompress), "": (bytes, bytes)}


def _codec(path) -> tuple:
    suffix = Path(path).suffix
    return CODECS[suffix if suffix in CODECS else ""]


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, compressed as its suffix says (:data:`CODECS`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _codec(path)[0](text.encode())
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj) -> None:
    """Write ``obj`` as JSON, atomically: indented to be read by people, compact when compressed (``.xz``)."""
    path = Path(path)
    text = json.dumps(obj, separators=(",", ":")) if path.suffix == ".xz" else json.dumps(obj, indent=1)
    _write_atomic(path, text + "\n")


def read_json(path: Path):
    """The object in a JSON file (compressed as its suffix says: ``.xz``)."""
    return json.loads(_codec(path)[1](Path(path).read_bytes()))


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write a list of dicts as CSV (columns in order of appearance), atomically, compressed as the suffix says."""
    if not rows:
        return
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = [",".join(columns), *(",".join(_csv_cell(row.get(c)) for c in columns) for row in rows)]
    _write_atomic(Path(path), "\n".join(lines) + "\n")


def _csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def read_csv(path: Path) -> list[dict]:
    """The rows of a CSV file (compressed as its suffix says) as dicts of strings, new at every call."""
    path = Path(path)
    stat = path.stat()
    columns, rows = _parsed_csv(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    return [dict(zip(columns, row)) for row in rows]


@functools.lru_cache(maxsize=1024)
def _parsed_csv(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The column names and rows of a CSV file, parsed once per version (modification time and size): the result pages
    read the same records many times."""
    text = _codec(path)[1](Path(path).read_bytes()).decode()
    reader = csv.DictReader(io.StringIO(text))
    rows = tuple(tuple(row.values()) for row in reader)
    return tuple(reader.fieldnames or ()), rows


def palette_png(data: bytes, colors: int = 256) -> bytes:
    """A PNG re-encoded with a palette of at most ``colors`` colours (no dithering), same size in pixels: a run page's
    plots (lines, text, flat fills with anti-aliased edges) look the same at about a third of matplotlib's RGBA bytes.
    ``data`` unchanged when it is a palette image already, has transparent pixels, or would not shrink."""
    from PIL import Image  # torchvision's dependency; imported here, where figures are handled

    image = Image.open(io.BytesIO(data))
    if image.mode == "P":
        return data
    if image.mode in ("RGBA", "LA") and image.getchannel("A").getextrema()[0] < 255:
        return data
    palette = image.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buffer = io.BytesIO()
    palette.save(buffer, "PNG", optimize=True)
    return buffer.getvalue() if buffer.tell() < len(data) else data


def _edit_notebook(run_dir: Path, edit) -> int:
    """Apply ``edit`` (a cell -> how many of its parts it changed) to every cell of a record's executed notebook, and
    write the notebook if anything changed; how many parts changed (0 without a notebook)."""
    notebook = Path(run_dir) / "notebook.ipynb"
    if not notebook.exists():
        return 0
    content = json.loads(notebook.read_text())
    changed = sum(edit(cell) for cell in content.get("cells", []))
    if changed:
        write_notebook(notebook, content)
    return changed


def _text(value) -> str:
    """A notebook field that is a string or a list of lines, as one string."""
    return value if isinstance(value, str) else "".join(value)


def _smaller_figures(cell: dict) -> int:
    changed = 0
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        if "image/png" in data:
            original = base64.b64decode(_text(data["image/png"]))
            smaller = palette_png(original)
            if smaller is not original:
                data["image/png"] = base64.b64encode(smaller).decode() + "\n"
                changed += 1
    return changed


def compress_notebook_figures(run_dir: Path) -> int:
    """Re-encode the PNG figures of a record's executed notebook with :func:`palette_png`; how many changed. Nothing
    else changes (nbval does not compare images)."""
    return _edit_notebook(run_dir, _smaller_figures)


def write_notebook(path: Path, content: dict) -> None:
    """Write an executed notebook's JSON as nbformat writes it (so that a rewrite changes only what changed)."""
    _write_atomic(path, json.dumps(content, indent=1, ensure_ascii=False, sort_keys=True))


#: One update of the runner's progress bar (``epoch 7:  26%|██▌  | 121/469 [00:10<00:28, 12.1it/s]``,
#: :meth:`paperlib.harness.training.Runner.train_epoch`), and the carriage return and spaces that clear it.
PROGRESS_BAR = re.compile(r"epoch \d+:\s+\d+%\|[^|\r\n]*\| \d+/\d+ \[[^\]\r\n]*\] *|\r *")


def _without_bars(cell: dict) -> int:
    changed, kept = 0, []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            text = _text(output["text"])
            rest = PROGRESS_BAR.sub("", text)
            if rest != text:
                changed += 1
                if not rest.strip():
                    continue
                output["text"] = rest
        kept.append(output)
    if "outputs" in cell:
        cell["outputs"] = kept
    return changed


def drop_progress_bars(run_dir: Path) -> int:
    """Remove the runner's within-epoch progress bars (stderr) from a record's executed notebook; how many outputs
    changed. In a record they are noise (8.4 of the 44.5 MB of runs/ on 2026-11-23), and each epoch's numbers are in its
    stdout line and ``history.csv``; every other stderr text (a warning, a traceback) is kept."""
    return _edit_notebook(run_dir, _without_bars)


#: Cell metadata that papermill writes on execution (timings, status): nothing a page or nbval reads.
EXECUTION_METADATA = ("papermill", "execution")


def _without_execution_metadata(cell: dict) -> int:
    metadata = cell.get("metadata", {})
    drop = [key for key in EXECUTION_METADATA if key in metadata] + (["tags"] if metadata.get("tags") == [] else [])
    for key in drop:
        del metadata[key]
    return bool(drop)


def drop_execution_metadata(run_dir: Path) -> int:
    """Remove papermill's per-cell timings and status (:data:`EXECUTION_METADATA`, about 400 bytes a cell) and empty tag
    lists from a record's executed notebook; how many cells changed. The notebook's own metadata (its parameters, which
    ``conftest.py`` reads) is kept."""
    return _edit_notebook(run_dir, _without_execution_metadata)


def record_status(run_dir: Path) -> str | None:
    """``complete``, ``partial`` or ``failed`` from ``metrics.json``, or None when there is no record."""
    metrics = Path(run_dir) / "metrics.json"
    if not metrics.exists():
        return None
    return json.loads(metrics.read_text()).get("status")


def record_params(run_dir: Path) -> dict:
    """A record's parameters, ``params.json``; a bisection search's record keeps its own in its ``metrics.json``."""
    params = Path(run_dir) / "params.json"
    return json.loads((params if params.exists() else Path(run_dir) / "metrics.json").read_text())


def load_record(run_dir: Path) -> dict:
    """A record as a dict: ``params`` (its parameters), ``metrics`` (its results), ``history`` (list of rows),
    ``steps``, ``gate_medians``."""
    run_dir = Path(run_dir)
    record = {"path": str(run_dir), "params": json.loads((run_dir / "params.json").read_text()),
              "metrics": json.loads((run_dir / "metrics.json").read_text())}
    for name, file in DATA_FILES.items():
        path = run_dir / file
        record[name] = None if not path.exists() else read_json(path) if ".json" in file else read_csv(path)
    return record


def write_record(run_dir: Path, params: dict, metrics: dict, history: list[dict], steps: list[dict],
                 gate_medians: dict) -> None:
    """Write all files of a record, metrics.json last (its status describes a finished write); refuses to replace a
    complete record by one that is not complete."""
    if metrics.get("status") not in STATUSES:
        raise ValueError(f"metrics status must be one of {STATUSES}; got {metrics.get('status')!r}")
    run_dir = Path(run_dir)
    if metrics["status"] != "complete" and record_status(run_dir) == "complete":
        raise RuntimeError(f"refusing to overwrite the complete record in {run_dir} with a "
                           f"{metrics['status']} one")
    write_json(run_dir / "params.json", params)
    write_csv(run_dir / DATA_FILES["history"], history)
    write_csv(run_dir / DATA_FILES["steps"], steps)
    if gate_medians:
        write_json(run_dir / DATA_FILES["gate_medians"], gate_medians)
    write_json(run_dir / "metrics.json", metrics)


def find_records(experiment: str | None = None, root: Path | None = None) -> list[Path]:
    """Run folders (those with a metrics.json) under ``runs/`` or ``runs/<experiment>``."""
    base = Path(root or runs_dir())
    base = base / experiment if experiment else base
    return sorted(p.parent for p in base.glob("**/metrics.json"))


def make_portable(run_dir: Path) -> None:
    """Remove machine paths from a record: the data folder of records made before data was named by checksum
    (``metrics.json``), and papermill's input and output paths (``notebook.ipynb``), which become relative to the
    project root. Numbers are left as they are."""
    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    if isinstance(metrics.get("data"), dict) and "location" in metrics["data"]:
        del metrics["data"]["location"]
        write_json(metrics_path, metrics)
    notebook = run_dir / "notebook.ipynb"
    if not notebook.exists():
        return
    content = json.loads(notebook.read_text())
    papermill = content.get("metadata", {}).get("papermill")
    if not papermill:
        return
    root = project_root()
    # runs/<experiment>/<run name>/notebook.ipynb, wherever PAPERLIB_RUNS put this record
    portable = {"output_path": f"runs/{run_dir.parent.name}/{run_dir.name}/notebook.ipynb"}
    source = papermill.get("input_path")
    if source and Path(source).is_absolute():
        portable["input_path"] = Path(os.path.relpath(source, root)).as_posix()
    if any(papermill.get(key) != value for key, value in portable.items()):
        papermill.update(portable)
        write_notebook(notebook, content)
