"""Image preprocessing (F.resize, F.warp_affine, F.cvt_color, F.to_nchw ...): the native kernels
against their numpy twins (bit for bit), the twins against OpenCV (cv2) with the same flags on
photo-like images and random ones of odd sizes, scale factors below and above 1, uint8 and
float32; and F.resize's gradient by finite differences.

No photo package is a dependency: `photo` makes a JPEG-decoded scene (smooth colour fields,
shapes, texture) with cv2 itself. uint8 results must equal cv2's on every pixel, except
where the module docstrings say OpenCV's optimised build differs from its portable one
(bicubic under IPP; fused multiply-adds in warpAffine): there, within 1 grey level.
warpAffine of 2-channel images takes OpenCV's older fixed-point remap, not emulated here.
"""
import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan.ops import imgproc_ref as W
from tianyuan.ops import resize_cv_ref as R

from helpers import gradcheck

cv2 = pytest.importorskip("cv2")

INTER = {"nearest": cv2.INTER_NEAREST, "bilinear": cv2.INTER_LINEAR,
         "bicubic": cv2.INTER_CUBIC, "area": cv2.INTER_AREA}
BORDER = {"constant": cv2.BORDER_CONSTANT, "replicate": cv2.BORDER_REPLICATE}


def photo(h, w, seed=0):
    """A photo-like BGR uint8 image: blurred colour blobs, a few shapes, sensor noise, and a
    JPEG round trip (cv2's codec)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (max(2, h // 16), max(2, w // 16), 3)).astype(np.uint8)
    img = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    for _ in range(4):
        centre = (int(rng.integers(0, w)), int(rng.integers(0, h)))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        cv2.circle(img, centre, int(rng.integers(2, max(3, min(h, w) // 3))), colour, -1)
    img = np.clip(img + rng.normal(0, 4, img.shape), 0, 255).astype(np.uint8)
    ok, jpeg = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 85])
    assert ok
    return cv2.imdecode(jpeg, cv2.IMREAD_COLOR)


def random_cases(seed, n=24):
    """(image, (oh, ow)): odd sizes, 1-4 channels, shrink and enlarge, some exact factors."""
    rng = np.random.default_rng(seed)
    for t in range(n):
        h, w = (int(v) for v in rng.integers(1, 48, 2))
        c = (1, 3, 4, 2)[t % 4]
        if t % 6 == 0:
            out = (max(1, h // 2), max(1, w // 2))
        elif t % 6 == 1:
            out = (max(1, h // 3), max(1, w // 3))
        else:
            out = tuple(int(v) for v in rng.integers(1, 80, 2))
        image = rng.integers(0, 256, (h, w, c)).astype(np.uint8)
        yield (image[..., 0] if c == 1 else image), out


def agreement(got, want, tol=0):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = np.abs(got - want)
    return float((diff <= tol).mean()), float(diff.max(initial=0))


# ------------------------------------------------------------------------ native == twin

@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_resize_native_equals_twin(mode, dtype):
    for image, out in random_cases(1, 12):
        image = image.astype(dtype)
        np.testing.assert_array_equal(F.resize(image, out, mode), R.resize_ref(image, out, mode),
                                      err_msg=f"{mode} {image.shape} -> {out}")


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("border", W.BORDERS)
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_warp_native_equals_twin(mode, border, dtype):
    rng = np.random.default_rng(2)
    for image, out in random_cases(2, 8):
        image = image.astype(dtype)
        m = cv2.getRotationMatrix2D((image.shape[1] / 2, image.shape[0] / 2),
                                    float(rng.uniform(-180, 180)), float(rng.uniform(0.5, 2)))
        got = F.warp_affine(image, m, out, mode, border, value=9)
        np.testing.assert_array_equal(got, W.warp_affine_ref(image, m, out, mode, border, 9))


def test_colour_native_equals_twin():
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (2, 5, 7, 3)).astype(np.uint8)
    for code in ("bgr2rgb", "rgb2bgr", "bgr2gray", "rgb2gray"):
        for x in (img, img.astype(np.float32) / 255):
            np.testing.assert_array_equal(F.cvt_color(x, code), W.cvt_color_ref(x, code))
    yuv = rng.integers(0, 256, (9, 8)).astype(np.uint8)
    for code in ("nv12_to_bgr", "nv12_to_rgb", "nv21_to_bgr", "nv21_to_rgb"):
        np.testing.assert_array_equal(F.cvt_color(yuv, code), W.cvt_color_ref(yuv, code))
    mean, std = (1.0, 2.0, 3.0), (0.5, 2.0, 4.0)
    got = F.to_nchw(img, mean, std, scale=1 / 255).numpy()
    want = np.stack([W.to_chw_ref(i, mean, std, 1 / 255) for i in img])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(F.to_hwc(F.to_nchw(img, mean, std), mean, std), img)


# ------------------------------------------------------------------------ twin == OpenCV

@pytest.mark.parametrize("mode", R.MODES)
def test_resize_uint8_equals_opencv(mode):
    cases = list(random_cases(4)) + [(photo(61, 83), (224, 224)), (photo(97, 130), (45, 33))]
    worst = 0.0
    for image, (oh, ow) in cases:
        rate, diff = agreement(F.resize(image, (oh, ow), mode),
                               cv2.resize(image, (ow, oh), interpolation=INTER[mode]))
        if mode != "bicubic":
            assert rate == 1.0, f"{mode} {image.shape} -> {(oh, ow)}: {rate:.4%} equal"
        worst = max(worst, diff)
    assert worst <= 1


def test_bicubic_equals_opencv_portable_code():
    """With IPP off, OpenCV's own bicubic code: equal bit for bit."""
    optimised = cv2.useOptimized()
    cv2.setUseOptimized(False)
    try:
        for image, (oh, ow) in random_cases(5, 12):
            want = cv2.resize(image, (ow, oh), interpolation=cv2.INTER_CUBIC)
            np.testing.assert_array_equal(F.resize(image, (oh, ow), "bicubic"), want)
    finally:
        cv2.setUseOptimized(optimised)


