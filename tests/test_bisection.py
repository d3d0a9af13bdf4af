"""Bisection search on log(lambda_pen) for a target density (App. E)."""

import dataclasses
import json
import math
import time

import pytest
import yaml

from paperlib.harness.bisection import BisectionResult, bisect_lambda

LAMBDA0, SLOPE = 0.37, 1.3


def density(lam: float) -> float:
    """Synthetic monotone decreasing density: logistic in log(lambda), 0.5 at LAMBDA0."""
    return 1.0 / (1.0 + math.exp(SLOPE * (math.log(lam) - math.log(LAMBDA0))))


class Recorder:
    def __init__(self, fn=density):
        self.fn, self.calls = fn, []

    def __call__(self, lam):
        self.calls.append(lam)
        return self.fn(lam)


def reference_lambdas(target, low, high, tol, max_iter, fn=density):
    """Independent implementation of the expected evaluation sequence."""
    lams = [low, high]
    lo, hi = math.log(low), math.log(high)
    for _ in range(max_iter):
        mid = 0.5 * (lo + hi)
        lam = math.exp(mid)
        lams.append(lam)
        d = fn(lam)
        if abs(d - target) <= tol:
            break
        lo, hi = (mid, hi) if d > target else (lo, mid)
    return lams


def test_converges_and_records_evaluations():
    rec = Recorder()
    res = bisect_lambda(rec, target=0.5, lambda_low=1e-3, lambda_high=1e2, tolerance=0.01, max_iterations=30)
    assert isinstance(res, BisectionResult)
    assert res.converged
    lams = [lam for lam, _ in res.evaluations]
    assert lams == rec.calls, "every training run is recorded, in order"
    # both endpoints first
    assert lams[:2] == [1e-3, 1e2]
    assert [d for _, d in res.evaluations] == [density(lam) for lam in lams]
    # each new lambda is the geometric midpoint of the current bracket
    ref = reference_lambdas(0.5, 1e-3, 1e2, 0.01, 30)
    assert len(lams) == len(ref)
    for a, b in zip(lams, ref):
        assert a == pytest.approx(b, rel=1e-12)
    # the log-interval halves at every step: |log lambda_k - log lambda_{k-1}| = L / 2^(k-1)
    width = math.log(1e2) - math.log(1e-3)
    assert math.log(lams[2]) == pytest.approx(math.log(1e-3) + width / 2)
    for k in range(3, len(lams)):
        assert abs(math.log(lams[k]) - math.log(lams[k - 1])) == pytest.approx(width / 2 ** (k - 1), rel=1e-9)
    # result
    lam_best, d_best = res.best
    assert abs(d_best - 0.5) <= 0.01
    assert (lam_best, d_best) == res.evaluations[-1]
    assert d_best == min((d for _, d in res.evaluations), key=lambda d: abs(d - 0.5))
    assert res.num_trainings == len(lams)
    # the found lambda is close to the true solution LAMBDA0 (density is 0.5 there)
    # |d - 0.5| <= 0.01 and slope 1.3/4 in log-lambda => |log lam - log LAMBDA0| <= ~0.031
    assert abs(math.log(lam_best) - math.log(LAMBDA0)) <= 0.01 / (SLOPE / 4) * 1.05


@pytest.mark.parametrize("target", [0.2, 0.5, 0.83])
def test_converges_for_several_targets(target):
    res = bisect_lambda(density, target, 1e-4, 1e4, tolerance=0.005, max_iterations=40)
    assert res.converged
    assert abs(res.best[1] - target) <= 0.005
    assert len(res.evaluations) == len(reference_lambdas(target, 1e-4, 1e4, 0.005, 40))


def test_not_converged_runs_max_iterations():
    res = bisect_lambda(density, 0.5, 1e-3, 1e2, tolerance=0.0, max_iterations=6)
    assert not res.converged
    assert res.num_trainings == 2 + 6
    ds = [d for _, d in res.evaluations]
    assert res.best[1] == min(ds, key=lambda d: abs(d - 0.5))
    # bracket invariant: every evaluated midpoint stays within the original endpoints
    assert all(1e-3 <= lam <= 1e2 for lam, _ in res.evaluations)


def test_best_is_closest_not_last():
    res = BisectionResult(0.5, 0.01, evaluations=[(1.0, 0.9), (2.0, 0.52), (3.0, 0.1), (4.0, 0.45)])
    assert res.best == (2.0, 0.52)
    assert res.num_trainings == 4


def test_endpoint_already_within_tolerance():
    rec = Recorder()
    res = bisect_lambda(rec, target=density(1e-2) - 0.001, lambda_low=1e-2, lambda_high=1e2, tolerance=0.01)
    assert res.converged and rec.calls == [1e-2, 1e2]


@pytest.mark.parametrize("low,high", [(1e-3, 1e-2), (1e1, 1e2)])
def test_endpoints_not_enclosing_target_stop_after_two_trainings(low, high):
    rec = Recorder()
    res = bisect_lambda(rec, 0.5, low, high)
    assert not res.converged and rec.calls == [low, high]
    assert "enclose" in res.message


def test_increasing_density_does_not_enclose():
    res = bisect_lambda(lambda lam: 1.0 - density(lam), 0.5, 1e-3, 1e2)
    assert not res.converged and res.num_trainings == 2 and "enclose" in res.message


