"""What a gated model costs, beyond the paper: :class:`ExpectedCost` and the per-layer :func:`report`.

The paper constrains the expected L0-density of the gated groups (eq. 3). :class:`ExpectedCost` is instead the
expected parameter count or MACs (``"plain"``, :mod:`paperlib.method.counting`) of the whole purged model,
differentiable in the gates. It reads the test-time model's channel graph as :func:`~paperlib.method.graph_purge.purge`
does. A channel is non-zero with the probability P(z != 0) (eq. 8) of the gate that last closed it (a convolution's
output gate), through an element-wise product the product of its factors', through a sum 1 - prod(1 - p);
it stays when also some layer reads it (a linear layer reads an input feature with its gate's probability, any
other layer surely). A convolution or linear layer then costs its weights per input-output pair times the expected
count of its kept input channels times that of its output channels: different layers' gates are independent, so
the expectation of the product is the product of the expectations. Batch norms and depthwise convolutions cost per
kept channel; what the graph does not slice (grouped convolutions, attention, modules called whole) is a constant.
Where two gates of one channel are not independent (a sum of two branches of one gated tensor) the expectation
is an upper bound.
"""

import math
import warnings

import torch
import torch.nn as nn
from torch.fx.passes.shape_prop import TensorMetadata

from .channels import _BATCH_NORMS, _PRODUCTS, ChannelGraph, is_depthwise, trace
from .counting import _module_macs, _one_example, count_macs, count_params
from .graph_purge import _channels, _propagate, at_test_time, purge
from .layers import ConvBN, L0Layer, LinearGates
from .sparsify import GatedConv2d, default_layers


def _traced(model: nn.Module, input_shape, leaves, reader: str):
    """The test-time copy of ``model``, its trace (shapes propagated on one zero example) and channel graph."""
    shape = _one_example(model, input_shape, reader)
    plain = at_test_time(model)[0].eval()
    traced = trace(plain, reader, leaves)
    _propagate(traced, torch.zeros(1, *shape, device=next(model.parameters()).device), type(model).__name__)
    return plain, shape, ChannelGraph(traced)


def _gate_sites(model: nn.Module, layers: list) -> tuple[dict, dict]:
    """Where each gated layer's gates act in the test-time graph, by the index of the layer in ``layers``: (the
    node whose output channels they close, by its target; the linear layer whose input features they gate)."""
    names = {id(m): name for name, m in model.named_modules()}
    convbn = {id(m.conv): f"{name}.bn" for name, m in model.named_modules() if isinstance(m, ConvBN)}
    out, inp = {}, {}
    for i, layer in enumerate(layers):
        name = names[id(layer)]
        if isinstance(layer, LinearGates):
            inp[name] = i
        elif isinstance(layer, GatedConv2d):
            out[layer.bn_name or (f"{name}.1" if layer.bn is not None else name)] = i
        else:
            out[convbn.get(id(layer), name)] = i
    return out, inp


