"""A run page's title, line, links and table (paperlib.harness.run_pages), on the records of runs/ and synthetic ones."""

import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

from paperlib.harness import plots, protocols, records, run_pages, studies  # noqa: E402
from paperlib.harness.presets import resolve_config  # noqa: E402

#: Parameters that do not change what a run trains, or only name its place.
PLACE = {"experiment", "run_name", "threads", "device", "compile_gates", "smoke"}


def _complete_records():
    for metrics_file in sorted(records.runs_dir().glob("*/*/metrics.json")):
        metrics = json.loads(metrics_file.read_text())
        if metrics.get("status") == "complete":
            params = metrics if metrics.get("kind") == "bisection search" else records.load_record(
                metrics_file.parent)["params"]
            yield metrics_file.parent, params, metrics


def test_records_with_one_title_are_one_configuration():
    """Every record in runs/ gets a title of its own within its experiment, and two records in different
    experiments share a title only when they trained the same configuration."""
    by_title: dict[str, list[tuple[Path, dict]]] = {}
    for folder, params, _ in _complete_records():
        by_title.setdefault(run_pages.run_title(params), []).append((folder, params))
    assert len(by_title) > 100
    for title, found in by_title.items():
        experiments = [folder.parent.name for folder, _ in found]
        assert len(set(experiments)) == len(experiments), f"{title}: {[str(f) for f, _ in found]}"
        first = {k: v for k, v in found[0][1].items() if k not in PLACE}
        for folder, params in found[1:]:
            other = {k: v for k, v in params.items() if k not in PLACE}
            shared = first.keys() & other.keys()
            assert {k: first[k] for k in shared} == {k: other[k] for k in shared}, f"{title}: {folder}"


def test_title_names_what_differs_from_the_preset():
    config = resolve_config(dataset="mnist", model="mlp", method="constrained", grouping="layer",
                            target=[0.3, 0.3, 0.3], preset="paper", seed=2)
    plain = run_pages.run_title(config.to_dict())
    assert plain.startswith("MLP on MNIST") and "30/30/30%" in plain and "seed 2" in plain
    assert plain.endswith(protocols.protocol_name("paper"))
    for change, word in [({"dual_restarts": False}, "dual restarts"), ({"linear_init": "fan_out"}, "fan-out"),
                         ({"dual_lr": 0.5}, "0.5"), ({"clamp_log_alpha": True}, "log α")]:
        other = resolve_config(**{**config.to_dict(), "run_name": "", **change}).to_dict()
        assert run_pages.run_title(other) != plain and word in run_pages.run_title(other)
        assert not any(raw in run_pages.run_title(other) for raw in ("True", "False", "fan_out", "_lr")), \
            "a run's title names its changes in words, never as raw values"
    penalized = resolve_config(dataset="mnist", model="lenet5", method="penalized", lmbda=0.1, preset="cpu")
    assert "λ_pen 0.1" in run_pages.run_title(penalized.to_dict())


def test_line_names_the_device_the_record_ran_on():
    """A record trained on a GPU under the CPU protocol says GPU; one trained on a CPU says CPU."""
    seen = set()
    for _, params, metrics in _complete_records():
        if metrics.get("kind") == "bisection search":
            continue
        line = run_pages.run_line(params, metrics)
        device = {"cpu": "**ran on** CPU", "cuda": "**ran on** GPU"}[metrics["device"]]
        assert device in line and protocols.record_protocol(params) in line
        assert params["run_name"] in line and f"{params['preset']} preset" not in line
        seen.add((params["preset"], metrics["device"]))
    assert ("cpu", "cuda") in seen and ("paper", "cpu") in seen


def test_cited_by_links_the_pages_of_the_studies_whose_grids_ask_for_the_record():
    study = studies.study("tab:mlp_control")
    grid = study.grids_at("paper")[0]
    from analysis import report
    folder = next(folder for _, folder in report.grid_runs(grid) if (folder / "metrics.json").exists())
    pages = run_pages.citing_pages(folder)
    assert "Table 10" in pages[study.page]
    line = run_pages.cited_by_line(folder)
    target = (folder / Path(line.split(f"](", 1)[1].split(")", 1)[0])).resolve()
    assert target == (records.project_root() / "book" / f"{study.page}.md").resolve()
    assert run_pages.citing_pages(records.runs_dir() / "nowhere" / "no-run") == {}


