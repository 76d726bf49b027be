"""Resizing, channel shuffling and box ops (IoU, NMS, clipping) for detection.

>>> import tianyuan as ty, tianyuan.functional as F
>>> F.interpolate(ty.randn(1, 3, 4, 4), scale_factor=2, mode="bilinear").shape
(1, 3, 8, 8)
>>> F.nms(ty.tensor([[0., 0, 10, 10], [1, 1, 10, 10]]), ty.tensor([0.9, 0.8]), 0.5).tolist()
[0]
"""
import math

import numpy as np

from .. import dtypes
from ..ops import boxes as B
from ..ops import nms as native
from ..ops import resize as R
from ..ops import shape as S
from ..tensor import Tensor, as_tensor
from ._args import image_tensor, pair

MODES = ("nearest", "nearest-exact", "bilinear")


def _sizes(x, size, scale_factor, op):
    """Output (h, w) and the per-axis scale (None when `size` was given)."""
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of size and scale_factor "
                         f"(got size={size!r}, scale_factor={scale_factor!r})")
    if size is not None:
        return pair(size, "size", op, 1), (None, None)
    scales = (scale_factor,) * 2 if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
    if len(scales) != 2 or min(scales) <= 0:
        raise ValueError(f"{op}: scale_factor must be a positive number or pair, "
                         f"got {scale_factor!r}")
    out = tuple(int(math.floor(n * float(s))) for n, s in zip(x.shape[2:], scales))
    if min(out) < 1:
        raise ValueError(f"{op}: scale_factor {scale_factor!r} gives an empty output {out} for "
                         f"input {x.shape}")
    return out, tuple(float(s) for s in scales)


