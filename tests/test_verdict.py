"""analysis.verdict: every claim declared once, judged on the record index by paperlib.harness.rules, MNIST and
CIFAR-10 alike; a claim without records is never called reproduced; a verdict names the scale it holds at; a
changed preset moves its old records out of every claim alike."""

import pandas as pd
import pytest

from paperlib.harness import index, presets, rules
from analysis import verdict


def _record(gap, target=0.5, model="mlp", seed=0, device="cpu", preset="paper", method="constrained", epochs=200):
    """A model-wise record ending ``gap`` points from its target."""
    density = target + gap / 100
    metrics = {"device": device, "l0_density": density, "l0_density_per_layer": {}, "epochs_completed": epochs,
               "multipliers_final": [0.0], "val_error_final": 2.0}
    params = {"model": model, "method": method, "grouping": "model", "target": target, "seed": seed, "preset": preset,
              "lmbda": None, "run_name": f"{model}-{target}-{gap}-s{seed}"}
    history = [{"epoch": str(epochs), "phase": "train", "l0_density": str(density)}]
    return {"path": f"/nowhere/{model}-{target}-{gap}-{seed}", "params": params, "metrics": metrics,
            "history": history, "steps": []}


def _rows(records) -> pd.DataFrame:
    """Index rows of ``records`` (what ran() and the judges read), as paperlib.harness.index builds them."""
    defaults = presets.ExperimentConfig().to_dict()
    return pd.DataFrame([{**defaults, **r["params"], "folder": r["path"], "protocol": "paper protocol",
                          "variant": "", "device": {"cpu": "CPU", "cuda": "GPU"}[r["metrics"]["device"]],
                          "epochs_completed": r["metrics"]["epochs_completed"],
                          "l0_density": r["metrics"]["l0_density"]} for r in records])


@pytest.fixture
def no_free_gates(monkeypatch):
    monkeypatch.setattr(rules, "free_gates_records", lambda: [])


@pytest.fixture
def loaded(monkeypatch):
    """index.load returns the synthetic records of the rows it is given, by folder."""
    by_folder = {}
    monkeypatch.setattr(index, "load", lambda rows: [by_folder[f] for f in rows["folder"]])
    return by_folder


def _judge(records, by_folder, judge=verdict.runs_on_target()):
    by_folder.update({r["path"]: r for r in records})
    return judge(_rows(records))


def test_an_assessments_verdicts_must_be_the_rules():
    assert verdict.VERDICTS == ("reproduced", "partly", "not reproduced", "in progress", "not tested here")
    with pytest.raises(ValueError, match="verdict must be one of"):
        verdict.Assessment(verdict.CLAIMS[0], verdict.NOTHING_RAN, verdict.Count(0, 0), "sort of", "partly")


def test_runs_are_counted_on_target_by_the_rule_and_by_app_g_beside_it(no_free_gates, loaded):
    count = _judge([_record(0.2), _record(-0.5, seed=1), _record(1.5, seed=2), _record(-3.0, seed=3)], loaded)
    assert (count.passed, count.judged) == (2, 4)  # violated (+1.5) and under (-3, binding unknown) are misses
    assert count.criteria["App. G's criterion (feasible)"] == (3, 4)  # App. G: only the violated run fails
    assert rules.claim_verdict(count.passed, count.judged).value == "partly"


def test_a_target_above_the_free_density_is_neither_a_hit_nor_a_miss(monkeypatch, loaded):
    free = _record(0.0, target=1.0)
    free["history"][0]["l0_density"] = "0.75"
    monkeypatch.setattr(rules, "free_gates_records", lambda: [free])
    count = _judge([_record(0.3, target=0.5), _record(-9.0, target=0.8, seed=1)], loaded)
    assert (count.passed, count.judged) == (1, 1)


def test_mnist_and_cifar10_are_judged_by_the_same_rule(no_free_gates, loaded):
    gaps = (0.2, -0.4, 0.9)
    mlp = _judge([_record(g, seed=s) for s, g in enumerate(gaps)], loaded)
    wrn = _judge([_record(g, model="wrn-16-1", preset="cpu2", seed=s, epochs=20) for s, g in enumerate(gaps)], loaded)
    assert (mlp.passed, mlp.judged) == (wrn.passed, wrn.judged)


