"""Every experiment notebook runs top to bottom in smoke mode and leaves a complete record.

Real MNIST and CIFAR-10 are used when ``PAPERLIB_DATA`` holds them; CIFAR-100,
TinyImageNet and ImageNet (and MNIST/CIFAR-10 elsewhere) are tiny generated
datasets in the real on-disk formats. Records and checkpoints go to a
temporary folder, never to the repository's ``runs/``.
"""

import importlib.util
import json
import os
from pathlib import Path

import papermill
import pytest
from fake_data import make_cifar10_jpeg, make_cifar100, make_imagenet, make_mnist, make_tinyimagenet

from paperlib.paper import paper_numbers
from paperlib.harness.sweeps import kernel_config

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"

#: notebook -> (extra papermill parameters, number of records it must leave)
NOTEBOOKS = {
    "mnist.ipynb": ({}, 1),
    "cifar10.ipynb": ({}, 1),
    "cifar100.ipynb": ({}, 1),
    "tinyimagenet.ipynb": ({"grouping": "layer"}, 1),
    "imagenet.ipynb": ({}, 1),
    "magnitude_pruning.ipynb": ({}, 1),
    "unstructured.ipynb": ({}, 1),
    "dual_restarts.ipynb": ({"dual_restarts": False}, 1),
    "gates_ablation.ipynb": ({"detach_gates": False, "gates_lr": 0.1}, 1),
    # A few batches barely move the density, so the endpoints cannot enclose 50%:
    # the search must say so after its two endpoint trainings.
    "bisection.ipynb": ({}, 3),  # two trainings (the endpoints) and the search
}


