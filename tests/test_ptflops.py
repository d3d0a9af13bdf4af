"""Cross-check of :mod:`paperlib.method.counting` against ptflops, the counter the authors used (App. D, App. J.1).

The paper's parameter and MAC counts come from ``ptflops.get_model_complexity_info``
with its ``pytorch`` backend. Our ``"paper"`` convention re-implements that
backend's per-module rules; here the two must agree *exactly*, on the five dense
architectures of App. J.1 and on purged models (App. D), whose plain layers have
irregular widths and whose forward selects features (``torch.index_select``) and adds residual
branches back at their channels (``torch.index_add``): ptflops counts neither, and so must we.

ptflops 0.7.5 also patches ``torch.nn.functional`` (``count_functional=True``, its
default). An ``nn.ReLU`` or ``nn.MaxPool2d`` module calls ``F.relu`` /
``F.max_pool2d`` internally, so with that default every such module is counted
twice, once by its module hook and once by the patched function. The paper's
numbers (e.g. 267k MACs for the MLP in Table 5) are those of the module hooks
alone, so the comparisons below turn functional counting off, and
:func:`test_functional_counting_double_counts_activations` documents why.

ptflops mutates the model it is given (hooks and counters are attached and removed),
so it always receives a deep copy.
"""

import copy
import math

import pytest
import torch
import torch.nn as nn

ptflops = pytest.importorskip("ptflops")

from paperlib.method.counting import count_macs, count_params  # noqa: E402
from paperlib.method.gates import BETA  # noqa: E402
from paperlib.method.layers import L0Layer  # noqa: E402
from paperlib.paper.models import build_model  # noqa: E402
from paperlib.paper.purge import purge  # noqa: E402

OFF, ON = -5.0, 5.0  # log_alpha with median gate exactly 0 / exactly 1 (threshold: beta ln 11, about 1.60)
BOUND = BETA * math.log(11.0)

#: Dense models of App. J.1 with their parameter and MAC counts in the paper's
#: convention, exactly as ptflops 0.7.5 gives them (functional counting off).
#: Table 5 (App. J.1) rounds them to 266k / 267k (MLP), 431k (LeNet5),
#: 36.5M / 5,959M (WRN-28-10) and 25.5M / 4,120M (ResNet50). ResNet18 is the
#: 64x64 TinyImageNet model of this package.
DENSE = {
    "mlp": (266_610, 267_010),
    "lenet5": (431_080, 2_327_130),
    "wrn-28-10": (36_479_194, 5_959_194_890),
    "resnet18": (11_271_432, 557_314_248),
    "resnet50": (25_557_032, 4_121_925_096),
}


def ptflops_counts(model: nn.Module, input_shape, count_functional: bool = False) -> tuple[int, int]:
    """(MACs, parameters) from ptflops' pytorch backend, as integers."""
    macs, params = ptflops.get_model_complexity_info(
        copy.deepcopy(model), tuple(input_shape), backend="pytorch",
        backend_specific_config={"count_functional": count_functional},
        as_strings=False, print_per_layer_stat=False)
    assert macs is not None and params is not None, "ptflops failed on this model (it prints the exception)"
    return macs, params


@pytest.mark.parametrize("name", sorted(DENSE))
def test_dense_models_match_ptflops(name):
    model = build_model(name, gated=False).eval()
    shape = model.input_shape
    macs, params = ptflops_counts(model, shape)
    assert count_macs(model, shape, "paper") == macs
    assert count_params(model) == params
    assert (params, macs) == DENSE[name]


def test_functional_counting_double_counts_activations():
    """With its default ``count_functional=True`` ptflops counts the MLP's 400 ReLU outputs twice."""
    model = build_model("mlp", gated=False).eval()
    with_functional, _ = ptflops_counts(model, model.input_shape, count_functional=True)
    without, _ = ptflops_counts(model, model.input_shape, count_functional=False)
    assert with_functional == 267_410
    assert without == 267_010 == count_macs(model, model.input_shape, "paper")
    assert with_functional - without == 300 + 100  # relu1 and relu2 outputs, counted again through F.relu


def set_gates_(model: nn.Module, off_layers=(), seed: int = 0) -> None:
    """A third of each layer's gates with median 0, a third 1, a third fractional; ``off_layers`` entirely 0."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, layer in model.named_modules():
            if not isinstance(layer, L0Layer):
                continue
            log_alpha = layer.weight_log_alpha
            kind = torch.randperm(log_alpha.numel(), generator=generator) % 3
            fractional = torch.empty(log_alpha.shape).uniform_(-0.9 * BOUND, 0.9 * BOUND, generator=generator)
            values = torch.where(kind == 0, OFF, torch.where(kind == 1, ON, fractional))
            log_alpha.copy_(torch.full_like(values, OFF) if name in off_layers else values)


# name, input shape, gated layers switched entirely off (placeholder groups in the purged model)
PURGED = [
    ("mlp", (1, 28, 28), ()),
    ("mlp", (1, 28, 28), ("fc2",)),
    ("lenet5", (1, 28, 28), ()),
    ("lenet5", (1, 28, 28), ("conv2",)),
    ("wrn-28-10", (3, 32, 32), ("stage2.0.conv1.conv",)),
    ("resnet18", (3, 64, 64), ("layer3.1.conv2.conv",)),
    ("resnet50", (3, 64, 64), ("layer1.1.conv2.conv", "layer3.0.conv3.conv")),
]


@pytest.mark.parametrize("name, shape, off_layers", PURGED, ids=[f"{n}-{'-'.join(o) or 'mixed'}" for n, _, o in PURGED])
def test_purged_models_match_ptflops(name, shape, off_layers):
    gated = build_model(name, gated=True).eval()
    set_gates_(gated, off_layers)
    purged = purge(gated).eval()
    macs, params = ptflops_counts(purged, shape)
    assert count_macs(purged, shape, "paper") == macs
    assert count_params(purged) == params
    # The purged model must be genuinely smaller, or this would only re-test the dense case.
    dense = build_model(name, gated=False)
    assert macs < count_macs(dense, shape, "paper")
    assert params < count_params(dense)
