"""What a gated model costs, beyond the paper: :class:`ExpectedCost` and the per-layer :func:`report`.

:class:`ExpectedCost` is the expected parameters or MACs (``"plain"``, :mod:`paperlib.method.counting`) of the whole
purged model, differentiable in the gates. On the channel graph of :mod:`~paperlib.method.graph_purge`, a channel is non-zero with the probability P(z != 0) (eq. 8) of the gate that last closed it, through a
product the product of its factors', through a sum 1 - prod(1 - p); it stays where some layer also reads it (a linear
layer, one feature per channel, through its input gates). A convolution or linear layer costs its weights per
input-output pair times the expected counts of its kept inputs and outputs (different layers' gates are independent).
Batch norms and depthwise convolutions cost per kept channel; what purge does not slice is a constant. Where one gate
reaches a channel twice (a sum of two branches of one gated tensor) the expectation is an upper bound; and purge keeps
one channel of a layer whose gates are all closed, which the expectation counts as gone.
"""

import math
import warnings

import torch
import torch.nn as nn
from torch.fx.passes.shape_prop import TensorMetadata

from .channels import _BATCH_NORMS, _PRODUCTS, ChannelGraph, full_name, is_depthwise, trace
from .counting import _module_macs, _one_example, count_macs, count_params
from .graph_purge import _channels, _inputs, _propagate, at_test_time, purge
from .layers import ConvBN, GatedConv2d, GatedLinear, L0Layer
from .sparsify import _defaults


def _traced(model: nn.Module, input_shape, leaves, reader: str):
    """The test-time copy of ``model``, the shape of one example, the channel graph of each traced part that a zero
    example reaches, shapes propagated (:func:`~paperlib.method.channels.trace`), and the modules called whole."""
    shape = _one_example(model, input_shape, reader)
    plain = at_test_time(model)[0].eval()
    parts, untraced = trace(plain, reader, leaves)
    example = torch.zeros(1, *shape, device=next(model.parameters()).device)
    inputs = _inputs(plain, parts, example, type(model).__name__)
    for part, args in inputs.items():
        _propagate(parts[part], args, type(model).__name__)
    unreached = {part: "not reached by the forward on one example" for part in parts if part not in inputs}
    return plain, shape, {part: ChannelGraph(parts[part]) for part in inputs}, untraced | unreached


def _gate_sites(model: nn.Module, layers: list) -> tuple[dict, dict]:
    """Where each gated layer's gates act in the test-time graph, by the index of the layer in ``layers``: (the
    node whose output channels they close, by its target; the linear layer whose input features they gate)."""
    names = {id(m): name for name, m in model.named_modules()}
    names.update({id(m.conv): f"{name}.bn" for name, m in model.named_modules() if isinstance(m, ConvBN)})
    sites = ({}, {})
    for i, layer in enumerate(layers):
        name = names[id(layer)]
        bn = isinstance(layer, GatedConv2d) and (layer.bn_name or layer.bn is not None and f"{name}.1")
        sites[isinstance(layer, GatedLinear)][bn or name] = i
    return sites


@torch.no_grad()
def layer_costs(model: nn.Module, shape: tuple, types: tuple = (nn.Conv2d, nn.Linear), sparse_weights: bool = False):
    """Module name -> [parameters, MACs] (``"plain"``) of every module of ``types`` that a forward in eval mode
    reaches (a copy's: the hooks stay on it)."""
    costs = {}

    def hook(module, inputs, output, name):
        costs[name] = [sum(int(p.count_nonzero()) if sparse_weights else p.numel() for p in module.parameters()),
                       costs.get(name, [0, 0])[1] + _module_macs(module, inputs[0], output, "plain", sparse_weights)]

    for name, m in model.named_modules():
        if isinstance(m, types):
            m.register_forward_hook(lambda m, i, o, name=name: hook(m, i, o, name))
    model.eval()(torch.zeros(1, *shape, device=next(model.parameters()).device))
    return costs


