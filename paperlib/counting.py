"""Parameter and MAC counts of test-time (purged) models (App. D, App. J.1).

Two conventions:

* ``"paper"``: the one the paper's tables use, i.e. that of the ``pytorch``
  backend of ptflops, which the authors' code calls: convolution and linear
  multiply-accumulates *plus* one operation per bias entry, two per element for
  affine batch-norm, one per output element of a ReLU and one per input element
  of a pooling layer. Functional operations (the residual additions) are not
  counted.
* ``"plain"``: only the multiply-accumulates of convolutions and linear layers.

Both are computed by running one forward pass on a single zero input and
reading each leaf module's input and output shapes. With ``sparse_weights``
(unstructured models, App. L) a weight or bias entry that is exactly zero costs
neither a parameter nor a MAC.
"""

import math

import torch
import torch.nn as nn

CONVENTIONS = ("paper", "plain")
_POOLS = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)


def _entries(tensor: torch.Tensor | None, sparse_weights: bool) -> int:
    if tensor is None:
        return 0
    return int(tensor.count_nonzero()) if sparse_weights else tensor.numel()


def _module_macs(module: nn.Module, inp: torch.Tensor, out: torch.Tensor, convention: str,
                 sparse_weights: bool) -> int:
    paper = convention == "paper"
    if isinstance(module, nn.Conv2d):
        positions = out.shape[0] * math.prod(out.shape[2:])  # output positions per channel
        macs = positions * _entries(module.weight, sparse_weights)
        return macs + (positions * _entries(module.bias, sparse_weights) if paper else 0)
    if isinstance(module, nn.Linear):
        rows = math.prod(inp.shape[:-1])
        macs = rows * _entries(module.weight, sparse_weights)
        return macs + (_entries(module.bias, sparse_weights) if paper else 0)
    if not paper:
        return 0
    if isinstance(module, nn.BatchNorm2d):
        return inp.numel() * (2 if module.affine else 1)
    if isinstance(module, nn.ReLU):
        return out.numel()
    if isinstance(module, _POOLS):
        return inp.numel()
    return 0


@torch.no_grad()
def count_macs(model: nn.Module, input_shape: tuple[int, ...] | None = None, convention: str = "paper",
               sparse_weights: bool = False) -> int:
    """Multiply-accumulates of one forward pass on a single example of ``input_shape``.

    ``input_shape`` defaults to ``model.input_shape``.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}; got {convention!r}")
    shape = tuple(input_shape or model.input_shape)
    total = [0]

    def hook(module, inputs, output):
        total[0] += _module_macs(module, inputs[0], output, convention, sparse_weights)

    handles = [m.register_forward_hook(hook) for m in model.modules() if len(list(m.children())) == 0]
    was_training = model.training
    try:
        model.eval()
        device = next(model.parameters()).device
        model(torch.zeros((1, *shape), device=device))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return total[0]


def count_params(model: nn.Module, sparse_weights: bool = False) -> int:
    """Trainable parameters; with ``sparse_weights`` only non-zero conv/linear entries count."""
    total = 0
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            counted_sparsely = sparse_weights and isinstance(module, (nn.Conv2d, nn.Linear))
            total += _entries(param, True) if counted_sparsely else param.numel()
    return total