def test_a_claim_is_in_progress_until_its_planned_runs_are_in(monkeypatch, no_free_gates, loaded):
    monkeypatch.setattr(verdict.report, "planned_runs", lambda grids, method="constrained": 3)
    count = _judge([_record(0.2, seed=s) for s in range(2)], loaded, verdict.runs_on_target(("a grid",)))
    assert not count.complete
    assert rules.claim_verdict(count.passed, count.judged, count.complete).value == "in progress"


def test_what_was_run_names_models_budget_seeds_per_cell_and_device():
    runs = [_record(0.2, seed=s) for s in range(5)] + [_record(0.2, target=0.2, seed=s, device="cuda") for s in (0, 1)]
    ran = verdict.ran(_rows(runs))
    assert ran.model == "MLP" and ran.budget == "200 epochs, paper protocol"
    assert ran.seeds == "2 to 5 seeds per cell (seeds 0–4)"
    assert ran.device == "CPU, 2 of 7 on GPU"
    assert verdict.ran(_rows(runs[:5])).seeds == "seeds 0–4" and verdict.ran(_rows(runs[:1])).seeds == "seed 0"
    assert verdict.ran(_rows(runs[5:])).device == "GPU" and verdict.ran(pd.DataFrame()) == verdict.NOTHING_RAN
    runs[2]["params"]["dual_optimizer"] = "nupi"  # another cell, though the same setting otherwise
    assert verdict.ran(_rows(runs[:5])).seeds == "1 to 4 seeds per cell (seeds 0–4)"


def test_the_penalty_claim_judges_each_cell_by_the_penalty_rule(monkeypatch):
    label = "L0-density (%)"
    table = pd.DataFrame({"method": ["penalized", "penalized", "penalized", "constrained"],
                          f"{label} paper": ["30.00", "50.00 ± 1.00", "40.00", "20.00"],
                          "protocol": ["paper, 200 ep, 2 seeds", "paper, 200 ep, 1 seed", "short, 100 ep", "paper"]})
    table.attrs["values"] = [{"l0_density": [31.0, 33.0]}, {"l0_density": [45.0]}, {"l0_density": [40.0]},
                             {"l0_density": [20.0]}]
    monkeypatch.setattr(verdict.comparison, "compare_table", lambda name: table)
    judged = verdict.penalty_cells(("one table",))
    assert [j.outcome for j in judged] == [rules.PenaltyOutcome.WITHIN, rules.PenaltyOutcome.OFF]
    assert [j.scatter for j in judged] == [2.0, 0.0]


def test_gate_medians_need_four_fifths_at_zero_or_one_in_every_run(loaded):
    def run(name, medians):
        return {"path": name, "gate_medians": {"0": {"fc1": [0.5] * 5}, "200": {"fc1": medians}}}

    loaded.update({"a": run("a", [0.0] * 8 + [0.3, 1.0]), "b": run("b", [1.0] * 4 + [0.5])})
    rows = pd.DataFrame({"folder": ["a", "b"]})
    assert verdict.gates_decided(rows) == verdict.Count(2, 2)  # 90% and 80%
    loaded["b"] = run("b", [1.0] * 3 + [0.5, 0.2])
    assert verdict.gates_decided(rows) == verdict.Count(1, 2)


def test_restarts_pass_a_target_where_the_run_with_them_ends_nearer(monkeypatch):
    rows = pd.DataFrame({"target": [0.5, 0.5, 0.3, 0.3, 0.1], "dual_restarts": [True, False, True, False, True],
                         "l0_density": [0.501, 0.46, 0.32, 0.305, 0.1]})
    assert verdict.restarts_nearer(rows) == verdict.Count(1, 2)  # 0.1 has no pair


