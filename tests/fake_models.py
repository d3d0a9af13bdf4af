"""Models the tests make: batch norms with statistics and affine parameters away from their defaults, and gates
closed at random."""

import torch
import torch.nn as nn

from paperlib.method.layers import L0Layer

#: A closed gate's log_alpha: its median (eq. 9) is exactly 0 below -beta ln 11, about -1.6, and a sample
#: (eq. 7) is exactly 0 below about -10 whatever the noise.
CLOSED = -20.0


def randomise_batch_norms_(model: nn.Module, seed: int = 0) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for bn in model.modules():
            if isinstance(bn, nn.BatchNorm2d):
                size = bn.num_features
                bn.running_mean.copy_(0.2 * torch.randn(size, generator=generator))
                bn.running_var.copy_(torch.empty(size).uniform_(0.5, 2.0, generator=generator))
                bn.weight.copy_(torch.empty(size).uniform_(0.5, 1.5, generator=generator))
                bn.bias.copy_(0.2 * torch.randn(size, generator=generator))


def close_gates_(model: nn.Module, share: float = 0.4, seed: int = 0) -> None:
    """Close about ``share`` of every gated layer's gates; the others get medians in (0, 1]."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, L0Layer):
                log_alpha = layer.weight_log_alpha
                closed = torch.rand(log_alpha.shape, generator=generator) < share
                open_ = torch.empty(log_alpha.shape).uniform_(-1.0, 3.0, generator=generator)
                log_alpha.copy_(torch.where(closed, CLOSED, open_))


def run_without_paperlib(path, inputs, tmp_path) -> float:
    """Load the model ``torch.save`` wrote at ``path`` in a Python process where paperlib cannot be imported
    (``-I``, run from ``tmp_path``, and ``sys.modules["paperlib"] = None``), run it in eval mode on ``inputs`` and
    return its output."""
    import subprocess
    import sys

    torch.save(inputs, tmp_path / "inputs.pt")
    code = ("import sys; sys.modules['paperlib'] = None; import torch; model = torch.load(sys.argv[1], "
            "weights_only=False).eval(); x = torch.load(sys.argv[2]); torch.save(model(x).detach(), sys.argv[3])")
    done = subprocess.run([sys.executable, "-I", "-c", code, str(path), str(tmp_path / "inputs.pt"),
                           str(tmp_path / "out.pt")], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return torch.load(tmp_path / "out.pt")
