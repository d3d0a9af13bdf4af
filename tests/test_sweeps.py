"""The sweep command: several grid files run in the order given, through one pool of workers."""

import yaml

from paperlib import records, sweeps


def test_several_grids_are_listed_in_order_with_their_record_status(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path / "runs"))
    notebook = str(records.project_root() / "book" / "mnist.ipynb")
    grids = []
    for name, targets in (("a", [0.2, 0.4]), ("b", [0.6])):
        grid = tmp_path / f"{name}.yaml"
        grid.write_text(yaml.safe_dump({"notebook": notebook, "dataset": "mnist",
                                        "base": {"experiment": name, "model": "mlp", "preset": "cpu"},
                                        "grid": {"target": targets}}))
        grids.append(str(grid))
    done = sweeps.run_folder({"experiment": "a", "model": "mlp", "preset": "cpu", "target": 0.4}, "mnist",
                             sweeps.notebook_defaults(notebook))
    records.write_json(done / "metrics.json", {"status": "complete"})

    assert sweeps.main([*grids, "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["missing", "complete", "missing"]
    assert [line.split()[1].split("/runs/")[1].split("-")[0] for line in lines] == ["a/mlp", "a/mlp", "b/mlp"]
    assert "t0.2" in lines[0] and "t0.4" in lines[1] and "t0.6" in lines[2]
