"""An image resize transform on torch alone, for torchrl's IMPALA script without torchvision.

torchrl's ``Resize`` calls ``torchvision.transforms.functional.resize``; the torchvision
wheels on PyPI are CUDA builds that fail to load beside torch's CPU wheel ("operator
torchvision::nms does not exist"). ``run.py`` copies this module beside the IMPALA
script's ``utils.py`` and patches ``Resize(84, 84)`` into ``resize_transform(84, 84)``:
the same output size, bilinear with antialiasing, through
``torch.nn.functional.interpolate``. ``run.py`` puts the script's folder on ``PYTHONPATH``,
which the Ray workers inherit, so the transform unpickles there too.
"""

from __future__ import annotations

import functools

import torch
from torchrl.envs import UnaryTransform


def resize_pixels(pixels: torch.Tensor, *, rows: int, cols: int) -> torch.Tensor:
    """Resizes the last two dimensions of a float image batch to ``rows`` x ``cols``.

    Args:
        pixels: a float tensor shaped ``(..., channels, height, width)``, at least 3-D.
        rows: the output height.
        cols: the output width.

    Returns:
        A tensor shaped ``(..., channels, rows, cols)``, resized bilinearly with antialiasing.

    Example:
        >>> resize_pixels(torch.ones(2, 1, 210, 160), rows=84, cols=84).shape
        torch.Size([2, 1, 84, 84])
    """
    if pixels.shape[-2:] == (rows, cols):
        return pixels
    lead, image = pixels.shape[:-3], pixels.shape[-3:]
    flat = pixels.reshape(-1, *image)  # interpolate takes (batch, channels, height, width)
    out = torch.nn.functional.interpolate(
        flat, size=(rows, cols), mode="bilinear", antialias=True, align_corners=False
    )
    return out.reshape(*lead, *out.shape[-3:])


def resize_transform(rows: int, cols: int, key: str = "pixels") -> UnaryTransform:
    """A transform that resizes ``key`` in place, as ``torchrl.envs.Resize(rows, cols)`` does.

    Args:
        rows: the output height.
        cols: the output width.
        key: the image entry to resize.

    Returns:
        A ``UnaryTransform`` whose function is a ``functools.partial`` of :func:`resize_pixels`,
        which pickles by reference (this module must be importable where it unpickles).

    Example:
        >>> resize_transform(84, 84).in_keys
        ['pixels']
    """
    fn = functools.partial(resize_pixels, rows=rows, cols=cols)
    return UnaryTransform(in_keys=[key], out_keys=[key], fn=fn)
