"""paperlib.report (issue 51, item 2): one row per convolution and linear layer, gated or not and why not, with its
densities and its parameters and MACs dense and after purging."""

import importlib.util
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import paperlib
from paperlib.method.budget import REASONS, report
from paperlib.method.gates import median_gates
from paperlib.method.layers import L0Layer

spec = importlib.util.spec_from_file_location("test_budget", Path(__file__).with_name("test_budget.py"))
test_budget = importlib.util.module_from_spec(spec)
spec.loader.exec_module(test_budget)
Branches, SHAPE, set_gates = test_budget.Branches, test_budget.SHAPE, test_budget._set_gates


class Odd(nn.Module):
    """A layer of each kind the default rule leaves: a grouped convolution, a convolution called twice, one inside
    a module that the trace calls whole, and the stem whose channels the grouped one reads."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.shared = nn.Conv2d(8, 8, 1)
        self.inner = nn.Sequential(nn.Conv2d(8, 6, 1), nn.ReLU())
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        x = F.relu(self.grouped(F.relu(self.stem(x))))
        return self.fc(self.inner(self.shared(self.shared(x))).mean((2, 3)))


def _purged(model, shape, leaves=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return paperlib.purge(model.eval(), torch.zeros(1, *shape), leaves)


def _weighted(model):
    gated = [name for name, m in model.named_modules() if isinstance(m, L0Layer)]
    return [name for name, m in model.named_modules() if name in gated or isinstance(m, (nn.Conv2d, nn.Linear))
            and not any(name.startswith(g + ".") for g in gated)]


def test_rows_count_each_layer_dense_and_purged_and_give_its_densities():
    torch.manual_seed(0)
    model = paperlib.sparsify(Branches())
    set_gates(model, closed=0.4)
    with torch.no_grad():  # some gates in between: an expected density differs from the test-time one
        model.fc1.weight_log_alpha[:20] = 0.5
    table = paperlib.report(model, SHAPE)
    assert isinstance(table, pd.DataFrame) and list(table.index) == _weighted(model)
    small = _purged(model, SHAPE)
    assert table["macs_dense"].sum() == paperlib.count_macs(model, SHAPE, "plain")  # "plain": convolutions, linear
    assert table["macs_now"].sum() == paperlib.count_macs(small, SHAPE, "plain")
    assert table["macs_now"].sum() < 0.8 * table["macs_dense"].sum()
    for name, row in table.iterrows():
        purged = small.get_submodule(name)
        assert row["params_now"] == sum(p.numel() for p in purged.parameters()), name
        layer = model.get_submodule(name)
        assert row["gated"] == isinstance(layer, L0Layer)
        if row["gated"]:
            assert row["density"] == pytest.approx(layer.density().item())
            assert row["test_density"] == pytest.approx(median_gates(layer.weight_log_alpha).ne(0).float().mean().item())
    assert table.loc["fc1", "density"] < table.loc["fc1", "test_density"]  # P(z != 0) < 1 where the median is 1
    assert table.loc["expand", "why_not"] == "gated by another layer" and "dw" in table.loc["expand", "detail"]
    assert table.loc["expand", "params_now"] < table.loc["expand", "params_dense"]  # it loses what dw closes


def test_each_reason_a_layer_has_no_gates():
    torch.manual_seed(0)
    model = paperlib.sparsify(Odd(), leaves=["inner"], exclude="fc")
    rows = {row["layer"]: row for row in report(model, SHAPE, leaves=["inner"])}
    assert {name: row["why_not"] for name, row in rows.items()} == {
        "stem": "pinned", "grouped": "grouped convolution", "shared": "shared weight", "inner.0": "untraced",
        "fc": "excluded by the user"}
    assert set(row["why_not"] for row in rows.values()) <= set(REASONS)
    assert not any(row["gated"] for row in rows.values())
    assert all(row["params_now"] == row["params_dense"] and row["macs_now"] == row["macs_dense"]
               for row in rows.values())
    assert rows["shared"]["macs_dense"] == 2 * 8 * 8 * 8 * 8  # called twice on 8x8: both calls counted


def test_resnet18_rows_say_the_residual_sums_keep_conv2_and_the_shortcuts():
    torch.manual_seed(0)
    model = paperlib.sparsify(torchvision.models.resnet18(num_classes=10), exclude="fc")
    set_gates(model, closed=0.5)
    table = paperlib.report(model, (3, 32, 32))
    assert len(table) == 21 and table["gated"].sum() == 8
    assert set(table.index[table["gated"]]) == {f"layer{i}.{j}.conv1" for i in range(1, 5) for j in range(2)}
    ungated = table[~table["gated"]]
    assert ungated["why_not"].value_counts().to_dict() == {"residual sum": 12, "excluded by the user": 1}
    assert ungated.loc["fc", "why_not"] == "excluded by the user"
    # a closed conv1 channel removes its row and conv2's input column: conv2 loses as much as conv1
    for i in range(1, 5):
        for j in range(2):
            conv1, conv2 = table.loc[f"layer{i}.{j}.conv1"], table.loc[f"layer{i}.{j}.conv2"]
            assert conv1["params_now"] / conv1["params_dense"] == pytest.approx(conv1["test_density"])
            assert conv2["params_now"] / conv2["params_dense"] == pytest.approx(conv1["test_density"])
    small = _purged(model, (3, 32, 32))
    assert table["macs_now"].sum() == paperlib.count_macs(small, (3, 32, 32), "plain")


def test_report_refuses_what_is_no_model_and_a_model_without_a_shape():
    with pytest.raises(TypeError, match="model"):
        paperlib.report([nn.Linear(2, 2)], (2,))
    with pytest.raises(ValueError, match="input_shape"):
        paperlib.report(paperlib.sparsify(Branches()))
