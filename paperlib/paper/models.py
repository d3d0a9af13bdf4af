"""The paper's architectures (App. J), each in a gated and a plain dense form.

=================  ==========================================  ===============
builder            gated layers (structured)                   input
=================  ==========================================  ===============
``mlp``            3 linear layers (input-neuron gates)         (1, 28, 28)
``lenet5``         2 convs (output maps) + 2 linear (inputs)    (1, 28, 28)
``wrn-28-10``      first conv of each of the 12 blocks          (3, 32, 32)
``resnet18``       both convs of each of the 8 blocks (16)      (3, 64, 64)
``resnet50``       the three convs of each of the 16 blocks     (3, 224, 224)
=================  ==========================================  ===============

Stems, shortcuts and classifiers of the residual models stay dense (App. J.4-J.6).
``gated=False`` builds the same architecture with plain ``nn.Linear`` /
``nn.Conv2d`` layers: the dense baseline and the input of magnitude pruning.
Each architecture takes a :class:`LayerFactory` that makes
its (gated or plain) layers, as torchvision's ResNet takes a ``norm_layer``.

Every layer is a named child, in forward order, so that ``model.modules()``
visits gated layers in the order of their constraints and the counters of
:mod:`paperlib.method.counting` see every ReLU and pooling module.
"""

import functools
import math
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from ..method.gates import RHO_INIT
from ..method.layers import ConvBN, GatedConv2d, GatedLinear, L0Layer
from ..method.vocabulary import LINEAR_INITS

#: The paper's models (App. J); any ``wrn-DEPTH-WIDTH`` is a model too (:func:`is_model_name`).
MODEL_NAMES = ("mlp", "lenet5", "wrn-28-10", "resnet18", "resnet50")
WIDE_RESNET = re.compile(r"wrn-(\d+)-(\d+)")


def is_model_name(name: str) -> bool:
    """One of :data:`MODEL_NAMES` or ``wrn-DEPTH-WIDTH``."""
    return name in MODEL_NAMES or WIDE_RESNET.fullmatch(str(name)) is not None


#: How the book names each model, as the paper spells it: the one home of models' display names.
DISPLAY_NAMES = {"mlp": "MLP", "lenet5": "LeNet5", "resnet18": "ResNet18", "resnet50": "ResNet50"}


def display_name(name: str) -> str:
    """The book's name for a model: ``WideResNet-16-1`` for ``wrn-16-1``, ``LeNet5`` for ``lenet5``."""
    match = WIDE_RESNET.fullmatch(str(name))
    return f"WideResNet-{match[1]}-{match[2]}" if match else DISPLAY_NAMES.get(name, name)


def per_layer_rho_init(rho_init: float | Sequence[float], num_layers: int, model: str) -> list[float]:
    """One ``rho_init`` per gated layer: a scalar is repeated, a list must have ``num_layers`` entries.

    Louizos et al.'s MLP, and the authors' (``sparse/models.py``), start the
    input layer's gates at 0.2 and the others at the configured value; the
    MNIST presets spell this as a list (App. A.2, book/errata.md).
    """
    values = [float(rho_init)] * num_layers if isinstance(rho_init, (int, float)) else [float(r) for r in rho_init]
    if len(values) != num_layers:
        raise ValueError(f"rho_init for {model} must be a number or a list of {num_layers} values, one per gated "
                         f"layer; got {list(rho_init)}")
    return values


def init_weights_(weight: torch.Tensor, bias: torch.Tensor | None, mode: str = "fan_in") -> None:
    """He-normal weights (standard deviation sqrt(2 / fan)) and biases drawn from N(0, 0.01^2).

    Every layer uses fan-in, the initialisation both the authors' and Louizos et al.'s code intended. The authors' gated
    linear layer asks for fan-out, a mode inherited from Louizos et al.'s code, where the weight is stored transposed as
    (in, out) so that it meant fan-in there. In PyTorch's (out, in) layout it scales each linear layer's weights by
    sqrt(in / out), e.g. sqrt(10) for the MLP's output layer (book/errata.md). ``mode="fan_out"`` reproduces it.
    """
    if mode not in LINEAR_INITS:
        raise ValueError(f"initialisation mode must be one of {LINEAR_INITS}; got {mode!r}")
    with torch.no_grad():
        nn.init.kaiming_normal_(weight, mode=mode)
        if bias is not None:
            bias.normal_(0.0, 1e-2)


