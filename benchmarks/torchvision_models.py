"""`paperlib.sparsify` and `paperlib.purge` on torchvision's classifiers, one or two of each family.

Each model is built untrained (10 classes), gated by the default rule, and a share of every gated
layer's gates is closed at random (the rest get medians in (0, 1]); its batch norms get statistics and
affine parameters away from their defaults, so that a closed channel whose shift leaked would show.
Then it is purged, and the table gives, per model: how many layers the rule gated, the largest
difference between the purged and the gated model's outputs (relative to the largest output), the
test-time gated and the purged parameter counts, and how many closed channels purge had to keep
(`purge_report`). GoogLeNet's auxiliary branches, which the example input does not reach in eval
mode, are not in the purged model: it is the test-time graph.

    OMP_NUM_THREADS=1 python benchmarks/torchvision_models.py [--closed 0.4] [MODEL ...]

About half a minute on one core for the default list. A name ``timm:NAME`` builds timm's model NAME instead
(``pip install timm``; not a dependency of paperlib), read with ``leaves="auto"`` for the submodules torch.fx
cannot trace, such as the five ``Conv2dSame`` of ``timm:tf_efficientnet_b0``.
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch
import torchvision

import paperlib
from paperlib.method.layers import L0Layer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_models import close_gates_, randomise_batch_norms_  # noqa: E402  (the tests' helpers)

#: One or two models of each family, and the input side each needs at the least (32 px where it runs).
MODELS = {"alexnet": 64, "vgg11": 32, "vgg11_bn": 32, "resnet18": 32, "resnet50": 32, "wide_resnet50_2": 32,
          "resnext50_32x4d": 32, "regnet_x_400mf": 32, "regnet_y_400mf": 32, "squeezenet1_0": 32, "densenet121": 32,
          "googlenet": 64, "shufflenet_v2_x0_5": 32, "mobilenet_v2": 32, "mobilenet_v3_small": 32, "mnasnet0_5": 32,
          "efficientnet_b0": 32, "convnext_tiny": 32, "swin_t": 32, "vit_b_16": 32}


def check(name: str, side: int, share: float) -> dict:
    torch.manual_seed(0)
    leaves = None
    if name.startswith("timm:"):
        import timm  # optional: only for these names

        model, leaves = timm.create_model(name[5:], pretrained=False, num_classes=10), "auto"
    else:
        options = {"image_size": side} if name.startswith("vit") else {}
        model = getattr(torchvision.models, name)(weights=None, num_classes=10, **options)
    with torch.no_grad():  # ViT's head starts at zero: its outputs would all be 0
        for parameter_name, parameter in model.named_parameters():
            if parameter_name.startswith("heads"):
                parameter.normal_(0, 0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # leaves="auto" names the modules it calls whole
        paperlib.sparsify(model, leaves=leaves)
    randomise_batch_norms_(model)
    close_gates_(model, share)
    model.eval()
    x = torch.randn(2, 3, side, side)
    with torch.no_grad():
        gated = model(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a kept closed channel is counted in the table instead
        small = paperlib.purge(model, x[:1], leaves=leaves)
    with torch.no_grad():
        purged = small(x)
    return {"model": name, "gated layers": sum(isinstance(m, L0Layer) for m in model.modules()),
            "max |purged - gated| / max |gated|": float((purged - gated).abs().max() / gated.abs().max()),
            "params, test time": paperlib.count_params(model, gates="test"),
            "params, purged": paperlib.count_params(small),
            "closed channels kept": sum(len(c) for c in small.purge_report.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--closed", type=float, default=0.4, help="share of each gated layer's gates closed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| model | gated layers | max \\|purged − gated\\| / max \\|gated\\| | params, test time | params, purged "
          "| closed channels kept |")
    print("|---|---:|---:|---:|---:|---:|")
    started = time.perf_counter()
    for name in args.models:
        row = check(name, MODELS.get(name, 32), args.closed)
        print(f"| {row['model']} | {row['gated layers']} | {row['max |purged - gated| / max |gated|']:.1e} | "
              f"{row['params, test time']:,} | {row['params, purged']:,} | {row['closed channels kept']} |", flush=True)
    print(f"\n{len(args.models)} models in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
