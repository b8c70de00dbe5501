"""The model zoo: `mlp` (tabular), `cnn` (3x32x32 images, ResNet-style), `transformer` (token ids).

Each family has a typed config with validation and size presets as plain functions
(`tiny` for tests, `small`, `base`). `build_model(family, config)` is the one way to make a model,
so the checkpoint and the model card (which carry the config) can always rebuild it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainserve.core.errors import UserError
from trainserve.train import usermodel
from trainserve.train.usermodel import FAMILY as USER_FAMILY
from trainserve.train.usermodel import UserModelConfig


def _check(cond: bool, field: str, value: Any, allowed: str) -> None:
    if not cond:
        raise UserError(f"model config field {field}={value!r} is invalid; allowed: {allowed}")


@dataclass
class MLPConfig:
    in_features: int = 32  # features per row
    hidden: tuple[int, ...] = (256, 256)  # width of each hidden layer
    num_classes: int = 10
    dropout: float = 0.0

    def __post_init__(self) -> None:
        self.hidden = tuple(self.hidden)
        _check(self.in_features >= 1, "in_features", self.in_features, ">= 1")
        _check(len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden), "hidden", self.hidden, "one or more widths >= 1")
        _check(self.num_classes >= 2, "num_classes", self.num_classes, ">= 2")
        _check(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "0 <= dropout < 1")


@dataclass
class CNNConfig:
    in_channels: int = 3
    image_size: int = 32  # square images, pixels per side
    widths: tuple[int, ...] = (64, 128, 256)  # channels of each stage; stages after the first halve H, W
    blocks: tuple[int, ...] = (2, 2, 2)  # residual blocks per stage
    num_classes: int = 10

    def __post_init__(self) -> None:
        self.widths, self.blocks = tuple(self.widths), tuple(self.blocks)
        _check(self.in_channels >= 1, "in_channels", self.in_channels, ">= 1")
        _check(self.image_size >= 8, "image_size", self.image_size, ">= 8")
        _check(len(self.widths) >= 1 and all(w >= 1 for w in self.widths), "widths", self.widths, "one or more widths >= 1")
        _check(len(self.blocks) == len(self.widths) and all(b >= 1 for b in self.blocks), "blocks", self.blocks,
               f"{len(self.widths)} counts >= 1, one per stage")
        _check(self.num_classes >= 2, "num_classes", self.num_classes, ">= 2")


@dataclass
class TransformerConfig:
    vocab_size: int = 8192
    seq_len: int = 128  # tokens per sequence
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    d_ff: int = 2048
    num_classes: int = 10
    dropout: float = 0.0

    def __post_init__(self) -> None:
        _check(self.vocab_size >= 2, "vocab_size", self.vocab_size, ">= 2")
        _check(self.seq_len >= 1, "seq_len", self.seq_len, ">= 1")
        _check(self.n_heads >= 1 and self.d_model % self.n_heads == 0, "d_model", self.d_model,
               f"a multiple of n_heads={self.n_heads}")
        _check(self.n_layers >= 1, "n_layers", self.n_layers, ">= 1")
        _check(self.d_ff >= 1, "d_ff", self.d_ff, ">= 1")
        _check(self.num_classes >= 2, "num_classes", self.num_classes, ">= 2")
        _check(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "0 <= dropout < 1")


ModelConfig = MLPConfig | CNNConfig | TransformerConfig | UserModelConfig


# --- presets ---------------------------------------------------------------------------------

def mlp_tiny() -> MLPConfig:
    return MLPConfig(hidden=(32,))


def mlp_small() -> MLPConfig:
    return MLPConfig(hidden=(512, 512))


def mlp_base() -> MLPConfig:
    return MLPConfig(hidden=(2048, 2048, 2048))


def cnn_tiny() -> CNNConfig:
    return CNNConfig(widths=(8, 16), blocks=(1, 1))


def cnn_small() -> CNNConfig:
    # ~4.3M parameters
    return CNNConfig(widths=(64, 128, 256), blocks=(2, 2, 3))


def cnn_base() -> CNNConfig:
    # ResNet-18 layout for 32x32 inputs, ~11M parameters
    return CNNConfig(widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2))


def transformer_tiny() -> TransformerConfig:
    return TransformerConfig(vocab_size=64, seq_len=32, d_model=32, n_heads=2, n_layers=1, d_ff=64)


def transformer_small() -> TransformerConfig:
    # 6 layers, d_model 512, ~23M parameters
    return TransformerConfig(vocab_size=8192, seq_len=128, d_model=512, n_heads=8, n_layers=6, d_ff=2048)


def transformer_base() -> TransformerConfig:
    return TransformerConfig(vocab_size=16384, seq_len=256, d_model=768, n_heads=12, n_layers=12, d_ff=3072)


PRESETS: dict[str, dict[str, Callable[[], ModelConfig]]] = {
    "mlp": {"tiny": mlp_tiny, "small": mlp_small, "base": mlp_base},
    "cnn": {"tiny": cnn_tiny, "small": cnn_small, "base": cnn_base},
    "transformer": {"tiny": transformer_tiny, "small": transformer_small, "base": transformer_base},
}
FAMILIES = tuple(PRESETS)  # the zoo; a model of the user's own is the "user" family (train/usermodel.py)
CONFIG_TYPES: dict[str, type] = {"mlp": MLPConfig, "cnn": CNNConfig, "transformer": TransformerConfig,
                                 USER_FAMILY: UserModelConfig}


def preset_config(family: str, preset: str) -> ModelConfig:
    if family not in PRESETS:
        raise UserError(f"unknown model {family!r}; choose one of: {', '.join(FAMILIES)}")
    if preset not in PRESETS[family]:
        raise UserError(f"unknown preset {preset!r} for {family}; choose one of: {', '.join(PRESETS[family])}")
    return PRESETS[family][preset]()


def config_from_dict(family: str, data: dict[str, Any]) -> ModelConfig:
    if family not in CONFIG_TYPES:
        raise UserError(f"unknown model {family!r}; choose one of: {', '.join(FAMILIES)}")
    cls = CONFIG_TYPES[family]
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise UserError(f"model config for {family} has unknown fields {sorted(unknown)}; allowed: {sorted(names)}")
    return cls(**data)


def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}


def family_of(config: ModelConfig) -> str:
    for name, cls in CONFIG_TYPES.items():
        if isinstance(config, cls):
            return name
    raise TypeError(f"not a model config: {type(config).__name__}")


# --- modules (torch imported here: this module is only used where torch is needed) -------------

def model_name(config: ModelConfig) -> str:
    """What reports and the repository call the model: the zoo family, or the user model's name."""
    return config.name if isinstance(config, UserModelConfig) else family_of(config)