@pytest.mark.parametrize("target", [-0.1, 1.5, float("nan")])
def test_bad_target(target):
    with pytest.raises(ValueError, match="target"):
        bisect_lambda(density, target, 1e-3, 1e2)


def test_bad_tolerance():
    with pytest.raises(ValueError, match="tolerance"):
        bisect_lambda(density, 0.5, 1e-3, 1e2, tolerance=-0.01)


@pytest.mark.parametrize("low,high", [(0.0, 1.0), (-1.0, 1.0), (1.0, 1.0), (2.0, 1.0)])
def test_bad_endpoints(low, high):
    with pytest.raises(ValueError, match="lambda_low"):
        bisect_lambda(density, 0.5, low, high)


def _search(**changes):
    from paperlib.harness.bisection import Search

    fields = dict(grouping="model", target=0.5, tolerance=0.01, lambda_low=1e-3, lambda_high=1.0,
                  max_iterations=8, epochs=150, seed=0, preset="cpu", experiment="bisection")
    return Search(**{**fields, **changes})


def test_a_search_has_its_own_folder_beside_its_trainings(workspace):
    search = _search()
    assert search.folder == workspace / "runs" / "bisection" / "search-mlp-model-t0.5-tol0.01-l0.001_1-epochs150-s0-cpu"
    assert _search(grouping="layer").folder != search.folder and _search(lambda_high=10.0).folder != search.folder
    assert _search(epochs=0).folder.name.endswith("-epochs100-s0-cpu")  # the cpu preset's MLP epochs
    from paperlib.harness.bisection import Search
    assert Search.from_parameters({**dataclasses.asdict(search), "threads": 1, "rerun": False}) == search


def test_a_grids_search_folder_does_not_follow_the_smoke_variable(workspace, monkeypatch):
    """$PAPERLIB_SMOKE makes the notebook's search a smoke one, but the record a grid or a page asks for
    stays the grid's, as a training's does (CI exports the variable and builds the pages)."""
    from paperlib.harness import records, sweeps

    notebook = str(records.project_root() / "book" / "bisection.ipynb")
    params = {"experiment": "bisection", "preset": "cpu", "epochs": 150, "grouping": "model"}
    training = {"experiment": "bisection", "model": "mlp", "method": "penalized", "preset": "cpu", "lmbda": 0.1}
    grid_search = sweeps.record_folder(notebook, params, "mnist", sweeps.notebook_defaults(notebook))
    grid_training = sweeps.record_folder("book/mnist.ipynb", training, "mnist")
    monkeypatch.setenv("PAPERLIB_SMOKE", "1")
    assert sweeps.record_folder(notebook, params, "mnist", sweeps.notebook_defaults(notebook)) == grid_search
    assert sweeps.record_folder("book/mnist.ipynb", training, "mnist") == grid_training
    assert grid_search == workspace / "runs" / "bisection" / "search-mlp-model-t0.5-tol0.01-l0.001_1-epochs150-s0-cpu"
    assert _search().folder == grid_search.with_name(grid_search.name + "-smoke")


def test_write_search_lists_every_training_and_rewrites_nothing_identical(workspace):
    from paperlib.harness.bisection import write_search

    search = _search(max_iterations=3)
    result = bisect_lambda(density, 0.5, 1e-3, 1.0, 0.01, 3)
    trainings = {lam: f"run-{i}" for i, (lam, _) in enumerate(result.evaluations)}
    folder = write_search(search, result, trainings)
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["status"] == "complete" and metrics["num_trainings"] == result.num_trainings == 5
    assert [e["iteration"] for e in metrics["evaluations"]] == [0, 0, 1, 2, 3]
    assert [e["run"] for e in metrics["evaluations"]] == [f"run-{i}" for i in range(5)]
    assert [e["l0_density"] for e in metrics["evaluations"]] == [d for _, d in result.evaluations]
    before = (folder / "metrics.json").stat().st_mtime_ns
    time.sleep(0.01)
    write_search(search, result, trainings)
    assert (folder / "metrics.json").stat().st_mtime_ns == before


def test_a_sweep_runs_a_search_once_and_then_skips_it(workspace, monkeypatch, capsys):
    """The sweep knows a search is done from the search's record, not from one training's."""
    from paperlib.harness import records, sweeps

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = str(records.project_root() / "book" / "bisection.ipynb")
    grid = workspace / "bisection.yaml"
    base = {"experiment": "bisection", "preset": "cpu", "epochs": 1, "target": 0.5, "max_iterations": 1}
    grid.write_text(yaml.safe_dump({"notebook": notebook, "dataset": "mnist", "base": base,
                                    "grid": {"grouping": ["model"]}}))
    assert sweeps.main([str(grid)]) == 0
    folder = sweeps.record_folder(notebook, {**base, "grouping": "model"}, "mnist", sweeps.notebook_defaults(notebook))
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["kind"] == "bisection search" and (folder / "notebook.ipynb").exists()
    trainings = [folder.parent / e["run"] for e in metrics["evaluations"]]
    assert len(trainings) >= 2 and all(records.record_status(t) == "complete" for t in trainings)
    capsys.readouterr()
    assert sweeps.main([str(grid)]) == 0
    assert "skip (complete)" in capsys.readouterr().out
