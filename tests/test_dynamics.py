"""analysis.dynamics: the dual-restarts figure's runs in words, on records made here."""

from analysis import dynamics


def run(target, restarts, densities, error=1.5):
    """A record whose logged model density takes these values, one per step."""
    return {"metrics": {"target": target, "val_error_final": error}, "params": {"dual_restarts": restarts},
            "steps": [{"epoch": str(i), "l0_density": str(d)} for i, d in enumerate(densities)]}


def test_with_restarts_the_summary_gives_the_highest_density_after_first_reaching_the_target():
    line = dynamics.restarts_summary(run(0.3, True, [0.9, 0.5, 0.29, 0.31, 0.305]))
    assert line == ("- target 30%, with restarts: ends at 30.5% (highest after first reaching the target 31.0%), "
                    "final error 1.50%")


def test_without_restarts_it_gives_the_lowest_and_a_run_never_feasible_its_last_density():
    assert "(lowest 21.0%)" in dynamics.restarts_summary(run(0.3, False, [0.9, 0.29, 0.21, 0.24]))
    assert "ends at 40.0% (lowest 40.0%)" in dynamics.restarts_summary(run(0.3, False, [0.9, 0.5, 0.4]))


def test_the_runs_are_told_by_target_with_restarts_first_and_labelled_so():
    runs = [run(0.5, False, [0.4]), run(0.3, False, [0.2]), run(0.5, True, [0.5]), run(0.3, True, [0.3])]
    lines = dynamics.restarts_in_words(runs).splitlines()
    assert [line.split(":")[0] for line in lines] == ["- target 30%, with restarts", "- target 30%, without restarts",
                                                     "- target 50%, with restarts", "- target 50%, without restarts"]
    assert dynamics.restarts_label(runs[0]) == "target 50%, no restarts"