@pytest.fixture(scope="module")
def smoke_env(tmp_path_factory):
    """A data root with every dataset (real where available) and scratch folders for records."""
    tmp = tmp_path_factory.mktemp("notebooks")
    data = tmp / "data"
    data.mkdir()
    # Resolved here: a relative PAPERLIB_DATA (the README's ../shared/data) is relative to the
    # working directory, and a relative symlink target inside the temporary folder points nowhere.
    real = Path(os.environ.get("PAPERLIB_DATA", "/nonexistent")).expanduser().resolve()
    if (real / "MNIST" / "raw").is_dir():
        (data / "MNIST").symlink_to(real / "MNIST")
    else:
        make_mnist(data, n_train=64, n_test=32)
    if (real / "cifar10-jpeg").is_dir():
        (data / "cifar10-jpeg").symlink_to(real / "cifar10-jpeg")
    else:
        make_cifar10_jpeg(data, {name: 3 for name in "abcdefghij"})
    make_cifar100(data, n_train=16, n_test=8)
    make_tinyimagenet(data)
    make_imagenet(data)
    return {"PAPERLIB_DATA": str(data), "PAPERLIB_RUNS": str(tmp / "runs"),
            "PAPERLIB_CHECKPOINTS": str(tmp / "checkpoints"), "PAPERLIB_SMOKE": "1", "OMP_NUM_THREADS": "1",
            "MPLBACKEND": "Agg"}


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_runs_in_smoke_mode(name, smoke_env, tmp_path, monkeypatch):
    for key, value in smoke_env.items():
        monkeypatch.setenv(key, value)
    parameters, expected_records = NOTEBOOKS[name]
    experiment = f"smoke-{Path(name).stem}"
    output = tmp_path / name
    papermill.execute_notebook(str(BOOK / name), str(output), parameters={**parameters, "experiment": experiment},
                               cwd=str(ROOT), kernel_name="python3", progress_bar=False, config=kernel_config())
    executed = json.loads(output.read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    found = sorted((Path(smoke_env["PAPERLIB_RUNS"]) / experiment).glob("*/metrics.json"))
    assert len(found) == expected_records, [str(p) for p in found]
    for path in found:
        metrics = json.loads(path.read_text())
        assert metrics["status"] == "complete"
        assert path.parent.name.endswith("-smoke")
        if metrics.get("kind") == "bisection search":  # lists the trainings it made, each a record found here
            assert {e["run"] for e in metrics["evaluations"]} == {p.parent.name for p in found} - {path.parent.name}
            continue
        assert 0 <= metrics["val_error_final"] <= 100
        assert metrics["params"] > 0 and metrics["macs"] > 0
        for key in ("l0_density", "params_pct", "macs_pct", "val_error_best", "epochs_completed",
                    "wall_time_s", "device", "data_source", "git_commit", "paperlib_version", "torch_version"):
            assert key in metrics, key
        params = json.loads((path.parent / "params.json").read_text())  # the parameters live there, once
        assert {"target", "seed", "method", "model"} <= set(params) and not {"target", "seed"} & set(metrics)


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_documents_its_parameters(name):
    """One cell tagged `parameters`, each parameter typed and commented (papermill --help-notebook)."""
    notebook = json.loads((BOOK / name).read_text())
    tagged = [c for c in notebook["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1
    assert all(not c.get("outputs") for c in notebook["cells"] if c["cell_type"] == "code"), "commit templates clean"
    inspected = papermill.inspect_notebook(str(BOOK / name))
    assert "experiment" in inspected and "preset" in inspected
    for parameter, info in inspected.items():
        assert info["inferred_type_name"] != "None", f"{name}: {parameter} has no type"
        assert info["help"], f"{name}: {parameter} has no comment"


@pytest.mark.parametrize("name", sorted(set(NOTEBOOKS) - {"bisection.ipynb"}))
def test_notebook_call_is_described_by_its_parameters(name):
    """Sweeps locate a run's record from the notebook's parameters, so the call may hard-code only the dataset."""
    import ast

    notebook = json.loads((BOOK / name).read_text())
    calls = [node for cell in notebook["cells"] if cell["cell_type"] == "code"
             for node in ast.walk(ast.parse("".join(cell["source"])))
             if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "run_experiment"]
    assert len(calls) == 1
    literals = {kw.arg for kw in calls[0].keywords if isinstance(kw.value, ast.Constant)}
    assert literals <= {"dataset"}, f"{name} hard-codes {literals - {'dataset'}}"


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_defaults_agree(name):
    """``model`` is None (the preset's) or a real model, never ''; constrained runs are not handed a penalty."""
    inspected = papermill.inspect_notebook(str(BOOK / name))
    if "model" in inspected:
        assert inspected["model"]["default"] == "None" or inspected["model"]["default"].strip("'\"")
    if "lmbda" in inspected:
        assert inspected["lmbda"]["default"] == "None"


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_explains_the_paper_and_every_figure(name):
    """A page states what it computes as equations, cites the paper's equations or appendices by the numbers
    its PDF gives them (never a number it does not give), and says what each output shows."""
    cells = json.loads((BOOK / name).read_text())["cells"]
    markdown = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    cited = {kind for kind, _, _ in paper_numbers.references(markdown)}
    assert "$$" in markdown and cited & {"equation", "appendix"}
    assert not paper_numbers.unknown_references(markdown)
    for i, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and ("plt.show()" in source or "table" in source.split("\n")[-1]):
            assert i + 1 < len(cells) and cells[i + 1]["cell_type"] == "markdown", f"{name}: cell {i} is not explained"


def _root_conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_nbval_kernel_that_dies_on_starting_is_started_once_more_and_no_more():
    starting_again_once = _root_conftest().starting_again_once
    attempts = []

    def dies(times):
        def start(kernel_name, **kwargs):
            attempts.append(kernel_name)
            if len(attempts) <= times:
                raise RuntimeError("Kernel died before replying to kernel_info")
            return "km", "kc"
        return start

    with pytest.warns(UserWarning, match="starting it once more"):
        assert starting_again_once(dies(1))(kernel_name="python3") == ("km", "kc")
    assert attempts == ["python3", "python3"]
    attempts.clear()
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="Kernel died"):
        starting_again_once(dies(2))(kernel_name="python3")
    assert len(attempts) == 2
    attempts.clear()
    assert starting_again_once(dies(0))(kernel_name="python3") == ("km", "kc") and len(attempts) == 1