@pytest.mark.parametrize("mode", R.MODES)
def test_resize_float_matches_opencv(mode):
    for image, (oh, ow) in list(random_cases(6, 12)) + [(photo(40, 50), (17, 90))]:
        x = image.astype(np.float32) / 255
        _, diff = agreement(F.resize(x, (oh, ow), mode),
                            cv2.resize(x, (ow, oh), interpolation=INTER[mode]))
        assert diff <= 1e-4, f"{mode} {x.shape} -> {(oh, ow)}: {diff}"


def test_resize_1080p_equals_opencv():
    frame = photo(1080, 1920, seed=7)
    for mode, (oh, ow) in (("bilinear", (224, 224)), ("area", (224, 224)),
                           ("bilinear", (800, 1422)), ("area", (800, 1422))):
        want = cv2.resize(frame, (ow, oh), interpolation=INTER[mode])
        np.testing.assert_array_equal(F.resize(frame, (oh, ow), mode), want, err_msg=mode)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("border", W.BORDERS)
def test_warp_matches_opencv(mode, border):
    rng = np.random.default_rng(8)
    equal = total = 0
    cases = [(i, o) for i, o in random_cases(8, 16) if i.ndim == 2 or i.shape[2] != 2]
    for image, (oh, ow) in cases + [(photo(70, 90), (64, 96))]:
        m = cv2.getRotationMatrix2D((image.shape[1] / 2, image.shape[0] / 2),
                                    float(rng.uniform(-180, 180)), float(rng.uniform(0.5, 2)))
        m[:, 2] += rng.uniform(-4, 4, 2)
        args = dict(flags=INTER[mode], borderMode=BORDER[border], borderValue=(9, 9, 9, 9))
        got = F.warp_affine(image, m, (oh, ow), mode, border, value=9)
        rate, diff = agreement(got, cv2.warpAffine(image, m, (ow, oh), **args))
        assert diff <= 1
        equal, total = equal + rate * got.size, total + got.size
        x = image.astype(np.float32) / 255
        _, fdiff = agreement(F.warp_affine(x, m, (oh, ow), mode, border, value=9),
                             cv2.warpAffine(x, m, (ow, oh), **args))
        assert fdiff <= 1e-4
    assert equal / total > 0.999