def test_a_verdict_on_a_smaller_scale_is_never_printed_bare():
    claim = verdict.BY_KEY["cifar10_control"]
    found = verdict.Assessment(claim, verdict.NOTHING_RAN, verdict.Count(10, 10), "reproduced", "not tested here")
    assert verdict.verdict_at_scale(found) == f"reproduced at {claim.scale}"
    mnist = verdict.Assessment(verdict.BY_KEY["one_shot_mnist"], verdict.NOTHING_RAN, verdict.Count(1, 1),
                               "reproduced", "reproduced")
    assert verdict.verdict_at_scale(mnist) == "reproduced"


def test_every_claim_of_the_papers_experiments_is_declared_once_with_its_scale():
    where = " ".join(c.where for c in verdict.CLAIMS)
    for part in ("§5.2", "§5.3", "§5.4", "§5.5", "§5.6", "Appendix E", "Appendix H", "Appendix I", "Appendix K"):
        assert part in where, part
    assert len(verdict.BY_KEY) == len(verdict.CLAIMS)
    for claim in verdict.CLAIMS:
        assert claim.paper_scale
        if claim.evidence is None:
            assert claim.why_not and claim.judge is None
        else:
            assert claim.counted and claim.scale and claim.judge is not None
            assert claim.at_paper_scale or claim.scale != claim.paper_scale


def test_the_table_and_the_history_cover_every_claim(monkeypatch):
    found = [verdict.Assessment(c, verdict.NOTHING_RAN, verdict.Count(0, 0), verdict.NOT_TESTED, verdict.NOT_TESTED)
             for c in verdict.CLAIMS]
    table = verdict.table(found, central_first=True)
    assert list(table.columns) == ["claim", "in the paper", "verdict, our scale", "what we ran", "the paper's scale",
                                   "verdict there", "pass", "counted"]
    assert [verdict.BY_KEY[k].words in cell for k, cell in zip(verdict.CENTRAL, table["claim"])] == [True] * 4
    history = verdict.before_and_after(found)
    assert len(history) == len(verdict.CLAIMS)
    assert set(history["at 8175249"]) <= set(verdict.VERDICTS) | {"—"}


def test_every_claim_links_a_section_its_page_labels():
    from pathlib import Path

    book = Path(__file__).resolve().parents[1] / "book"
    for claim in verdict.CLAIMS:
        page = book / f"{claim.page}.md"
        assert page.exists(), f"{claim.words}: no page {page.name}"
        if claim.section:
            assert f"({claim.section})=" in page.read_text(), f"{claim.words}: {page.name} has no ({claim.section})="


def test_a_changed_preset_takes_its_old_records_out_of_every_claim_alike(monkeypatch):
    """The MNIST MLP's dual lr changed in a temporary configuration, records untouched: no claim counts the MLP's
    records as the paper protocol's, the index shows them under their own superseded settings, and no claim
    mixes the two."""
    frame = index.record_index()
    mlp = index.select(frame, protocol="paper protocol", model="mlp", dataset="mnist", sparsity="structured",
                       variant="")  # the runs the changed value made (an explicit dual lr is its own variant)
    assert len(mlp) > 100
    before = {f.claim.key: f for f in verdict.claims(frame)}
    monkeypatch.setitem(presets.PAPER, ("mnist", "mlp"), dict(presets.PAPER[("mnist", "mlp")], dual_lr=5e-4))
    index._index.cache_clear()
    changed = index.record_index()
    assert set(changed.loc[changed["folder"].isin(mlp["folder"]), "protocol"]) \
        == {"paper protocol, superseded settings"}
    for claim in verdict.CLAIMS:
        if claim.evidence is None:
            continue
        rows = index.select(changed, **claim.evidence)
        assert not rows["folder"].isin(mlp["folder"]).any(), claim.key
        assert not rows["protocol"].str.contains("superseded").any(), claim.key
    after = {f.claim.key: f for f in verdict.claims(changed)}
    for key in ("one_shot_mnist", "counts_mnist", "gate_medians", "bisection"):
        assert "MLP" in before[key].ran.model and "MLP" not in after[key].ran.model, key
    index._index.cache_clear()
