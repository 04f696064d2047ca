"""Modality encoders of the prototypical-network baselines (paper Appendix E):
each maps a batch of scenes to a set of objects, a validity mask and optional position features.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch
import torchvision
from torch import Tensor, nn

from curi.errors import ConfigError
from curi.registry import Registry

__all__ = [
    "ENCODERS",
    "EncodedObjects",
    "Encoder",
    "SchemaEncoder",
    "ImageEncoder",
    "SoundEncoder",
    "SCHEMA_FEATURES",
    "SCHEMA_MAX_OBJECTS",
    "get_encoder",
    "list_encoders",
    "register_encoder",
]

log = logging.getLogger(__name__)

SCHEMA_FEATURES = 20  # [0:15] one-hots, [15:18] pixel x, pixel y, depth, [18:20] sin/cos rotation
SCHEMA_MAX_OBJECTS = 5


class EncodedObjects(NamedTuple):
    """A batch of scenes as sets of objects.

    Attributes:
        objects: (B, K, D) float object features; padded slots hold zeros.
        mask: (B, K) bool, True for real objects.
        positions: (B, K, P) float normalised coordinates in [0, 1], or None when the encoder
            has no spatial layout (schema objects carry their location in their features).
    """

    objects: Tensor
    mask: Tensor
    positions: Tensor | None


class Encoder(nn.Module):
    """Contract of an encoder: ``forward(x, mask=None) -> EncodedObjects`` with ``out_dim`` (D),
    ``num_objects`` (K, fixed for a given configuration) and ``pos_dim`` (P, 0 when positions
    are None). Output is deterministic for given weights in eval mode.

    The encoder of a modality is registered under the renderer's name and reads its
    ``to_input`` batches; `sized_for` gives the options that fit the renderer's input shape.
    """

    out_dim: int
    num_objects: int
    pos_dim: int

    @classmethod
    def sized_for(cls, input_shape: tuple[int, ...]) -> dict:
        """Keyword options that size this encoder for one scene of `input_shape` (a renderer's
        ``input_shape``); none by default (the input size is fixed)."""
        return {}

    def forward(self, x: Tensor, mask: Tensor | None = None) -> EncodedObjects:
        raise NotImplementedError


ENCODERS: Registry[type[Encoder]] = Registry("encoder")
"""The encoders by name; `curi.errors.OptionError` for an unknown name or a bad option."""
register_encoder = ENCODERS.register
"""Class decorator: ``@register_encoder("image")`` makes an encoder available by name."""


def list_encoders() -> list[str]:
    """Names of the registered encoders, sorted."""
    return ENCODERS.names()


def get_encoder(name: str, **kwargs) -> Encoder:
    """Build a registered encoder by name (``schema``, ``image``, ``sound``).

    Raises:
        OptionError: (a `ConfigError`) an unknown name, an option the encoder does not take,
            or a value of the wrong type or range.
    """
    return ENCODERS.build(name, **kwargs)


def _grid_positions(rows: int, cols: int) -> Tensor:
    """(rows * cols, 2) normalised (row, col) of a row-major grid: object k is at
    ``divmod(k, cols)``; each coordinate divided by its own extent minus one."""
    r = torch.arange(rows, dtype=torch.float32) / max(rows - 1, 1)
    c = torch.arange(cols, dtype=torch.float32) / max(cols - 1, 1)
    rr, cc = torch.meshgrid(r, c, indexing="ij")  # (rows, cols) each
    return torch.stack([rr, cc], dim=-1).reshape(rows * cols, 2)  # (rows * cols, 2)


@register_encoder("schema")
class SchemaEncoder(Encoder):
    """Per-object MLP over schema vectors (input -> 57 -> 96); padded objects are zeroed.

    Input: float32 (B, 5, 20) in the fixed schema layout and a bool mask (B, 5); with
    ``mask_channel`` (the schema renderer's option of that name), (B, 5, 21) whose last
    feature is the mask, read as the mask and dropped, so the network is the same.
    """

    def __init__(
        self,
        *,
        in_features: int = SCHEMA_FEATURES,
        hidden: int = 57,
        out_dim: int = 96,
        mask_channel: bool = False,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.mask_channel = bool(mask_channel)
        self.out_dim = out_dim
        self.num_objects = SCHEMA_MAX_OBJECTS
        self.pos_dim = 0
        self.mlp = nn.Sequential(
            nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, out_dim)
        )
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    @classmethod
    def sized_for(cls, input_shape: tuple[int, ...]) -> dict:
        """``mask_channel`` when the renderer appends the mask as one more feature."""
        return {"mask_channel": True} if input_shape[-1] == SCHEMA_FEATURES + 1 else {}

    def forward(self, x: Tensor, mask: Tensor | None = None) -> EncodedObjects:
        """Encode schema scenes.

        Args:
            x: (B, K, in_features) float object vectors, (B, K, in_features + 1) with
                ``mask_channel``.
            mask: (B, K) bool; None means every slot is a real object (with
                ``mask_channel``: the mask feature says which).

        Returns:
            Objects (B, K, out_dim), the mask, and no positions.

        Raises:
            ValueError: wrong input shape.
        """
        width = self.in_features + self.mask_channel
        if x.dim() != 3 or x.shape[-1] != width:
            raise ValueError(f"schema input must be (B, K, {width}), got {tuple(x.shape)}")
        if self.mask_channel:  # (B, K, in_features + 1): the last feature is the mask
            mask = x[..., -1] > 0.5 if mask is None else mask
            x = x[..., :-1]
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        # where(), not multiplication: a NaN/inf in a padded slot must not leak through.
        x = torch.where(mask[..., None], x, torch.zeros((), dtype=x.dtype, device=x.device))
        h = self.mlp(x)  # (B, K, out_dim)
        h = torch.where(mask[..., None], h, torch.zeros((), dtype=h.dtype, device=h.device))
        return EncodedObjects(h, mask, None)


@register_encoder("image")
class ImageEncoder(Encoder):
    """torchvision ResNet-18 (random init) up to layer3, average-pooled to a grid of objects
    (10 x 8 = 80 by default) and projected by 1x1 convs 256 -> 128 -> 64.

    The 10 x 15 layer3 map is reduced with adaptive average pooling, so every column
    contributes (the original used a stride-2 1x1 conv that dropped every other column).
    Positions are the normalised (row, col) of each grid cell.
    """

    def __init__(
        self,
        *,
        height: int = 160,
        width: int = 240,
        grid: tuple[int, int] = (10, 8),
        out_dim: int = 64,
        hidden: int = 128,
    ) -> None:
        super().__init__()
        if height % 16 or width % 16:
            raise ConfigError(
                f"image size {height} x {width} must be a multiple of 16 (ResNet stride)"
            )
        rows, cols = int(grid[0]), int(grid[1])
        self.height, self.width, self.grid = height, width, (rows, cols)
        self.out_dim = out_dim
        self.num_objects = rows * cols
        self.pos_dim = 2
        r = torchvision.models.resnet18(weights=None)
        self.backbone = nn.Sequential(
            r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2, r.layer3
        )  # (B, 256, H / 16, W / 16)
        self.reduce = nn.Sequential(
            nn.AdaptiveAvgPool2d((rows, cols)),
            nn.Conv2d(256, hidden, 1),
            nn.ReLU(),
            nn.Conv2d(hidden, out_dim, 1),
        )
        self.register_buffer("positions", _grid_positions(rows, cols), persistent=False)

    @classmethod
    def sized_for(cls, input_shape: tuple[int, ...]) -> dict:
        """``height`` and ``width`` of images (3, H, W)."""
        return {"height": input_shape[1], "width": input_shape[2]}

    def feature_map(self, x: Tensor) -> Tensor:
        """(B, out_dim, rows, cols) object grid of images x (B, 3, height, width).

        Raises:
            ValueError: wrong input shape.
        """
        if x.dim() != 4 or x.shape[1:] != (3, self.height, self.width):
            raise ValueError(
                f"image input must be (B, 3, {self.height}, {self.width}), got {tuple(x.shape)}"
            )
        return self.reduce(self.backbone(x))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> EncodedObjects:
        """Encode images (B, 3, height, width); `mask` is ignored (every cell is an object)."""
        fmap = self.feature_map(x)  # (B, D, R, C)
        b = fmap.shape[0]
        objects = fmap.flatten(2).transpose(1, 2)  # (B, R * C, D), row-major
        valid = torch.ones(b, self.num_objects, dtype=torch.bool, device=x.device)
        pos = self.positions.to(objects.dtype).expand(b, -1, -1)  # (B, R * C, 2)
        return EncodedObjects(objects, valid, pos)


class _BasicBlock1d(nn.Module):
    """ResNet basic block with 1-D convolutions over time."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm1d(cout)
        self.conv2 = nn.Conv1d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm1d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv1d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm1d(cout)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


def _halve(n: int) -> int:
    """Length after a stride-2 conv/pool with 'same' padding (kernel 3 or 7)."""
    return (n - 1) // 2 + 1


@register_encoder("sound")
class SoundEncoder(Encoder):
    """A ResNet-18-style network with 1-D convolutions over time whose input channels are the
    spectrogram's frequency bins, up to layer3 (time stride 16), then 1x1 convs 256 -> 128 -> 64.

    Frequency is consumed by the first convolution (each time object sees the whole spectrum),
    not average-pooled after 2-D convolutions, so absolute pitch (which encodes locationY)
    survives. A 601-frame spectrogram (120,000 samples, hop 200) gives 38 time objects.
    Positions are normalised time.
    """

    def __init__(
        self,
        *,
        n_freq: int = 201,
        n_frames: int = 601,
        widths: tuple[int, int, int] = (64, 128, 256),
        out_dim: int = 64,
        hidden: int = 128,
    ) -> None:
        super().__init__()
        self.n_freq, self.n_frames = n_freq, n_frames
        self.out_dim = out_dim
        self.num_objects = _halve(_halve(_halve(_halve(n_frames))))
        self.pos_dim = 1
        w1, w2, w3 = widths
        self.backbone = nn.Sequential(
            nn.Conv1d(n_freq, w1, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm1d(w1),
            nn.ReLU(),
            nn.MaxPool1d(3, stride=2, padding=1),
            _BasicBlock1d(w1, w1, 1),
            _BasicBlock1d(w1, w1, 1),
            _BasicBlock1d(w1, w2, 2),
            _BasicBlock1d(w2, w2, 1),
            _BasicBlock1d(w2, w3, 2),
            _BasicBlock1d(w3, w3, 1),
        )  # (B, w3, T / 16)
        self.reduce = nn.Sequential(
            nn.Conv1d(w3, hidden, 1), nn.ReLU(), nn.Conv1d(hidden, out_dim, 1)
        )
        for m in self.backbone.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        t = torch.arange(self.num_objects, dtype=torch.float32) / max(self.num_objects - 1, 1)
        self.register_buffer("positions", t[:, None], persistent=False)  # (T', 1)

    @classmethod
    def sized_for(cls, input_shape: tuple[int, ...]) -> dict:
        """``n_freq`` and ``n_frames`` of one-channel spectrograms (1, F, T)."""
        return {"n_freq": input_shape[1], "n_frames": input_shape[2]}

    def forward(self, x: Tensor, mask: Tensor | None = None) -> EncodedObjects:
        """Encode spectrograms (B, 1, n_freq, n_frames); `mask` is ignored.

        Raises:
            ValueError: wrong input shape.
        """
        if x.dim() != 4 or x.shape[1:] != (1, self.n_freq, self.n_frames):
            raise ValueError(
                f"sound input must be (B, 1, {self.n_freq}, {self.n_frames}), got {tuple(x.shape)}"
            )
        h = self.reduce(self.backbone(x[:, 0]))  # (B, D, T')
        b = h.shape[0]
        objects = h.transpose(1, 2)  # (B, T', D)
        valid = torch.ones(b, self.num_objects, dtype=torch.bool, device=x.device)
        pos = self.positions.to(objects.dtype).expand(b, -1, -1)  # (B, T', 1)
        return EncodedObjects(objects, valid, pos)