def test_run_table_is_short_and_in_percent(tmp_path):
    config = resolve_config(dataset="mnist", model="mlp", method="constrained", target=0.2, preset="paper")
    metrics = {"l0_density": 0.2012, "params_pct": 13.7, "macs_pct": 13.8,
               "val_error_best": 1.87, "val_error_final": 2.09}
    history = [{"epoch": "1", "phase": "train", "l0_density": "0.2012", "val_error": "1.87"}]
    table = run_pages.run_table({"params": config.to_dict(), "metrics": metrics, "history": history})
    assert list(table.index) == ["ours"]
    assert table.loc["ours", "target"] == "20" and table.loc["ours", "density"] == "20.12"
    assert max(len(c) for c in table.columns) <= 10
    assert not any(value in (True, False) for value in table.to_numpy().ravel())


def test_show_displays_a_palette_png_of_the_figure(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda image: shown.append(image))
    fig, ax = plt.subplots(figsize=(plots.PAGE_WIDTH, 2))
    ax.plot([0, 1], [0, 1], color="C0")
    run_pages.show(fig)
    image = Image.open(io.BytesIO(shown[0].data))
    assert image.mode == "P" and 0.8 * 100 * plots.PAGE_WIDTH <= image.size[0] <= 100 * plots.PAGE_WIDTH
    assert len(image.getcolors()) <= 32
    assert not plt.fignum_exists(fig.number)


def test_error_axis_is_logarithmic_so_small_errors_show():
    config = resolve_config(dataset="mnist", model="mlp", method="constrained", target=0.2, preset="paper")
    history = [{"epoch": str(e), "phase": "train", "l0_density": "0.3", "val_error": str(90 / (e + 1)),
                "train_loss": str(1 / (e + 1)), "params_pct": "30", "macs_pct": "30"} for e in range(100)]
    fig = plots.plot_dynamics({"params": config.to_dict(), "metrics": {}, "history": history, "steps": []})
    error_axis = fig.axes[3]
    assert error_axis.get_yscale() == "log" and error_axis.get_ylim()[0] < 0.9
    assert fig.get_size_inches()[0] == plots.PAGE_WIDTH
    plt.close(fig)


def test_header_goes_only_into_a_first_cell_that_is_a_heading(tmp_path):
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": ["x = 1"], "outputs": []}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "notebook.ipynb").write_text(json.dumps(notebook))
    try:
        run_pages.write_header(tmp_path)
    except ValueError as error:
        assert "markdown heading" in str(error)
    else:
        raise AssertionError("a notebook without a heading got a header")


def test_execution_metadata_is_dropped_and_nothing_else(tmp_path):
    cells = [{"cell_type": "code", "metadata": {"papermill": {"duration": 1.0}, "execution": {"a": 1}, "tags": []},
              "source": ["x = 1"], "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}]},
             {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": ["y = 2"], "outputs": []}]
    (tmp_path / "notebook.ipynb").write_text(json.dumps({"cells": cells, "metadata": {"papermill": {"parameters": {}}}}))
    assert records.drop_execution_metadata(tmp_path) == 1
    after = json.loads((tmp_path / "notebook.ipynb").read_text())
    assert after["cells"][0]["metadata"] == {} and after["cells"][1]["metadata"] == {"tags": ["parameters"]}
    assert after["cells"][0]["outputs"] == cells[0]["outputs"] and "papermill" in after["metadata"]
    assert records.drop_execution_metadata(tmp_path) == 0


def _legend_texts(fig) -> set[str]:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    return {text.get_text() for legend in legends for text in legend.get_texts()}


def test_every_panel_with_several_lines_has_a_legend_and_multipliers_are_named_by_layer():
    """A run page's dynamics figure: a panel that draws several lines says which is which, in its own legend
    or in the figure's; a layer-wise run's multipliers are named by their layers."""
    for run in ("mnist/lenet5-constrained-layer-t0.5_0.3_0.7_0.1-s0-paper",
                "cifar10_cpu2/wrn-16-1-constrained-layer-t0.65-s0-cpu2",
                "mnist/mlp-constrained-model-t0.33-s0-paper", "mlp_control/mlp-penalized-layer-l0.1-s0-paper"):
        record = records.load_record(records.runs_dir() / run)
        fig = plots.plot_dynamics(record)
        legend = _legend_texts(fig)
        for ax in fig.axes:
            labels = {line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")}
            if len(ax.get_lines()) > 1:
                assert labels and labels <= legend, f"{run}: panel {ax.get_title()!r} has no legend for its lines"
        if record["params"]["grouping"] == "layer" and record["params"]["method"] == "constrained":
            assert set(record["metrics"]["l0_density_per_layer"]) <= legend, run
        plt.close(fig)