@dataclass(frozen=True)
class LayerFactory:
    """Makes a model's layers, gated (:class:`~paperlib.method.layers.GatedLinear`,
    :class:`~paperlib.method.layers.GatedConv2d`, the layers :func:`~paperlib.method.sparsify.sparsify` makes) or
    plain, with one sparsity and rho_init.

    A model's builder hands one factory to every block, in the manner of torchvision's ``norm_layer``, instead of
    threading ``gated, sparsity, rho_init`` through every constructor. :attr:`dense` makes the layers that are never
    gated (stems, shortcuts and classifiers, App. J.4-J.6). Layers are initialised by fan-in (:func:`init_weights_`);
    ``linear_init`` applies to gated linear layers only, as in the authors' code, whose plain linear layers use fan-in.
    A gated layer's weights are then divided by 1 - rho_init, as the authors' code does (:meth:`_gated`).
    """

    gated: bool = True
    sparsity: str = "structured"
    rho_init: float | list[float] = RHO_INIT
    linear_init: str = "fan_in"

    @property
    def dense(self) -> "LayerFactory":
        """The same factory for layers without gates."""
        return replace(self, gated=False)

    def linear(self, in_features: int, out_features: int, rho_init: float | None = None) -> nn.Module:
        """A linear layer; ``rho_init`` overrides the factory's (one value per layer, App. A.2)."""
        if not self.gated:
            layer = nn.Linear(in_features, out_features)
            init_weights_(layer.weight, layer.bias)
            return layer
        layer = _uninitialised(nn.Linear, in_features, out_features)
        init_weights_(layer.weight, layer.bias, mode=self.linear_init)
        return self._gated(GatedLinear, layer, rho_init)

    def conv(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
             bias: bool = True, rho_init: float | None = None) -> nn.Module:
        """A 2-D convolution; ``rho_init`` overrides the factory's."""
        if not self.gated:
            layer = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=bias)
            init_weights_(layer.weight, layer.bias)
            return layer
        layer = _uninitialised(nn.Conv2d, in_channels, out_channels, kernel_size, stride, padding, bias=bias)
        init_weights_(layer.weight, layer.bias)
        return self._gated(GatedConv2d, layer, rho_init)

    def _gated(self, gated: type, layer: nn.Module, rho_init: float | None) -> nn.Module:
        """``layer`` with gates, its initial weights divided by (1 - rho_init), as the authors' code does.

        Gates start around 1 - rho_init in their code's reasoning, so this keeps the effective initial weights of gated
        and dense models alike. The paper is silent on this detail. Their code divides the biases of convolutions only;
        this also divides the gated biases of unstructured linear layers (book/errata.md).
        """
        rho_init = self.rho_init if rho_init is None else rho_init
        layer = gated(layer, sparsity=self.sparsity, rho_init=rho_init)
        with torch.no_grad():
            layer.weight.div_(1.0 - rho_init)
            if layer.bias is not None and (gated is GatedConv2d or self.sparsity == "unstructured"):
                layer.bias.div_(1.0 - rho_init)
        return layer

    def conv_bn(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1) -> ConvBN:
        """A "same"-padded convolution without bias, followed by batch norm (:class:`ConvBN`)."""
        conv = self.conv(in_channels, out_channels, kernel_size, stride, padding=kernel_size // 2, bias=False)
        return ConvBN(conv, nn.BatchNorm2d(out_channels))


def _uninitialised(layer: type, *args, **kwargs) -> nn.Module:
    """``layer(*args, **kwargs)`` on the default device with its weights left uninitialised: nothing is drawn from
    the random generator, so that the draws of :func:`init_weights_` and the gates' come in the order the records'
    models drew them."""
    return layer(*args, **kwargs, device="meta").to_empty(device=torch.empty(0).device)


class MLP(nn.Sequential):
    """784-300-100-10 perceptron with ReLU (App. J.3), every linear layer gated.

    The factory's ``rho_init`` is one value for every layer or a list with one per layer.
    """

    def __init__(self, num_classes: int = 10, input_shape=(1, 28, 28), hidden=(300, 100),
                 layers: LayerFactory = LayerFactory()):
        dims = [math.prod(input_shape), *hidden, num_classes]
        rhos = per_layer_rho_init(layers.rho_init, len(dims) - 1, "mlp")
        modules = [("flatten", nn.Flatten())]
        for i in range(len(dims) - 1):
            modules.append((f"fc{i + 1}", layers.linear(dims[i], dims[i + 1], rho_init=rhos[i])))
            if i < len(dims) - 2:
                modules.append((f"relu{i + 1}", nn.ReLU()))
        super().__init__(OrderedDict(modules))
        self.input_shape, self.num_classes = tuple(input_shape), num_classes


class LeNet5(nn.Sequential):
    """LeNet5 of Louizos et al.: conv 20, conv 50 (5x5), fc 800-500-10 (App. J.3).

    Pooling comes before the ReLU. The two orders compute the same function;
    this one is the order in which the authors' MAC count (2,327,130, App. J.1)
    is reproduced. The factory's ``rho_init`` is one value for every layer or a
    list with one per layer (conv1, conv2, fc1, fc2).
    """

    def __init__(self, num_classes: int = 10, input_shape=(1, 28, 28), layers: LayerFactory = LayerFactory()):
        rho1, rho2, rho3, rho4 = per_layer_rho_init(layers.rho_init, 4, "lenet5")
        channels, height, _ = input_shape
        side = ((height - 4) // 2 - 4) // 2  # two 5x5 valid convs, each followed by a 2x2 pool
        flat = 50 * side * side
        super().__init__(OrderedDict([
            ("conv1", layers.conv(channels, 20, 5, rho_init=rho1)),
            ("pool1", nn.MaxPool2d(2)),
            ("relu1", nn.ReLU()),
            ("conv2", layers.conv(20, 50, 5, rho_init=rho2)),
            ("pool2", nn.MaxPool2d(2)),
            ("relu2", nn.ReLU()),
            ("flatten", nn.Flatten()),
            ("fc1", layers.linear(flat, 500, rho_init=rho3)),
            ("relu3", nn.ReLU()),
            ("fc2", layers.linear(500, num_classes, rho_init=rho4)),
        ]))
        self.input_shape, self.num_classes = tuple(input_shape), num_classes


class WideBasicBlock(nn.Module):
    """Pre-activation block of a WideResNet (Zagoruyko & Komodakis, 2016).

    bn1 -> relu -> conv1 -> bn2 -> relu -> conv2, plus the shortcut. Only conv1
    is gated (App. J.4); ``self.conv1`` is the :class:`ConvBN` unit holding conv1
    and bn2. The shortcut is the identity or a dense 1x1 convolution applied to
    the activated input. As in Louizos et al.'s and the authors' code, the
    stride sits on the dense conv2, not on the gated conv1: with this layout the
    paper's MAC count (App. J.1) is reproduced, with the stride on conv1 it is not.
    """

    def __init__(self, in_planes: int, out_planes: int, stride: int, layers: LayerFactory):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.relu1 = nn.ReLU()
        self.conv1 = layers.conv_bn(in_planes, out_planes, 3)
        self.relu2 = nn.ReLU()
        self.conv2 = layers.dense.conv(out_planes, out_planes, 3, stride=stride, padding=1, bias=False)
        self.shortcut = None
        if stride != 1 or in_planes != out_planes:
            self.shortcut = layers.dense.conv(in_planes, out_planes, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = self.bn1(x)
        activated = self.relu1(activated)
        shortcut = x if self.shortcut is None else self.shortcut(activated)
        out = self.conv1(activated)
        out = self.relu2(out)
        out = self.conv2(out)
        return out + shortcut


class WideResNet(nn.Module):
    """WideResNet-depth-width for 32x32 inputs (App. J.4); 12 gated convs for 28-10."""

    def __init__(self, depth: int = 28, width: int = 10, num_classes: int = 10,
                 layers: LayerFactory = LayerFactory()):
        super().__init__()
        if (depth - 4) % 6 != 0:
            raise ValueError(f"WideResNet depth must be 6n + 4; got depth={depth}")
        blocks_per_stage = (depth - 4) // 6
        widths = [16, 16 * width, 32 * width, 64 * width]
        self.conv1 = layers.dense.conv(3, widths[0], 3, padding=1, bias=False)
        stages = []
        for i, stride in enumerate((1, 2, 2)):
            blocks = [WideBasicBlock(widths[i] if b == 0 else widths[i + 1], widths[i + 1],
                                     stride if b == 0 else 1, layers)
                      for b in range(blocks_per_stage)]
            stages.append(nn.Sequential(*blocks))
        self.stage1, self.stage2, self.stage3 = stages
        self.bn = nn.BatchNorm2d(widths[3])
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = layers.dense.linear(widths[3], num_classes)
        self.input_shape, self.num_classes = (3, 32, 32), num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        x = self.stage1(x)
        x = self.stage2(x)
        x = self.stage3(x)
        x = self.bn(x)
        x = self.relu(x)
        x = self.pool(x)
        x = self.flatten(x)
        return self.fc(x)


def _shortcut(in_planes: int, out_planes: int, stride: int, layers: LayerFactory) -> ConvBN | None:
    """Dense projection shortcut (1x1 conv + bn) when the shape changes, else None (identity)."""
    if stride == 1 and in_planes == out_planes:
        return None
    return layers.dense.conv_bn(in_planes, out_planes, 1, stride)


class BasicBlock(nn.Module):
    """ResNet basic block: conv3x3-bn-relu-conv3x3-bn, add the shortcut, relu; both convs gated."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int, layers: LayerFactory):
        super().__init__()
        self.conv1 = layers.conv_bn(in_planes, planes, 3, stride)
        self.relu1 = nn.ReLU()
        self.conv2 = layers.conv_bn(planes, planes, 3)
        self.shortcut = _shortcut(in_planes, planes, stride, layers)
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(x)
        out = self.relu1(out)
        out = self.conv2(out)
        identity = x if self.shortcut is None else self.shortcut(x)
        out = out + identity
        return self.relu2(out)


class Bottleneck(nn.Module):
    """ResNet bottleneck (torchvision's v1.5 layout, stride on the 3x3); all three convs gated."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int, layers: LayerFactory):
        super().__init__()
        self.conv1 = layers.conv_bn(in_planes, planes, 1)
        self.relu1 = nn.ReLU()
        self.conv2 = layers.conv_bn(planes, planes, 3, stride)
        self.relu2 = nn.ReLU()
        self.conv3 = layers.conv_bn(planes, planes * 4, 1)
        self.shortcut = _shortcut(in_planes, planes * 4, stride, layers)
        self.relu3 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(x)
        out = self.relu1(out)
        out = self.conv2(out)
        out = self.relu2(out)
        out = self.conv3(out)
        identity = x if self.shortcut is None else self.shortcut(x)
        out = out + identity
        return self.relu3(out)


class ResNet(nn.Module):
    """ResNet with a dense stem, dense shortcuts and a dense classifier (App. J.5, J.6).

    ``small_input=True`` is the TinyImageNet stem of the authors' code: one 3x3
    stride-2 convolution and no max-pool. Otherwise torchvision's 7x7 stride-2
    convolution followed by a 3x3 stride-2 max-pool.
    """

    def __init__(self, block: type, blocks_per_stage: list[int], num_classes: int, small_input: bool,
                 layers: LayerFactory = LayerFactory()):
        super().__init__()
        self.stem = layers.dense.conv_bn(3, 64, 3 if small_input else 7, 2)
        self.stem_relu = nn.ReLU()
        self.stem_pool = None if small_input else nn.MaxPool2d(3, stride=2, padding=1)
        in_planes, stages = 64, []
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks_per_stage)):
            blocks = []
            for b in range(n):
                stride = 2 if (i > 0 and b == 0) else 1
                blocks.append(block(in_planes, planes, stride, layers))
                in_planes = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = layers.dense.linear(in_planes, num_classes)
        self.input_shape = (3, 64, 64) if small_input else (3, 224, 224)
        self.num_classes = num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.stem_relu(x)
        if self.stem_pool is not None:
            x = self.stem_pool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.pool(x)
        x = self.flatten(x)
        return self.fc(x)


def resnet18(num_classes: int = 200, layers: LayerFactory = LayerFactory()) -> ResNet:
    """ResNet18 for 64x64 TinyImageNet images: 16 gated convs (App. J.5)."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes, small_input=True, layers=layers)


def resnet50(num_classes: int = 1000, layers: LayerFactory = LayerFactory()) -> ResNet:
    """ResNet50 in torchvision's layout for 224x224 ImageNet images: 48 gated convs (App. J.6)."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes, small_input=False, layers=layers)


def from_torchvision_resnet(state_dict: dict) -> dict:
    """Rename a torchvision ResNet's ``state_dict`` to this module's names.

    torchvision's ``conv1``/``bn1`` stem becomes ``stem.conv``/``stem.bn``, a
    block's ``convK``/``bnK`` become the ``convK`` :class:`ConvBN` unit and
    ``downsample`` the ``shortcut`` unit; the classifier keeps its name. With it,
    :func:`resnet50` starts from torchvision's ImageNet weights, as the paper's
    magnitude-pruning baseline does (App. J.7).
    """
    renamed = {}
    for name, tensor in state_dict.items():
        name = re.sub(r"^conv1\.", "stem.conv.", name)
        name = re.sub(r"^bn1\.", "stem.bn.", name)
        name = re.sub(r"\.conv(\d)\.", r".conv\1.conv.", name)
        name = re.sub(r"\.bn(\d)\.", r".conv\1.bn.", name)
        name = name.replace(".downsample.0.", ".shortcut.conv.").replace(".downsample.1.", ".shortcut.bn.")
        renamed[name] = tensor
    return renamed


def build_model(name: str, num_classes: int | None = None, gated: bool = True,
                sparsity: str = "structured", rho_init: float | Sequence[float] = RHO_INIT,
                linear_init: str = "fan_in") -> nn.Module:
    """Build one of the paper's models by name.

    ``name`` is ``mlp``, ``lenet5``, ``resnet18``, ``resnet50`` or ``wrn-D-W``
    (``wrn-28-10`` in the paper). ``num_classes`` defaults to the dataset the
    paper pairs the model with. ``rho_init`` may be a list with one value per
    gated layer for the MLP and LeNet5. ``linear_init`` initialises the gated
    linear layers (``"fan_out"``: as the authors' code does, book/errata.md).
    """
    layers = LayerFactory(gated, sparsity, rho_init, linear_init)
    wrn = WIDE_RESNET.fullmatch(name)
    if name == "mlp":
        return MLP(num_classes or 10, layers=layers)
    if name == "lenet5":
        return LeNet5(num_classes or 10, layers=layers)
    if wrn:
        return WideResNet(int(wrn.group(1)), int(wrn.group(2)), num_classes or 10, layers=layers)
    if name == "resnet18":
        return resnet18(num_classes or 200, layers=layers)
    if name == "resnet50":
        return resnet50(num_classes or 1000, layers=layers)
    raise ValueError(f"model name must be one of {MODEL_NAMES} (or wrn-DEPTH-WIDTH); got {name!r}")


def gated_layer_names(model_name: str, sparsity: str = "structured") -> list[str]:
    """Module names of the layers the gated form of ``model_name`` gates, in forward order.

    The dense form uses the same names: they are the layers magnitude pruning
    prunes (:mod:`paperlib.paper.pruning`) and those a per-layer list has one value for. The names are those of the
    configuration ``build_model(model_name)`` builds (e.g. the MLP's two hidden
    layers).
    """
    return list(gate_counts(model_name, sparsity))


def gate_counts(model_name: str, sparsity: str = "structured") -> dict[str, int]:
    """The number of gates of each layer that :func:`gated_layer_names` names, in forward order.

    One gate is the finest step a layer's density can take once its gates have
    saturated at 0 or 1: 1/16 of WideResNet-16-1's first stage (6.25 points),
    1/160 of WideResNet-28-10's. The gated model is built on the meta device,
    which allocates no memory.
    """
    return dict(_gate_counts(model_name, sparsity))


@functools.lru_cache(maxsize=None)
def _gate_counts(model_name: str, sparsity: str) -> tuple[tuple[str, int], ...]:
    """:func:`gate_counts`, built once per model (the result pages validate thousands of configurations)."""
    with torch.device("meta"):
        gated = build_model(model_name, gated=True, sparsity=sparsity)
    return tuple((name, module.weight_log_alpha.numel()) for name, module in gated.named_modules()
                 if isinstance(module, L0Layer))


def memory_format(model: nn.Module) -> torch.memory_format:
    """The faster layout for ``model``: ``channels_last`` when it has convolutions, else the default.

    Measured on one CPU thread, a LeNet5 training step takes 37 ms in
    ``channels_last`` against 62 ms in NCHW; on CUDA ``channels_last`` is what
    cuDNN's fastest kernels use. The numbers agree up to float rounding.
    """
    has_conv = any(p.dim() == 4 for p in model.parameters())  # convolution weights are the only 4-D parameters
    return torch.channels_last if has_conv else torch.contiguous_format


def gated_layers(model: nn.Module) -> list[L0Layer]:
    """The gated layers of ``model`` in forward order: one constraint group each (App. B)."""
    return [m for m in model.modules() if isinstance(m, L0Layer)]


def layer_densities(model: nn.Module) -> torch.Tensor:
    """Layer-wise L0-densities (eq. 3), differentiable in ``log_alpha``."""
    return torch.stack([layer.density() for layer in gated_layers(model)])


def model_density(model: nn.Module) -> torch.Tensor:
    """Model-wise L0-density: expected active over sparsifiable parameters, summed over gated layers (eq. 3)."""
    layers = gated_layers(model)
    if not layers:
        raise ValueError("model has no gated layers; build it with gated=True")
    active = torch.stack([layer.expected_active_params() for layer in layers]).sum()
    return active / sum(layer.num_sparsifiable_params for layer in layers)
