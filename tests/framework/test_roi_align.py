"""RoIAlign (native, framework/csrc/roi_align/) against a per-sample transcription of
torchvision's CPU kernel and against its numpy twin; its gradient by finite differences;
the multi-scale pooler's FPN level mapping; hostile rois refused."""
import math

import numpy as np
import pytest
from helpers import gradcheck

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn
from tianyuan.ops.roi_align_ref import roi_align_backward_ref, roi_align_ref, roi_levels


def bilinear(plane, y, x):
    """torchvision's bilinear_interpolate, one sample."""
    h, w = plane.shape
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    hy, hx = 1 - ly, 1 - lx
    return (hy * hx * plane[y0, x0] + hy * lx * plane[y0, x1] + ly * hx * plane[y1, x0] +
            ly * lx * plane[y1, x1])


def roi_align_loop(x, rois, pooled, scale, ratio, aligned):
    """One bin and one sample at a time, in float64 (torchvision's roi_align_forward)."""
    ph_n, pw_n = pooled
    out = np.zeros((len(rois), x.shape[1], ph_n, pw_n))
    off = 0.5 if aligned else 0.0
    for r, (b, x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        sw, sh = x1 * scale - off, y1 * scale - off
        rw, rh = x2 * scale - off - sw, y2 * scale - off - sh
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph_n, rw / pw_n
        gh = ratio if ratio > 0 else math.ceil(rh / ph_n)
        gw = ratio if ratio > 0 else math.ceil(rw / pw_n)
        count = max(gh * gw, 1)
        for c in range(x.shape[1]):
            plane = x[int(b), c].astype(np.float64)
            for ph in range(ph_n):
                for pw in range(pw_n):
                    total = sum(bilinear(plane, sh + ph * bh + (iy + .5) * bh / gh,
                                         sw + pw * bw + (ix + .5) * bw / gw)
                                for iy in range(max(gh, 0)) for ix in range(max(gw, 0)))
                    out[r, c, ph, pw] = total / count
    return out


ROIS = np.array([[0, 1, 1, 7, 8],          # inside
                 [1, -3, 2, 15, 9],        # past the edges
                 [1, 4.2, 3.3, 4.9, 3.5],  # under a pixel
                 [0, 0, 0, 0, 0],          # empty: aligned gives no samples
                 [1, 20, 20, 30, 30]],     # outside: zeros
                np.float32)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ratio", [-1, 0, 2, 3])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_forward_is_torchvisions_loop_and_the_twin(aligned, ratio, scale):
    x = np.random.default_rng(0).standard_normal((2, 3, 10, 12)).astype(np.float32)
    got = F.roi_align(ty.tensor(x), ROIS, (3, 4), scale, ratio, aligned).numpy()
    assert got.shape == (5, 3, 3, 4) and got.dtype == np.float32
    np.testing.assert_allclose(got, roi_align_loop(x, ROIS, (3, 4), scale, ratio, aligned),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, roi_align_ref(x, ROIS, (3, 4), scale, ratio, aligned),
                               rtol=1e-6, atol=1e-6)


def test_boxes_per_image_equal_the_rois_format():
    x = ty.randn(2, 4, 8, 8)
    per_image = [ROIS[ROIS[:, 0] == 0, 1:], ROIS[ROIS[:, 0] == 1, 1:]]
    stacked = np.concatenate([ROIS[ROIS[:, 0] == 0], ROIS[ROIS[:, 0] == 1]])
    np.testing.assert_array_equal(F.roi_align(x, per_image, 2, 0.5, 2).numpy(),
                                  F.roi_align(x, stacked, 2, 0.5, 2).numpy())


@pytest.mark.parametrize("aligned", [False, True])
def test_gradient_numerically_and_against_the_twin(aligned):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 2, 7, 6))
    rois = ROIS.astype(np.float64)
    gradcheck(lambda t: F.roi_align(t, rois, (2, 3), 0.7, -1, aligned), [x])
    g = rng.standard_normal((5, 2, 2, 3))
    t = ty.tensor(x, requires_grad=True)
    (F.roi_align(t, rois, (2, 3), 0.7, 2, aligned) * ty.tensor(g)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(),
                               roi_align_backward_ref(g, rois, x.shape, 0.7, 2, aligned),
                               rtol=1e-10, atol=1e-12)


def test_level_mapping_is_fpn_equation_1():
    # sqrt(area) 112 -> level 3, 224 -> 4, 448 -> 5, tiny -> clamped to 2, huge to 5
    sides = np.array([112, 224, 448, 4, 2000, 223.9], np.float32)
    boxes = np.stack([np.zeros(6), np.zeros(6), sides, sides], axis=1).astype(np.float32)
    assert roi_levels(boxes, 2, 5).tolist() == [1, 2, 3, 0, 3, 1]


def test_multi_scale_pools_each_box_from_its_level_with_gradients():
    # a 256 x 384 image: levels 2..5 at 1/4..1/32 of it
    feats = [ty.tensor(np.random.default_rng(k).standard_normal((1, 2, 256 >> k, 384 >> k)),
                       requires_grad=True) for k in range(2, 6)]
    boxes = np.array([[0, 0, 30, 30], [0, 0, 500, 500], [5, 5, 120, 130], [0, 0, 300, 300]])
    out = nn.MultiScaleRoIAlign(["0", "1", "2", "3"], 7, 2)(feats, [boxes], [(250, 380)])
    assert out.shape == (4, 2, 7, 7)
    levels = roi_levels(boxes, 2, 5)
    assert levels.tolist() == [0, 3, 1, 2]
    for i, level in enumerate(levels):
        want = F.roi_align(feats[level], [boxes[i:i + 1]], 7, 1 / 2 ** (level + 2), 2).numpy()
        np.testing.assert_array_equal(out.numpy()[i:i + 1], want)
    weights = np.random.default_rng(9).standard_normal(out.shape)
    (out * ty.tensor(weights)).sum().backward()
    for i, level in enumerate(levels):       # each level's gradient is its box's alone
        t = ty.tensor(feats[level].numpy(), requires_grad=True)
        (F.roi_align(t, [boxes[i:i + 1]], 7, 1 / 2 ** (level + 2), 2) *
         ty.tensor(weights[i:i + 1])).sum().backward()
        np.testing.assert_allclose(feats[level].grad.numpy(), t.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("roi, message", [
    ([2, 0, 0, 4, 4], "batch index"),
    ([-1, 0, 0, 4, 4], "batch index"),
    ([0, 0, np.nan, 4, 4], "not finite"),
    ([0, 0, 0, 1e30, 1e30], "samples"),
])
def test_hostile_rois_are_refused(roi, message):
    x = ty.randn(2, 1, 4, 4)
    with pytest.raises(ValueError, match=message):
        F.roi_align(x, np.array([roi], np.float32), 2, 1.0, -1)


def test_shape_errors_name_the_argument():
    with pytest.raises(ValueError, match="boxes"):
        F.roi_align(ty.randn(1, 1, 4, 4), np.zeros((3, 4), np.float32), 2)
    with pytest.raises(ValueError, match="output_size"):
        F.roi_align(ty.randn(1, 1, 4, 4), np.zeros((1, 5), np.float32), 0)
    from tianyuan import _C
    with pytest.raises(ValueError, match="one row per roi"):
        _C.roi_align_backward(np.zeros((2, 1, 2, 2), np.float32), np.zeros((1, 5), np.float32),
                              (1, 1, 4, 4), 1.0, -1, False)