@torch.no_grad()
def layer_costs(model: nn.Module, shape: tuple, sparse_weights: bool = False) -> dict[str, list]:
    """Module name -> [parameters, MACs] (``"plain"``) of every convolution and linear layer a forward reaches."""
    costs = {}

    def hook(module, inputs, output, name):
        params = sum(int(p.count_nonzero()) if sparse_weights else p.numel() for p in module.parameters())
        macs = _module_macs(module, inputs[0], output, "plain", sparse_weights)
        costs[name] = [params, costs.get(name, [0, 0])[1] + macs]

    handles = [m.register_forward_hook(lambda m, i, o, name=name: hook(m, i, o, name))
               for name, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    was_training = model.training
    try:
        model.eval()(torch.zeros(1, *shape, device=next(model.parameters()).device))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return costs


class ExpectedCost:
    """The expected ``"params"`` or ``"macs"`` of ``model``'s purged form, a function of its gates (module docstring).

    Call it with P(z != 0) of each gated layer's weight gates, in ``model.modules()`` order (default: the gates'
    own, eq. 8); :attr:`dense` is the dense model's count. Structured gates only.
    """

    def __init__(self, model: nn.Module, measure: str, input_shape=None, leaves=None):
        self.layers = [m for m in model.modules() if isinstance(m, L0Layer)]
        if any(layer.sparsity != "structured" for layer in self.layers):
            raise ValueError(f"measure={measure!r} counts the channels that structured gates remove; this model has "
                             f"unstructured gates: use measure='density'")
        plain, shape, graph = _traced(model, input_shape, leaves, f"measure={measure!r}")
        sites, reads = _gate_sites(model, self.layers)
        unzeroing = set(graph._unzeroing)
        index, self._nodes = {}, []  # tensor node -> its position; (kind, argument, channels) per position
        for node in graph.module.graph.nodes:
            meta = node.meta.get("tensor_meta")
            if node not in graph._parent or not isinstance(meta, TensorMetadata) or len(meta.shape) < 2:
                continue
            same = [index[i] for i in node.all_input_nodes if i in index and graph.find(i) is graph.find(node)]
            entry = (("gate", sites[node.target]) if node.op == "call_module" and node.target in sites
                     else ("cat", [index[p] for p in graph._concatenated[node]]) if node in graph._concatenated
                     else ("one", None) if node in unzeroing or not same else ("same", same[0]) if len(same) == 1
                     else ("mul" if node.target in _PRODUCTS or node.target == "mul" else "or", same[:2]))
            index[node] = len(self._nodes)
            self._nodes.append((*entry, meta.shape[graph.axis[node]] // graph.block[node]))
        number = {id(g): k for k, g in enumerate(graph.groups)}
        self._concats = [(number[id(graph.group(node))], [(number[id(graph.group(p))], index[p]) for p in parts])
                         for node, parts in graph.concats]
        concatenated = {part for _, parts in self._concats for part, _ in parts}
        self._groups = {}  # group -> (the node its readers read, the input gates of its readers or None, channels)
        for k, group in enumerate(graph.groups):
            if not group.pinned and (group.sinks or k in concatenated) and _channels(graph, group):
                reader = group.sinks[0][1] if group.sinks else next(p for g, ps in graph.concats for p in ps
                                                                     if graph.group(p) is group)
                gated = [reads.get(layer.target) for layer, _ in group.sinks]
                self._groups[k] = (index[reader], None if None in gated else gated, _channels(graph, group))
        dense = layer_costs(plain, shape)
        self._terms = []  # (unit, input: (kind, ...), output group, output channels, bias unit)
        modeled = 0
        for node in graph.module.graph.nodes:
            module = graph.modules.get(node.target) if node.op == "call_module" else None
            if node not in index or not isinstance(module, (nn.Conv2d, nn.Linear, _BATCH_NORMS)) \
                    or graph.calls[node.target] > 1 or isinstance(module, nn.Conv2d) and module.groups > 1 \
                    and not is_depthwise(module):  # their channels stay: constants
                continue
            out, inp = number[id(graph.group(node))], node.args[0]
            if isinstance(module, _BATCH_NORMS):
                if measure == "params" and module.affine:
                    self._terms.append((2, ("one", None), out, module.num_features, 0))
                    modeled += 2 * module.num_features
                continue
            params, macs = dense[node.target]
            bias = int(module.bias is not None and measure == "params")
            size_out, size_in = module.weight.shape[:2]
            modeled += params if measure == "params" else macs
            if isinstance(module, nn.Conv2d) and module.groups > 1:  # depthwise: one weight slice per channel
                self._terms.append((((params - bias * size_out) if measure == "params" else macs) / size_out,
                                    ("one", None), out, size_out, bias))
                continue
            unit = ((params - bias * size_out) if measure == "params" else macs) / (size_out * size_in)
            if isinstance(module, nn.Linear):
                shape_in = inp.meta["tensor_meta"].shape
                channels = self._nodes[index[inp]][2] if inp in index else 0
                if channels and (len(shape_in) == 2 or graph.axis[inp] == -1):  # its features are the channels'
                    source = ("read", index[inp], reads.get(node.target), size_in // channels)
                else:
                    source = ("gates", reads[node.target]) if node.target in reads else ("const", size_in)
            else:
                source = ("kept", number[id(graph.group(inp))], size_in)
            self._terms.append((unit, source, out, size_out, bias))
        self.measure = measure
        self.dense = count_params(plain) if measure == "params" else count_macs(plain, shape, "plain")
        self.constant = self.dense - modeled

    def __call__(self, probs: list[torch.Tensor] | None = None) -> torch.Tensor:
        """The expected count, from P(z != 0) of each gated layer's gates (a 0-d tensor)."""
        probs = probs if probs is not None else [layer.gate_probabilities()[0] for layer in self.layers]
        one = probs[0].new_ones
        nz = []  # P(channel != 0) at each tensor node
        for kind, arg, n in self._nodes:
            nz.append(probs[arg] if kind == "gate" else nz[arg] if kind == "same" else one(n) if kind == "one"
                      else torch.cat([nz[a] for a in arg]) if kind == "cat" else nz[arg[0]] * nz[arg[1]]
                      if kind == "mul" else 1 - (1 - nz[arg[0]]) * (1 - nz[arg[1]]))
        # P(some layer reads the channel): a linear layer reads it through any of its features' gates
        read = {k: None if gated is None else 1 - math.prod((1 - probs[i]).view(n, -1).prod(1) for i in gated)
                for k, (_, gated, n) in self._groups.items()}
        for whole, parts in reversed(self._concats):  # read where the concatenation's readers read it
            start = 0
            for part, node in parts:
                end = start + self._nodes[node][2]
                if whole in read and part in read and read[part] is not None:
                    read[part] = None if read[whole] is None else 1 - (1 - read[part]) * (1 - read[whole][start:end])
                start = end
        kept = {k: nz[node] if read[k] is None else nz[node] * read[k] for k, (node, _, _) in self._groups.items()}
        for whole, parts in self._concats:
            if any(part in kept for part, _ in parts):
                kept[whole] = torch.cat([kept[part] if part in kept else one(self._nodes[node][2]) for part, node in parts])
        total = probs[0].new_tensor(float(self.constant))
        for unit, source, out, size_out, bias in self._terms:
            outputs = kept[out].sum() if out in kept else size_out
            kind, arg = source[:2]
            if kind == "read":  # a linear layer's features: P(channel != 0) times its input gates', per channel
                gates = 1 if source[2] is None else probs[source[2]].view(len(nz[arg]), -1).sum(1) / source[3]
                inputs = (nz[arg] * gates).sum() * source[3]
            else:
                inputs = (1 if kind == "one" else arg if kind == "const" else probs[arg].sum() if kind == "gates"
                          else kept[arg].sum() if arg in kept else source[2])
            total = total + unit * inputs * outputs + bias * outputs
        return total


def report(model: nn.Module, input_shape=None, leaves=None) -> list[dict]:
    """One row per convolution and linear layer of ``model``: whether it is gated and, if not, why (one of
    :data:`REASONS`, and a ``detail``); its expected
    L0-density (eq. 3) and test-time density (its median gates' share open, eq. 9); its parameters and ``"plain"``
    MACs dense and after :func:`~paperlib.method.graph_purge.purge` at the median gates (``now``)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module; got {type(model).__name__}")
    plain, shape, graph = _traced(model, input_shape, leaves, "report")
    with warnings.catch_warnings():  # the rows say which layers keep closed channels
        warnings.simplefilter("ignore")
        small = purge(model, torch.zeros(1, *shape, device=next(model.parameters()).device), leaves)
    unstructured = any(m.sparsity == "unstructured" for m in model.modules() if isinstance(m, L0Layer))
    gated = {name: m for name, m in model.named_modules() if isinstance(m, L0Layer)}
    rows = {name: m for name, m in model.named_modules() if name in gated or isinstance(m, (nn.Conv2d, nn.Linear))
            and not any(name.startswith(g + ".") for g in gated)}
    counts = {}
    for which, costs in (("dense", layer_costs(plain, shape)), ("now", layer_costs(small, shape, unstructured))):
        for name, (params, macs) in costs.items():
            row = counts.setdefault(name if name in rows else name.rpartition(".")[0], {})
            row[f"params_{which}"], row[f"macs_{which}"] = params, macs
    nodes = {n.target: n for n in graph.module.graph.nodes if n.op == "call_module"}
    outputs, inputs = _gate_sites(model, list(gated.values()))  # the groups whose channels some gates close
    gated_in = {id(graph.group(nodes[site] if site in outputs else nodes[site].args[0])): list(gated)[i]
                for site, i in (*outputs.items(), *inputs.items()) if site in nodes}
    defaults = set(default_layers(plain, graph))
    table = []
    for name, module in rows.items():
        layer = gated.get(name)
        row = {"layer": name, "type": type(module).__name__, "gated": layer is not None, "why_not": None,
               "detail": None, "density": None, "test_density": None}
        if layer is not None:
            medians = tuple(None if z is None else z.ne(0).float() for z in layer.gate_tensors(median=True))
            with torch.no_grad():
                row["density"] = float(layer.density())
                row["test_density"] = float(layer.expected_active_params(medians) / layer.num_sparsifiable_params)
        else:
            row["why_not"], row["detail"] = _why_not(name, module, nodes.get(name), graph, defaults, gated_in)
        table.append({**row, **{key: counts.get(name, {}).get(key) for key in
                                ("params_dense", "params_now", "macs_dense", "macs_now")}})
    return table


#: Why a convolution or linear layer has no gates: the ``why_not`` of :func:`report` (its ``detail`` says more).
REASONS = ("untraced", "shared weight", "excluded by the user", "grouped convolution", "gated by another layer",
           "residual sum", "pinned", "concatenated", "not chosen")


def _why_not(name: str, module: nn.Module, node, graph: ChannelGraph, defaults: set, gated_in: dict) -> tuple:
    """Why :func:`~paperlib.method.sparsify.sparsify` left a convolution or linear layer without gates: one of
    :data:`REASONS`, and what it is about."""
    if node is None:
        return "untraced", "inside a module called whole (leaves=), or not reached by the forward"
    if graph.calls[name] > 1:
        return "shared weight", f"called {graph.calls[name]} times"
    if name in defaults:
        return "excluded by the user", "sparsify's exclude="
    if isinstance(module, nn.Conv2d) and module.groups > 1 and not is_depthwise(module):
        return "grouped convolution", f"{module.groups} groups: a closed channel would change its group's outputs"
    group = graph.group(node)
    if id(group) in gated_in and not group.pinned:
        return "gated by another layer", f"its output channels close with {gated_in[id(group)]}'s gates"
    if group.merged:
        return "residual sum", "its channels join a sum or product"
    if group.pinned:
        return "pinned", sorted(group.pinned)[0]
    if group.leaks:
        return "concatenated", sorted(group.leaks)[0]
    return "not chosen", ("a depthwise convolution: the last convolution of its channels is gated" if
                          isinstance(module, nn.Conv2d) and is_depthwise(module) else "by the default rule")