def test_colour_equals_opencv():
    bgr = photo(36, 50)
    assert np.array_equal(F.cvt_color(bgr, "bgr2rgb"), cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    assert np.array_equal(F.cvt_color(bgr, "bgr2gray"), cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY))
    assert np.array_equal(F.cvt_color(bgr, "rgb2gray"), cv2.cvtColor(bgr, cv2.COLOR_RGB2GRAY))
    x = bgr.astype(np.float32) / 255
    assert agreement(F.cvt_color(x, "bgr2gray"), cv2.cvtColor(x, cv2.COLOR_BGR2GRAY))[1] < 1e-6
    yuv = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)   # planar -> semi-planar NV12 / NV21
    h, w = bgr.shape[:2]
    u = yuv[h:h + h // 4].reshape(h // 2, w // 2)
    v = yuv[h + h // 4:].reshape(h // 2, w // 2)
    for code, first, second, flag in (("nv12_to_bgr", u, v, cv2.COLOR_YUV2BGR_NV12),
                                      ("nv21_to_rgb", v, u, cv2.COLOR_YUV2RGB_NV21)):
        frame = np.concatenate([yuv[:h], np.stack([first, second], -1).reshape(h // 2, w)])
        assert np.array_equal(F.cvt_color(frame, code), cv2.cvtColor(frame, flag)), code


# ------------------------------------------------------------------------ gradient, API

@pytest.mark.parametrize("mode", ["bilinear", "area", "bicubic"])
@pytest.mark.parametrize("size", [(3, 7), (9, 4)])
def test_resize_gradient(mode, size):
    gradcheck(lambda x: F.resize(x, size, mode, layout="NCHW"),
              [np.random.default_rng(9).standard_normal((1, 2, 5, 6))])


def test_resize_gradient_hwc_tensor():
    gradcheck(lambda x: F.resize(x, (4, 9)), [np.random.default_rng(10).standard_normal((5, 6, 3))])


def test_resize_nchw_float32_equals_hwc_planes():
    x = np.random.default_rng(11).random((2, 3, 13, 17)).astype(np.float32)
    got = F.resize(ty.tensor(x), (7, 30), layout="NCHW").numpy()
    want = np.stack([np.stack([F.resize(p, (7, 30)) for p in img]) for img in x])
    np.testing.assert_array_equal(got, want)


def test_crop_flip():
    img = np.arange(2 * 5 * 6 * 3, dtype=np.uint8).reshape(2, 5, 6, 3)
    assert np.array_equal(F.crop(img[0], 1, 2, 3, 4), img[0, 1:4, 2:6])
    assert np.array_equal(F.flip(img), cv2.flip(img[0], 1)[None].repeat(2, 0) * 0 + img[:, :, ::-1])
    assert np.array_equal(F.flip(img[0], horizontal=False), cv2.flip(img[0], 0))
    x = ty.tensor(img.transpose(0, 3, 1, 2).astype(np.float32), requires_grad=True)
    F.crop(F.flip(x, layout="NCHW"), 0, 0, 2, 2, layout="NCHW").sum().backward()
    assert x.grad.numpy().sum() == 2 * 3 * 4
    with pytest.raises(ValueError, match="not inside"):
        F.crop(img[0], 4, 0, 2, 2)


def test_errors_name_the_op():
    img = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ValueError, match="resize: mode"):
        F.resize(img, (2, 2), "lanczos")
    with pytest.raises(TypeError, match="resize: image must be uint8 or float32 or float64"):
        F.resize(img.astype(np.int16), (2, 2))
    with pytest.raises(ValueError, match="warp_affine: matrix"):
        F.warp_affine(img, np.eye(3), (2, 2))
    with pytest.raises(ValueError, match="cvt_color: code"):
        F.cvt_color(img, "bgr2hsv")
    with pytest.raises(ValueError, match="x taps"):
        ty._C.imgproc_resize(img[None], (2, 2), np.full((2, 2), 9, np.int32),
                             np.zeros((2, 2), np.float32), np.zeros((2, 2), np.int16),
                             np.zeros((2, 2), np.int32), np.zeros((2, 2), np.float32),
                             np.zeros((2, 2), np.int16), 1, 0.0)