def build_model(config: ModelConfig) -> Any:
    """Make the torch module for a config (weights freshly initialised)."""
    if isinstance(config, UserModelConfig):
        return usermodel.build(config)
    mlp, cnn, transformer = _torch_modules()
    return {"mlp": mlp, "cnn": cnn, "transformer": transformer}[family_of(config)](config)


@functools.cache
def _torch_modules():  # defined lazily so importing train.models does not import torch
    import torch
    from torch import nn
    from torch.nn import functional as F

    class MLP(nn.Module):
        def __init__(self, cfg: MLPConfig) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            width = cfg.in_features
            for h in cfg.hidden:
                layers += [nn.Linear(width, h), nn.GELU(), nn.Dropout(cfg.dropout)]
                width = h
            layers.append(nn.Linear(width, cfg.num_classes))
            self.net = nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, F) -> (B, classes)
            return self.net(x)

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Identity()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return F.relu(y + self.shortcut(x))

    class CNN(nn.Module):
        def __init__(self, cfg: CNNConfig) -> None:
            super().__init__()
            w0 = cfg.widths[0]
            self.stem = nn.Sequential(nn.Conv2d(cfg.in_channels, w0, 3, 1, 1, bias=False), nn.BatchNorm2d(w0), nn.ReLU())
            blocks: list[nn.Module] = []
            cin = w0
            for i, (w, n) in enumerate(zip(cfg.widths, cfg.blocks)):
                for j in range(n):
                    blocks.append(BasicBlock(cin, w, 2 if (i > 0 and j == 0) else 1))
                    cin = w
            self.blocks = nn.Sequential(*blocks)
            self.head = nn.Linear(cin, cfg.num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, classes)
            y = self.blocks(self.stem(x))
            return self.head(y.mean(dim=(2, 3)))

    class Transformer(nn.Module):
        def __init__(self, cfg: TransformerConfig) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.pos = nn.Parameter(torch.zeros(1, cfg.seq_len, cfg.d_model))
            nn.init.normal_(self.pos, std=0.02)
            layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout,
                                               activation="gelu", batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.num_classes)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (B, T) int64 -> (B, classes)
            x = self.tok(ids) + self.pos[:, : ids.shape[1]]
            x = self.norm(self.encoder(x))
            return self.head(x.mean(dim=1))

    return MLP, CNN, Transformer


def io_spec(config: ModelConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Input and output tensors of one sample (batch dimension excluded), as the model card lists them."""
    family = family_of(config)
    if isinstance(config, UserModelConfig):
        inputs = [{"name": "input", "shape": list(config.input_shape), "dtype": config.input_dtype}]
    elif family == "mlp":
        inputs = [{"name": "input", "shape": [config.in_features], "dtype": "float32"}]
    elif family == "cnn":
        inputs = [{"name": "input", "shape": [config.in_channels, config.image_size, config.image_size], "dtype": "float32"}]
    else:
        inputs = [{"name": "input_ids", "shape": [config.seq_len], "dtype": "int64"}]
    outputs = [{"name": "logits", "shape": [config.num_classes], "dtype": "float32"}]
    return inputs, outputs
