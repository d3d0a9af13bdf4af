"""Parameter and MAC counts of test-time (purged) models (App. D, App. J.1), in two conventions:

* ``"paper"``: the paper's tables', that of ptflops' ``pytorch`` backend, which the authors' code calls: convolution and
  linear multiply-accumulates *plus* one operation per bias entry, two per element of an affine batch norm, one per
  output element of a ReLU (ReLU6, PReLU, ELU, LeakyReLU) and one per input element of a pooling layer; functional
  operations (the residual additions) are not counted. ``nn.MultiheadAttention`` adds, as ptflops' hook does, one
  operation per element of Q (its scaling), of the attention scores (the softmax) and per projection bias entry;
* ``"plain"``: only the multiply-accumulates of convolutions and linear layers.

Attention counts in both: an ``nn.MultiheadAttention`` its projections and the products QK^T and AV, a call of
``F.scaled_dot_product_attention`` its two products. One forward pass on a single zero input reads each leaf module's
input and output shapes. With ``sparse_weights`` (App. L) an entry that is exactly zero costs nothing. A weight that
layers share counts once. Gated layers (:mod:`paperlib.method.layers`) count according to ``gates``:

* ``"dense"``: as the plain layers they gate, every gate open;
* ``"expected"``: each entry weighted by P(z != 0) of its gate (eq. 8): ``count_params`` is the expected L0 norm of the
  gated parameters plus the others (a float);
* ``"test"``: the entries whose median gate (eq. 9) is non-zero: the test-time model before purging, which can remove
  more (App. D).

A batch norm that a gated convolution took in (or a :class:`~paperlib.method.layers.ConvBN`'s) loses its closed
channels with it. The gates' own ``log_alpha`` are not counted in these three modes.
"""

import math
import operator

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .layers import ConvBN, GatedConv2d, GatedLinear, L0Layer

CONVENTIONS = ("paper", "plain")
GATES = ("dense", "expected", "test")
_ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.PReLU, nn.ELU, nn.LeakyReLU)  # ptflops' one operation per output element
_POOLS = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)
_CONV_LIKE = (nn.Conv2d, GatedConv2d)
_LINEAR_LIKE = (nn.Linear, GatedLinear)


def _entries(tensor: torch.Tensor | None, sparse_weights: bool, keep: torch.Tensor | None = None) -> int | float:
    if tensor is None:
        return 0
    if keep is not None:  # probabilities (a float count) or whether the median gate is non-zero
        kept = keep * tensor.ne(0) if sparse_weights else keep
        return float(kept.sum()) if kept.is_floating_point() else int(kept.sum())
    return int(tensor.count_nonzero()) if sparse_weights else tensor.numel()


@torch.no_grad()
def gate_keeps(model: nn.Module, gates: str) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
    """What each gated parameter counts for under ``gates``: ``(by parameter, by batch norm)``.

    The first maps ``id(parameter)`` to a tensor of its shape (probabilities, or booleans: the median gate is not zero),
    the second ``id(batch norm)`` to one value per channel. Empty for ``"dense"``.
    """
    if gates not in GATES:
        raise ValueError(f"gates must be one of {GATES}; got {gates!r}")
    by_param, by_bn = {}, {}
    if gates == "dense":
        return by_param, by_bn
    layers = [m for m in model.modules() if isinstance(m, L0Layer)]
    bn_of = {id(m.conv): m.bn for m in model.modules() if isinstance(m, ConvBN) and m.gated_batch_norm() is not None}
    for layer in layers:
        if gates == "expected":
            values = layer.gate_probabilities()
        else:
            values = tuple(None if z is None else z.ne(0) for z in layer.gate_tensors(median=True))
        weight_keep, bias_keep = layer._broadcast_gates(*values)
        by_param[id(layer.weight)] = weight_keep.expand_as(layer.weight)
        if layer.bias is not None and bias_keep is not None:
            by_param[id(layer.bias)] = bias_keep.expand_as(layer.bias)
        bn = bn_of.get(id(layer), getattr(layer, "bn", None))
        if bn is not None and layer.sparsity == "structured":
            by_bn[id(bn)] = values[0]
            by_param.update({id(p): values[0] for p in bn.parameters()})
    return by_param, by_bn


