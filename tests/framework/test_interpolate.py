import math

import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn
from helpers import check_op, gradcheck


def _source(dst, n, o, align_corners, scale):
    """PyTorch's area_pixel_compute_source_index, written out per pixel (float64)."""
    if align_corners:
        return dst * (n - 1) / (o - 1) if o > 1 else 0.0
    step = 1.0 / scale if scale else n / o
    return max((dst + 0.5) * step - 0.5, 0.0)


def bilinear_ref(x, out, align_corners=False, scales=(None, None)):
    n, c, h, w = x.shape
    res = np.zeros((n, c) + tuple(out), x.dtype)
    for y in range(out[0]):
        sy = _source(y, h, out[0], align_corners, scales[0])
        y0 = int(sy)
        y1, ly = min(y0 + 1, h - 1), sy - y0
        for z in range(out[1]):
            sz = _source(z, w, out[1], align_corners, scales[1])
            z0 = int(sz)
            z1, lz = min(z0 + 1, w - 1), sz - z0
            top = (1 - lz) * x[:, :, y0, z0] + lz * x[:, :, y0, z1]
            bottom = (1 - lz) * x[:, :, y1, z0] + lz * x[:, :, y1, z1]
            res[:, :, y, z] = (1 - ly) * top + ly * bottom
    return res


def nearest_ref(x, out, scales=(None, None)):
    n, c, h, w = x.shape
    rows = [min(math.floor(y * (1 / scales[0] if scales[0] else h / out[0])), h - 1)
            for y in range(out[0])]
    cols = [min(math.floor(z * (1 / scales[1] if scales[1] else w / out[1])), w - 1)
            for z in range(out[1])]
    return x[:, :, rows][:, :, :, cols]


def test_known_values():
    x = ty.tensor(np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4))
    np.testing.assert_array_equal(F.interpolate(x, size=(1, 6)).numpy().ravel(), [0, 0, 1, 2, 2, 3])
    x = ty.tensor(np.array([[[[0.0, 1.0]]]], np.float32))
    up = F.interpolate(x, size=(1, 4), mode="bilinear")
    np.testing.assert_allclose(up.numpy().ravel(), [0, 0.25, 0.75, 1])
    up = F.interpolate(x, size=(1, 4), mode="bilinear", align_corners=True)
    np.testing.assert_allclose(up.numpy().ravel(), [0, 1 / 3, 2 / 3, 1], rtol=1e-6)
    exact = F.interpolate(ty.tensor(np.arange(3.0, dtype=np.float32).reshape(1, 1, 1, 3)),
                          size=(1, 2), mode="nearest-exact")
    np.testing.assert_array_equal(exact.numpy().ravel(), [0, 2])


# shape, size, scale_factor
RESIZES = [
    ((1, 2, 3, 4), (6, 8), None),
    ((2, 1, 5, 4), (3, 7), None),
    ((1, 2, 4, 3), None, 2),
    ((1, 1, 4, 5), None, (2.5, 0.6)),
    ((1, 1, 1, 1), (3, 2), None),
    ((1, 2, 4, 4), (4, 2), None),
]


@pytest.mark.parametrize("shape,size,scale", RESIZES)
def test_nearest(shape, size, scale):
    scales = (scale, scale) if isinstance(scale, (int, float)) else (scale or (None, None))
    out = size or tuple(int(math.floor(n * s)) for n, s in zip(shape[2:], scales))
    check_op(lambda x: F.interpolate(x, size, scale), lambda x: nearest_ref(x, out, scales),
             [shape])


@pytest.mark.parametrize("shape,size,scale", RESIZES)
@pytest.mark.parametrize("align_corners", [False, True])
def test_bilinear(shape, size, scale, align_corners):
    scales = (scale, scale) if isinstance(scale, (int, float)) else (scale or (None, None))
    out = size or tuple(int(math.floor(n * s)) for n, s in zip(shape[2:], scales))
    check_op(lambda x: F.interpolate(x, size, scale, "bilinear", align_corners),
             lambda x: bilinear_ref(x, out, align_corners, scales), [shape], fwd_atol=1e-5)


def test_same_size_is_identity():
    x = ty.randn(1, 2, 3, 3)
    np.testing.assert_array_equal(F.interpolate(x, size=3, mode="bilinear").numpy(), x.numpy())


def test_interpolate_errors():
    x = ty.randn(1, 2, 4, 4)
    with pytest.raises(ValueError, match="interpolate: give exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="interpolate: give exactly one"):
        F.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(ValueError, match="interpolate: align_corners can only be set"):
        F.interpolate(x, size=2, align_corners=True)
    with pytest.raises(ValueError, match="interpolate: mode must be one of"):
        F.interpolate(x, size=2, mode="bicubic")
    with pytest.raises(ValueError, match="interpolate: scale_factor 0.1 gives an empty output"):
        F.interpolate(x, scale_factor=0.1)


def test_channel_shuffle():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 2, 3))
    ref = x.reshape(2, 3, 2, 2, 3).transpose(0, 2, 1, 3, 4).reshape(2, 6, 2, 3)
    np.testing.assert_array_equal(F.channel_shuffle(ty.tensor(x), 3).numpy(), ref)
    gradcheck(lambda t: F.channel_shuffle(t, 2), [x])
    with pytest.raises(ValueError, match="channel_shuffle: groups=4 must be a positive int"):
        F.channel_shuffle(ty.tensor(x), 4)


@pytest.mark.parametrize("parts", [2, 3])
def test_concat_shuffle_is_channel_shuffle_of_concat(parts):
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((2, 3, 4, 5)) for _ in range(parts)]
    want = F.channel_shuffle(F.concat([ty.tensor(x) for x in xs], 1), parts).numpy()
    got = F.concat_shuffle([ty.tensor(x) for x in xs]).numpy()
    np.testing.assert_array_equal(got, want)
    gradcheck(lambda *ts: F.concat_shuffle(list(ts)), xs)
    a, b = xs[:2]
    with pytest.raises(ValueError, match=r"concat_shuffle: the parts must have one shape"):
        F.concat_shuffle([ty.tensor(a), ty.tensor(b[:, :2])])
    with pytest.raises(ValueError, match="Concat: shuffle interleaves channels"):
        nn.Concat(axis=0, shuffle=True)


@pytest.mark.parametrize("size, scale, mode", [((8, 10), None, "nearest"), (None, 2, "nearest"),
                                               ((5, 7), None, "nearest-exact"),
                                               ((3, 3), None, "nearest")])
def test_nearest_on_int8_gathers_the_values_with_their_scale(size, scale, mode):
    # an FPN's top-down path on int8: the same pixels as float, scale and zero point kept
    from tianyuan import quantization as Q
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5)).astype(np.float32)
    q = Q.quantized_tensor(x, 0.05, 128, np.uint8)
    got = F.interpolate(q, size=size, scale_factor=scale, mode=mode)
    want = F.interpolate(Q.dequantize_tensor(q), size=size, scale_factor=scale, mode=mode)
    assert Q.is_quantized(got) and got.data.scale == q.data.scale and got.data.zero_point == 128
    np.testing.assert_array_equal(Q.dequantize_tensor(got).numpy(), want.numpy())
    with pytest.raises(ValueError, match="align_corners can only be set with mode='bilinear'"):
        F.interpolate(q, size=(8, 10), mode="nearest", align_corners=False)