class ExpectedCost:
    """The expected ``"params"`` or ``"macs"`` of ``model``'s purged form, a function of its gates (module docstring).

    Call it with P(z != 0) of each gated layer's weight gates, in ``model.modules()`` order (default: the gates'
    own, eq. 8); :attr:`dense` is the dense model's count. Structured gates only.
    """

    def __init__(self, model: nn.Module, measure: str, input_shape=None, leaves=None):
        self.layers, self.measure = [m for m in model.modules() if isinstance(m, L0Layer)], measure
        if any(layer.sparsity != "structured" for layer in self.layers):
            raise ValueError(f"measure={measure!r} counts the channels that structured gates remove; this model has "
                             f"unstructured gates: use measure='density'")
        plain, shape, graphs, _ = _traced(model, input_shape, leaves, f"measure={measure!r}")
        if "" not in graphs:
            raise ValueError(f"measure={measure!r} counts the model in one torch.fx graph, and torch.fx cannot trace "
                             f"{type(model).__name__}'s own forward: use measure='density'")
        graph = graphs[""]
        sites, reads = _gate_sites(model, self.layers)
        index, self._nodes = {}, []  # tensor node -> its position; (kind, argument, channels) per position
        for node in graph.module.graph.nodes:
            meta = node.meta.get("tensor_meta")
            if node in graph._parent and isinstance(meta, TensorMetadata) and len(meta.shape) > 1:
                same = [index[i] for i in node.all_input_nodes if i in index and graph.find(i) is graph.find(node)]
                index[node] = len(self._nodes)
                self._nodes.append((("gate", sites[node.target]) if node.op == "call_module" and node.target in sites
                                    else ("cat", [index[p] for p in graph._concatenated[node]])
                                    if node in graph._concatenated else ("one", None)
                                    if node in graph._unzeroing or not same else ("same", same[0]) if len(same) == 1
                                    else ("mul" if node.target in _PRODUCTS or node.target == "mul" else "or", same))
                                   + (meta.shape[graph.axis[node]] // graph.block[node],))
        number = {id(g): k for k, g in enumerate(graph.groups)}
        self._concats = [(number[id(graph.group(node))], [(number[id(graph.group(p))], index[p]) for p in parts])
                         for node, parts in graph.concats]
        self._groups = {}  # group -> (the node its readers read, the input gates of its readers or None, channels)
        for k, group in enumerate(graph.groups):
            parts = [p for _, ps in graph.concats for p in ps if graph.group(p) is group]
            if not group.pinned and (group.sinks or parts) and _channels(graph, group):
                gated = [reads.get(layer.target) if graph.block[inp] == 1 else None for layer, inp in group.sinks]
                self._groups[k] = (index[group.sinks[0][1] if group.sinks else parts[0]],
                                   None if None in gated else gated, _channels(graph, group))
        params = measure == "params"
        self.dense = count_params(plain) if params else count_macs(plain, shape, "plain")
        dense = layer_costs(plain, shape, (nn.Conv2d, nn.Linear, _BATCH_NORMS))
        self._terms, modeled = [], 0  # (unit, input: None or (kind, ...), output group, output channels, bias)
        for node in graph.module.graph.nodes:
            module = graph.modules.get(node.target) if node.op == "call_module" else None
            if node not in index or node.target not in dense or graph.calls[node.target] > 1 \
                    or getattr(module, "groups", 1) > 1 and not is_depthwise(module):
                continue  # its channels stay: a constant
            cost, out, inp, size_out = dense[node.target][1 - params], number[id(graph.group(node))], node.args[0], \
                self._nodes[index[node]][2]
            modeled += cost
            if getattr(module, "groups", 1) > 1 or isinstance(module, _BATCH_NORMS):  # a slice per channel
                self._terms.append((cost / size_out, None, out, size_out, 0))
                continue
            bias, size_in = int(module.bias is not None and params), module.weight.shape[1]
            direct = inp in index and (len(inp.meta["tensor_meta"].shape) == 2 or graph.axis[inp] == -1)
            source = ("kept", number[id(graph.group(inp))], size_in) if isinstance(module, nn.Conv2d) else \
                ("read", index[inp] if direct else None, reads.get(node.target), size_in)  # a linear's features
            self._terms.append(((cost - bias * size_out) / (size_out * size_in), source, out, size_out, bias))
        self.constant = self.dense - modeled

    def __call__(self, probs: list[torch.Tensor] | None = None) -> torch.Tensor:
        """The expected count, from P(z != 0) of each gated layer's gates (a 0-d tensor)."""
        probs = probs if probs is not None else [layer.gate_probabilities()[0] for layer in self.layers]
        one, nz = probs[0].new_ones, []  # nz: P(channel != 0) at each tensor node
        for kind, arg, n in self._nodes:
            nz.append(probs[arg] if kind == "gate" else nz[arg] if kind == "same" else one(n) if kind == "one"
                      else torch.cat([nz[a] for a in arg]) if kind == "cat" else nz[arg[0]] * nz[arg[1]]
                      if kind == "mul" else 1 - (1 - nz[arg[0]]) * (1 - nz[arg[1]]))
        # P(some layer reads a channel): a linear layer through any of its features' gates; else surely (None)
        read = {k: None if gated is None else 1 - math.prod((1 - probs[i]).view(n, -1).prod(1) for i in gated)
                for k, (_, gated, n) in self._groups.items()}
        for whole, parts in reversed(self._concats):  # a part is also read where the concatenation's readers read
            start = 0
            for part, node in parts:
                end = start + self._nodes[node][2]
                if whole in read and read.get(part) is not None:
                    read[part] = None if read[whole] is None else 1 - (1 - read[part]) * (1 - read[whole][start:end])
                start = end
        kept = {k: nz[node] if read[k] is None else nz[node] * read[k] for k, (node, _, _) in self._groups.items()}
        for whole, parts in self._concats:
            if any(part in kept for part, _ in parts):
                kept[whole] = torch.cat([kept.get(part, one(self._nodes[node][2])) for part, node in parts])
        total = probs[0].new_tensor(float(self.constant))
        for unit, source, out, size_out, bias in self._terms:
            outputs = kept[out].sum() if out in kept else size_out
            if source is None or source[0] == "kept":
                inputs = 1 if source is None else kept[source[1]].sum() if source[1] in kept else source[2]
            else:  # each feature: P(its channel != 0) times P(its gate != 0)
                _, node, gates, size = source
                features = one(size) if node is None else nz[node].repeat_interleave(size // len(nz[node]))
                inputs = (features if gates is None else features * probs[gates]).sum()
            total = total + unit * inputs * outputs + bias * outputs
        return total


#: Why a convolution or linear layer has no gates: the ``why_not`` of :func:`report` (its ``detail`` says more).
REASONS = ("untraced", "shared weight", "excluded by the user", "grouped convolution", "gated by another layer",
           "residual sum", "pinned", "concatenated", "not chosen")


def report(model: nn.Module, input_shape=None, leaves=None) -> list[dict]:
    """One row per convolution and linear layer of ``model``: whether it is gated and, if not, why (one of
    :data:`REASONS`, and a ``detail``); its expected L0-density (eq. 3) and test-time density (its median gates'
    share open, eq. 9); its parameters and ``"plain"`` MACs dense and after :func:`~paperlib.method.graph_purge.purge`
    at the median gates (``now``). An ``"untraced"`` layer's detail names the module around it that torch.fx does not
    enter, and why (``leaves``, :func:`~paperlib.method.channels.trace`), or says that one example does not reach it."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module; got {type(model).__name__}")
    plain, shape, graphs, untraced = _traced(model, input_shape, leaves, "report")
    with warnings.catch_warnings():  # the rows say which layers keep closed channels, and which modules fx cannot trace
        warnings.simplefilter("ignore")
        small = purge(model, torch.zeros(1, *shape, device=next(model.parameters()).device), leaves)
    gated = {name: m for name, m in model.named_modules() if isinstance(m, L0Layer)}
    rows = {name: m for name, m in model.named_modules() if name in gated or isinstance(m, (nn.Conv2d, nn.Linear))
            and not any(name.startswith(g + ".") for g in gated)}
    counts = {}  # a layer purge makes a Sequential (a GatedConv2d's conv and batch norm) counts for the layer
    for which, costs in (("dense", layer_costs(plain, shape)),
                         ("now", layer_costs(small, shape, sparse_weights=any(m.sparsity == "unstructured"
                                                                              for m in gated.values())))):
        for name, (params, macs) in costs.items():
            counts.setdefault(name if name in rows else name.rpartition(".")[0], {}).update(
                {f"params_{which}": params, f"macs_{which}": macs})
    nodes = {full_name(part, n.target): (n, graph) for part, graph in graphs.items() for n in graph.module.graph.nodes
             if n.op == "call_module"}
    outputs, inputs = _gate_sites(model, list(gated.values()))  # the groups whose channels some gates close
    closes = {}
    for site, i in (*outputs.items(), *inputs.items()):
        if site in nodes:
            node, graph = nodes[site]
            closes[id(graph.group(node if site in outputs else node.args[0]))] = list(gated)[i]
    defaults, table = {full_name(part, name) for part, graph in graphs.items() for name in _defaults(graph)}, []
    for name, module in rows.items():
        layer, row = gated.get(name), {"layer": name, "type": type(module).__name__, "gated": name in gated}
        why = (None, None) if layer else _why_not(name, module, nodes.get(name), defaults, closes) \
            if name in nodes else ("untraced", _untraced_why(name, graphs, untraced))
        with torch.no_grad():
            medians = layer and tuple(None if z is None else z.ne(0).float() for z in layer.gate_tensors(median=True))
            row.update(why_not=why[0], detail=why[1], density=layer and float(layer.density()), test_density=layer
                       and float(layer.expected_active_params(medians) / layer.num_sparsifiable_params))
        table.append({**row, **{k: counts.get(name, {}).get(k) for k in
                                ("params_dense", "params_now", "macs_dense", "macs_now")}})
    return table


def _untraced_why(name: str, parts: dict, untraced: dict) -> str:
    """Why a layer is in no traced part's graph: the module around it that fx does not enter, or none."""
    around = max((p for p in (*parts, *untraced) if p == "" or name == p or name.startswith(p + ".")), key=len)
    return f"{around or 'the model'}: {untraced[around]}" if around in untraced else "not reached by the forward"


def _why_not(name: str, module: nn.Module, node_graph: tuple, defaults: set, closes: dict) -> tuple:
    """Why :func:`~paperlib.method.sparsify.sparsify` left a convolution or linear layer of a traced part without gates:
    one of :data:`REASONS`, and what it is about."""
    node, graph = node_graph
    group, uses = graph.group(node), graph.calls[node.target]
    return ("shared weight", f"its weights are used {uses} times: called more than once, or tied to another layer's") \
        if uses > 1 else ("excluded by the user", "sparsify's exclude=") if name in defaults \
        else ("grouped convolution", f"{module.groups} groups: a closed channel changes its group's outputs") \
        if isinstance(module, nn.Conv2d) and module.groups > 1 and not is_depthwise(module) \
        else ("gated by another layer", f"its channels close with {closes[id(group)]}'s gates") \
        if id(group) in closes and not group.pinned \
        else ("residual sum", "its channels join a sum or product") if group.merged \
        else ("pinned", sorted(group.pinned)[0]) if group.pinned \
        else ("concatenated", sorted(group.leaks)[0]) if group.leaks \
        else ("not chosen", "a depthwise convolution, whose channels another convolution's gates close"
              if isinstance(module, nn.Conv2d) and is_depthwise(module) else "by the default rule")