def _taps(mode, n, o, scale, align_corners, dtype):
    if mode == "bilinear":
        return R.linear_taps(n, o, align_corners, scale, dtype)
    if o == n and mode == "nearest":  # PyTorch's special cases
        return np.arange(n)[None], None
    if o == 2 * n and mode == "nearest":
        return (np.arange(o) // 2)[None], None
    return R.nearest_taps(n, o, scale, exact=mode == "nearest-exact")


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Resize (N, C, H, W) by `size` or `scale_factor` with PyTorch's source-index rules.

    mode 'nearest' (floor(dst * in/out)), 'nearest-exact' (pixel centres) or 'bilinear'
    (align_corners False by default: src = (dst + 0.5) * in/out - 0.5, clamped at 0).
    """
    op = "interpolate"
    if mode.startswith("nearest") and _quantized(x):
        return _nearest_int8(x, size, scale_factor, mode, align_corners, op)
    image_tensor(x, op)
    if mode not in MODES:
        raise ValueError(f"{op}: mode must be one of {', '.join(MODES)}, got {mode!r}")
    if align_corners is not None and mode != "bilinear":
        raise ValueError(f"{op}: align_corners can only be set with mode='bilinear', "
                         f"got mode={mode!r}")
    out, scales = _sizes(x, size, scale_factor, op)
    align = bool(align_corners)
    for axis, n, o, s in zip((2, 3), x.shape[2:], out, scales):
        if o == n and (s is None or s == 1.0 or align):
            continue  # identity along this axis
        index, weight = _taps(mode, n, o, s, align, x.dtype)
        x = R.AxisResample.apply(x, index=index, weight=weight, axis=axis)
    return x


def _quantized(x):
    from ..quantization.qarray import is_quantized   # quantization builds on functional
    return is_quantized(x)


def _nearest_int8(x, size, scale_factor, mode, align_corners, op):
    """Nearest resize of an int8 activation (an FPN's top-down path): a gather of its values,
    which keeps the scale and zero point exactly."""
    from ..quantization.qarray import wrap
    if align_corners is not None:
        raise ValueError(f"{op}: align_corners can only be set with mode='bilinear', "
                         f"got mode={mode!r}")
    if x.ndim != 4:
        raise ValueError(f"{op}: input must be (N, C, H, W), got shape {x.shape}")
    out, scales = _sizes(x, size, scale_factor, op)
    q = x.data
    index = [_taps(mode, n, o, s, False, np.float32)[0].reshape(-1)
             for n, o, s in zip(q.shape[2:], out, scales)]
    values = q.view(np.ndarray)[:, :, index[0][:, None], index[1][None, :]]
    return wrap(np.ascontiguousarray(values), q.scale, q.zero_point)


def channel_shuffle(x, groups):
    """ShuffleNet's shuffle: (N, g*k, H, W) as (N, g, k, H, W) -> (N, k, g, H, W) -> flat, in
    one copy (ops.shape.ChannelShuffle)."""
    op = "channel_shuffle"
    if getattr(x, "ndim", None) != 4:
        image_tensor(x, op)   # raises, naming the op; any dtype passes (int8 models shuffle)
    c = x.shape[1]
    if not isinstance(groups, int) or groups < 1 or c % groups:
        raise ValueError(f"{op}: groups={groups!r} must be a positive int dividing the "
                         f"{c} channels of input {x.shape}")
    return S.ChannelShuffle.apply(as_tensor(x), groups=groups)


def concat_shuffle(tensors):
    """channel_shuffle(concat(tensors, axis=1), len(tensors)) in one copy, for parts of equal
    shape (N, k, H, W): output channel j * len(tensors) + i is part i's channel j. ShuffleNetV2
    joins its two branches so; as a stack along a new axis 2 it skips the shuffle's copy."""
    op = "concat_shuffle"
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty sequence of tensors")
    for t in tensors:
        if getattr(t, "ndim", None) != 4:
            image_tensor(t, op)
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"{op}: the parts must have one shape (N, k, H, W), got {sorted(shapes)}")
    return S.ConcatShuffle.apply(*[as_tensor(t) for t in tensors])


# ---------------------------------------------------------------- boxes (ops/boxes.py; NMS
# native: ops/nms.py, equal to its numpy twin)
# Boxes are (N, 4) x1, y1, x2, y2 float tensors or arrays; results are Tensors (no gradient:
# these act on anchors, targets and detached detections).

def _boxes(boxes, op, name="boxes"):
    data = np.asarray(boxes.data if isinstance(boxes, Tensor) else boxes)
    if data.ndim != 2 or data.shape[1] != 4:
        raise ValueError(f"{op}: {name} must be (N, 4) x1, y1, x2, y2, got shape {data.shape}")
    if not dtypes.is_floating(data.dtype):
        data = data.astype(np.float32)
    return data


def _per_box(values, n, op, name):
    data = np.asarray(values.data if isinstance(values, Tensor) else values)
    if data.shape != (n,):
        raise ValueError(f"{op}: {name} must have one value per box, shape ({n},), got "
                         f"{data.shape}")
    return data


def box_area(boxes):
    """(N,) areas of (N, 4) boxes."""
    return Tensor(B.box_area(_boxes(boxes, "box_area")))


def box_iou(boxes1, boxes2):
    """(N, M) IoU of (N, 4) and (M, 4) boxes (torchvision.ops.box_iou)."""
    return Tensor(B.box_iou(_boxes(boxes1, "box_iou", "boxes1"),
                            _boxes(boxes2, "box_iou", "boxes2")))


def nms(boxes, scores, iou_threshold):
    """Greedy NMS (torchvision.ops.nms): int64 indices of the kept boxes, by decreasing
    score; a box goes when its IoU with a kept one exceeds `iou_threshold`."""
    data = _boxes(boxes, "nms")
    return Tensor(native.nms(data, _per_box(scores, data.shape[0], "nms", "scores"),
                             float(iou_threshold)))


def batched_nms(boxes, scores, idxs, iou_threshold):
    """NMS within each category `idxs` (torchvision.ops.batched_nms): int64 indices kept,
    by decreasing score."""
    op = "batched_nms"
    data = _boxes(boxes, op)
    n = data.shape[0]
    idxs = _per_box(idxs, n, op, "idxs")
    if dtypes.is_floating(idxs.dtype):
        raise TypeError(f"{op}: idxs must be integer categories, got dtype {idxs.dtype}")
    return Tensor(native.batched_nms(data, _per_box(scores, n, op, "scores"), idxs,
                                     float(iou_threshold)))


def clip_boxes(boxes, size):
    """Boxes clamped into an image of `size` (height, width)
    (torchvision.ops.clip_boxes_to_image)."""
    height, width = pair(size, "size", "clip_boxes")
    return Tensor(B.clip_boxes(_boxes(boxes, "clip_boxes"), (height, width)))


def remove_small_boxes(boxes, min_size):
    """int64 indices of the boxes at least `min_size` wide and high."""
    return Tensor(B.remove_small_boxes(_boxes(boxes, "remove_small_boxes"), min_size))