def _module_macs(module: nn.Module, inp: torch.Tensor, out: torch.Tensor, convention: str,
                 sparse_weights: bool, keeps: tuple[dict, dict] = ({}, {})) -> int | float:
    paper = convention == "paper"
    by_param, by_bn = keeps
    if isinstance(module, ConvBN):  # its GatedConv2d runs through forward_with_mask, unseen by hooks
        module = module.conv
    if isinstance(module, _CONV_LIKE):
        positions = out.shape[0] * math.prod(out.shape[2:])  # output positions per channel
        weight, bias = module.weight, module.bias
        macs = positions * _entries(weight, sparse_weights, by_param.get(id(weight)))
        return macs + (positions * _entries(bias, sparse_weights, by_param.get(id(bias))) if paper else 0)
    if isinstance(module, _LINEAR_LIKE):
        rows = math.prod(inp.shape[:-1])
        weight, bias = module.weight, module.bias
        macs = rows * _entries(weight, sparse_weights, by_param.get(id(weight)))
        return macs + (_entries(bias, sparse_weights, by_param.get(id(bias))) if paper else 0)
    if not paper:
        return 0
    if isinstance(module, nn.BatchNorm2d):
        macs = inp.numel() * (2 if module.affine else 1)
        keep = by_bn.get(id(module))
        return macs if keep is None else macs // len(keep) * _entries(keep, False, keep)
    if isinstance(module, _ACTIVATIONS):
        return out.numel()
    if isinstance(module, _POOLS):
        return inp.numel()
    return 0


def _attention_macs(rows: int, keys: int, qk_dim: int, v_dim: int, heads: int, paper: bool) -> int:
    """QK^T and AV: ``rows`` queries of ``qk_dim`` features (over all ``heads``), each against ``keys`` keys and values
    of ``v_dim`` features; ``paper`` adds Q's scaling and the softmax (one per score, per head)."""
    macs = rows * keys * (qk_dim + v_dim)
    return macs + rows * qk_dim + rows * keys * heads if paper else macs


def _multihead_macs(module: nn.MultiheadAttention, args: tuple, kwargs: dict, paper: bool, sparse_weights: bool) -> int:
    """An ``nn.MultiheadAttention``'s projections and attention (its weights are never called as modules)."""
    query, key, value = (*args, *(kwargs.get(name) for name in ("query", "key", "value")[len(args):]))[:3]
    batch = 1 if query.dim() == 2 else query.shape[0 if module.batch_first else 1]
    rows, keys = query.numel() // query.shape[-1], key.numel() // key.shape[-1]  # batch x (target, source) length
    e = module.embed_dim
    if module._qkv_same_embed_dim:
        q_weight, k_weight, v_weight = module.in_proj_weight.split(e)
    else:
        q_weight, k_weight, v_weight = module.q_proj_weight, module.k_proj_weight, module.v_proj_weight
    macs = sum(n * _entries(w, sparse_weights) for n, w in ((rows, q_weight), (keys, k_weight), (keys, v_weight)))
    macs += rows * _entries(module.out_proj.weight, sparse_weights)
    sources = keys // batch + (module.bias_k is not None) + bool(module.add_zero_attn)
    macs += _attention_macs(rows, sources, e, e, module.num_heads, paper)
    if paper:
        macs += (rows + 2 * keys) * e * (module.in_proj_bias is not None) + rows * e * (module.out_proj.bias is not None)
    return macs


class _Attention(TorchFunctionMode):
    """Counts the calls of ``F.scaled_dot_product_attention`` made outside of other torch functions (those of
    ``nn.MultiheadAttention`` run inside ``F.multi_head_attention_forward``: its hook counts them)."""

    def __init__(self, paper: bool):
        super().__init__()
        self.paper, self.macs, self.seen = paper, 0, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            self.seen = True
            query, key, value = (*args, *(kwargs.get(name) for name in ("query", "key", "value")[len(args):]))[:3]
            self.macs += _attention_macs(query.numel() // query.shape[-1], key.shape[-2], query.shape[-1],
                                         value.shape[-1], 1, self.paper)
        return func(*args, **kwargs)


def _one_example(model: nn.Module, input_shape, reader: str = "count_macs") -> tuple[int, ...]:
    """``input_shape``, or ``model.input_shape``, checked to be a shape (``reader`` names who needs it)."""
    if input_shape is None:
        input_shape = getattr(model, "input_shape", None)
        if input_shape is None:
            raise ValueError(f"{reader} needs input_shape, the shape of one example without the batch dimension "
                             f"(e.g. (3, 32, 32)): {type(model).__name__} has no input_shape attribute to take it from")
    dims = input_shape if hasattr(input_shape, "__len__") else (input_shape,)
    try:
        shape = tuple(operator.index(n) for n in dims if not isinstance(n, bool))
    except TypeError:
        shape = ()
    if not shape or len(shape) != len(dims) or min(shape) < 1:
        raise ValueError(f"input_shape must be one example's shape, positive integers without the batch "
                         f"dimension (e.g. (3, 32, 32)); got {input_shape!r}")
    return shape


