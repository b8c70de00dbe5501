"""A small ResNet-style image classifier in one file: the shape of model `trainserve run` takes as your own.

    trainserve run --model examples/resnet_small.py:build --input-shape 3,64,64 --num-classes 10

`build` returns a torch.nn.Module that maps a batch of images (B, 3, H, W) to logits (B, num_classes);
since it takes a parameter named `num_classes`, trainserve passes --num-classes to it (without the
option, the default here decides). Nothing here knows about trainserve: the same file trains,
exports and serves unchanged (docs/run.md, "Your own model").
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    """Two 3x3 convolutions with batch norm, and a shortcut (a 1x1 convolution where the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNetSmall(nn.Module):
    """Stem, three stages of two blocks (32, 64, 128 channels; each later stage halves H and W), global
    average pooling and a linear head: about 0.7M parameters, any input size of 16 pixels or more."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3, widths: tuple[int, ...] = (32, 64, 128)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU())
        blocks: list[nn.Module] = []
        cin = widths[0]
        for i, w in enumerate(widths):
            blocks += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, num_classes)
        y = self.blocks(self.stem(x))
        return self.head(y.mean(dim=(2, 3)))


def build(num_classes: int = 10) -> nn.Module:
    return ResNetSmall(num_classes)
