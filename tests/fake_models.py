"""Models the tests make: batch norms with statistics and affine parameters away from their defaults."""

import torch
import torch.nn as nn


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
