"""Upper bounds on network sizes, checked when a space or a model definition is read.

A typo such as ``channels: 1000000`` would otherwise pass every shape check and fail minutes
later, deep inside torch, as an allocation error in profile, summary, latency or export. The
bounds are far above any network fbnas is meant for (FBNet's largest layer has 2112 channels,
its input 224x224, its kernels 5x5), yet low enough that every size stays addressable:

- channels of any layer (input, stem, stage, block, head, and a block's expanded width):
  :data:`MAX_CHANNELS`
- classes: :data:`MAX_CLASSES`; input resolution: :data:`MAX_RESOLUTION`
- kernel size of the stem and of ops: :data:`MAX_KERNEL`; layers: :data:`MAX_LAYERS`
- values in one layer's weights, or in one feature map of one image: :data:`MAX_VALUES`
- the batch of timed inputs (``profile --batch``, ``latency --batch``): :data:`MAX_BATCH`
"""

from __future__ import annotations

from fbnas.errors import FbnasError

MAX_CHANNELS = 16384
MAX_CLASSES = 100_000
MAX_RESOLUTION = 4096
MAX_KERNEL = 31
MAX_LAYERS = 1000
MAX_VALUES = 2 ** 28  # 1 GiB of float32
MAX_BATCH = 1024


def at_most(value: int, limit: int, field: str) -> int:
    """``value`` if it is at most ``limit``; else an error naming ``field`` and the bound."""
    if value > limit:
        raise FbnasError(f"{field} is {value}, above fbnas's limit of {limit}; use a value up "
                         f"to {limit}")
    return value


def check_map(channels: int, h: int, w: int, where: str) -> None:
    """Refuse a feature map of one image holding more than :data:`MAX_VALUES` values."""
    if channels * h * w > MAX_VALUES:
        raise FbnasError(f"{where}: its {channels}x{h}x{w} feature map holds "
                         f"{channels * h * w:,} values per image, above fbnas's limit of "
                         f"{MAX_VALUES:,}; lower the channels or the input resolution")


def check_weights(count: int, where: str) -> None:
    """Refuse a layer whose weights hold more than :data:`MAX_VALUES` values."""
    if count > MAX_VALUES:
        raise FbnasError(f"{where}: its weights hold {count:,} values, above fbnas's limit of "
                         f"{MAX_VALUES:,}; lower its channels or kernel size")