def _first_layer(module: nn.Module, x: torch.Tensor, inp: torch.Tensor, shape: tuple) -> str | None:
    """Whether the first weighted layer the forward reaches can read one example of ``shape``: an error (it cannot),
    "batch" (a linear layer reading the input directly, and ``shape`` looks like (batch, features)), or None."""
    conv = module.conv if isinstance(module, ConvBN) else module
    if isinstance(conv, _CONV_LIKE):
        channels = conv.weight.shape[1] * conv.groups
        if x.dim() != 4 or x.shape[1] != channels:
            return (f"its first layer ({type(module).__name__}) reads {channels} channels, one example of shape "
                    f"({channels}, H, W); it got {tuple(x.shape)}")
        return None
    if isinstance(module, _LINEAR_LIKE) and x.shape[-1] != module.weight.shape[1]:
        return (f"its first layer ({type(module).__name__}) reads {module.weight.shape[1]} features; "
                f"it got {tuple(x.shape)}")
    if isinstance(module, _LINEAR_LIKE) and x is inp and len(shape) == 2 and shape[0] > 1:
        return "batch"
    return None


@torch.no_grad()
def count_macs(model: nn.Module, input_shape: tuple[int, ...] | None = None, convention: str = "paper",
               sparse_weights: bool = False, gates: str = "dense") -> int | float:
    """Multiply-accumulates of one forward pass on a single example of ``input_shape``.

    ``input_shape`` (without the batch dimension) defaults to ``model.input_shape``; a shape that looks like a batch
    (the model's first layer, a linear one, reads (n, features) with n > 1 from the input, and the model has no
    attention) or that its first layer cannot read is an error. ``gates`` says how gated layers count (module
    docstring): a float for ``"expected"``.

    >>> import torchvision
    >>> count_macs(torchvision.models.resnet18(), (3, 32, 32), "plain")
    37523456
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module; got {type(model).__name__}")
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}; got {convention!r}")
    shape = _one_example(model, input_shape)
    keeps = gate_keeps(model, gates)
    total, first, attention = [0], [], _Attention(convention == "paper")
    inp = torch.zeros((1, *shape), device=next(model.parameters()).device)

    def hook(module, inputs, output):
        total[0] += _module_macs(module, inputs[0], output, convention, sparse_weights, keeps)

    def multihead_hook(module, args, kwargs, output):
        total[0] += _multihead_macs(module, args, kwargs, convention == "paper", sparse_weights)
        attention.seen = True  # a model with attention reads sequences: (length, features) may be one example

    def first_hook(module, inputs):  # the first layer that the forward reaches
        if not first:
            first.append(_first_layer(module, inputs[0], inp, shape))
            if first[0] not in (None, "batch"):
                raise ValueError(f"input_shape {shape} does not fit {type(model).__name__}: {first[0]}; "
                                 f"pass one example's shape, without the batch dimension")

    counted = [m for m in model.modules() if len(list(m.children())) == 0 or isinstance(m, L0Layer)
               or isinstance(m, ConvBN) and isinstance(m.conv, GatedConv2d)]
    handles = [m.register_forward_hook(hook) for m in counted]
    handles += [m.register_forward_hook(multihead_hook, with_kwargs=True) for m in model.modules()
                if isinstance(m, nn.MultiheadAttention)]
    handles += [m.register_forward_pre_hook(first_hook) for m in model.modules()
                if isinstance(m, (*_CONV_LIKE, ConvBN, *_LINEAR_LIKE))]
    was_training = model.training
    try:
        model.eval()
        with attention:
            model(inp)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    if first == ["batch"] and not attention.seen:
        raise ValueError(f"input_shape {shape} looks like a batch of {shape[0]} examples: {type(model).__name__}'s "
                         f"first layer reads {shape[1]} features; pass one example's shape, ({shape[1]},)")
    return total[0] + attention.macs


def count_params(model: nn.Module, sparse_weights: bool = False, gates: str | None = None) -> int | float:
    """Trainable parameters; with ``sparse_weights`` only non-zero conv/linear entries count.

    ``gates=None`` counts every parameter tensor, gates included; ``"dense"``, ``"expected"`` or ``"test"`` count a
    gated model's weights as the module docstring says (a float for ``"expected"``).

    >>> import torchvision
    >>> count_params(torchvision.models.resnet18(num_classes=10))
    11181642
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module; got {type(model).__name__}")
    keeps, gate_ids = {}, set()
    if gates is not None:
        keeps = gate_keeps(model, gates)[0]
        gate_ids = {id(p) for m in model.modules() if isinstance(m, L0Layer) for p in m.gate_parameters()}
    total, seen = 0, set(gate_ids)  # a weight that layers share (tied) counts once
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if id(param) in seen:
                continue
            seen.add(id(param))
            counted_sparsely = sparse_weights and isinstance(module, (nn.Conv2d, nn.Linear, L0Layer))
            total += _entries(param, counted_sparsely, keeps.get(id(param)))
    return total
