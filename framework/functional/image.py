"""Image preprocessing aligned with OpenCV: resize, affine warp, colour conversion, crop, flip,
normalisation and the HWC <-> NCHW conversions, so that training (the datasets' transforms)
and deployment (a graph's preprocessing) share one implementation.

Images are numpy arrays or Tensors laid out as OpenCV's, "HWC": (H, W), (H, W, C) or a batch
(N, H, W, C), uint8 or float32; each op returns the container it was given. `resize` and
`crop`/`flip` also take layout="NCHW" float Tensors, differentiably. The arithmetic, and how
close it is to cv2's, is specified by the numpy twins: tianyuan/ops/resize_cv_ref.py and
tianyuan/ops/imgproc_ref.py.

>>> import numpy as np, tianyuan.functional as F
>>> bgr = np.zeros((480, 640, 3), np.uint8)
>>> F.resize(bgr, (224, 224)).shape
(224, 224, 3)
>>> F.to_nchw(F.cvt_color(bgr, "bgr2rgb"), mean=(127.5, 127.5, 127.5)).shape
(1, 3, 480, 640)
"""
import numpy as np

from ..ops import imgproc as native
from ..ops.imgproc_ref import BORDERS, COLOR_CODES, invert_affine
from ..ops.resize_cv_ref import MODES
from ..tensor import Tensor

LAYOUTS = ("HWC", "NCHW")


def _unwrap(image, op):
    if isinstance(image, Tensor):
        return image.numpy(), True
    if isinstance(image, np.ndarray):
        return image, False
    raise TypeError(f"{op}: image must be a numpy array or a Tensor, got {type(image).__name__}")


def _wrap(array, tensor):
    return Tensor(array) if tensor else array


def _as_bhwc(x, op):
    """(N, H, W, C) view of an HWC image and a function restoring its own rank."""
    if x.ndim == 2:
        return x[None, :, :, None], lambda y: y[0, :, :, 0]
    if x.ndim == 3:
        return x[None], lambda y: y[0]
    if x.ndim == 4:
        return x, lambda y: y
    raise ValueError(f"{op}: an HWC image is (H, W), (H, W, C) or (N, H, W, C), got {x.shape}")


def _checked_dtype(x, op, allowed=(np.uint8, np.float32)):
    if x.dtype not in allowed:
        names = " or ".join(np.dtype(d).name for d in allowed)
        raise TypeError(f"{op}: image must be {names}, got {x.dtype} (cast it first)")


def _size(size, op):
    if (not isinstance(size, (tuple, list)) or len(size) != 2 or
            not all(isinstance(s, (int, np.integer)) and s >= 1 for s in size)):
        raise ValueError(f"{op}: size must be (height, width) of positive ints, got {size!r}")
    return int(size[0]), int(size[1])


def resize(image, size, mode="bilinear", layout="HWC"):
    """Resize to size = (height, width) as cv2.resize(image, (width, height), interpolation=
    INTER_NEAREST / INTER_LINEAR / INTER_CUBIC / INTER_AREA) for mode "nearest" / "bilinear" /
    "bicubic" / "area" (pixel centres at +0.5; replicated edges).

    uint8 equals cv2's bit for bit on every mode except "bicubic", which equals OpenCV's own
    code and differs by at most 1 from the IPP path pip's cv2 takes; float32 agrees to float
    rounding. layout="NCHW": a float (N, C, H, W) Tensor, differentiable (the gradient is the
    transpose of the same taps)."""
    op = "resize"
    if mode not in MODES:
        raise ValueError(f"{op}: mode must be one of {', '.join(MODES)}, got {mode!r}")
    size = _size(size, op)
    if layout == "NCHW":
        return _resize_nchw(image, size, mode, op)
    if layout != "HWC":
        raise ValueError(f"{op}: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    x, tensor = _unwrap(image, op)
    _checked_dtype(x, op, (np.uint8, np.float32, np.float64))   # float64: by the numpy twin
    bhwc, restore = _as_bhwc(x, op)
    if tensor and image.requires_grad and x.dtype != np.uint8:
        from .math import reshape
        out = native.Resize.apply(reshape(image, bhwc.shape), size=size, mode=mode)
        return out if x.ndim == 4 else reshape(out, size + x.shape[2:])
    return _wrap(restore(native.resize_bhwc(bhwc, size, mode)), tensor)


def _resize_nchw(x, size, mode, op):
    """Each (H, W) plane of a float Tensor resized, with autograd: planes as (N*C, H, W, 1)."""
    from .math import reshape
    if not isinstance(x, Tensor) or x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{op}: layout='NCHW' takes a float Tensor")
    if x.ndim != 4:
        raise ValueError(f"{op}: layout='NCHW' takes (N, C, H, W), got {x.shape}")
    n, c, h, w = x.shape
    out = native.Resize.apply(reshape(x, (n * c, h, w, 1)), size=size, mode=mode)
    return reshape(out, (n, c) + size)


def warp_affine(image, matrix, size, mode="bilinear", border="constant", value=0.0,
                inverse_map=False):
    """cv2.warpAffine(image, matrix, (width, height), flags=INTER_LINEAR / INTER_NEAREST,
    borderMode=BORDER_CONSTANT / BORDER_REPLICATE, borderValue=value): `matrix` (2x3) maps
    source pixel indices to output ones (with `inverse_map`, output to source). Equals
    OpenCV's portable arithmetic bit for bit on 1, 3 and 4 channels; its AVX2 build fuses
    multiply-adds and differs by 1 on about 1e-5 of the pixels (imgproc_ref.py). (cv2 warps
    2-channel uint8 images with an older fixed-point remap: up to a few levels apart.)"""
    op = "warp_affine"
    if mode not in ("nearest", "bilinear"):
        raise ValueError(f"{op}: mode must be 'nearest' or 'bilinear', got {mode!r}")
    if border not in BORDERS:
        raise ValueError(f"{op}: border must be one of {', '.join(BORDERS)}, got {border!r}")
    m = np.asarray(matrix.numpy() if isinstance(matrix, Tensor) else matrix, np.float64)
    if m.shape != (2, 3) or not np.isfinite(m).all():
        raise ValueError(f"{op}: matrix must be a finite 2x3 affine, got shape {m.shape}")
    x, tensor = _unwrap(image, op)
    _checked_dtype(x, op)
    bhwc, restore = _as_bhwc(x, op)
    inverse = m.reshape(6) if inverse_map else invert_affine(m)
    fill = np.broadcast_to(np.asarray(value, np.float64), (bhwc.shape[3],))
    if x.dtype == np.uint8:
        fill = np.clip(np.rint(fill), 0, 255)
    out = native.warp_affine_bhwc(bhwc, inverse, _size(size, op), mode, border, fill)
    return _wrap(restore(out), tensor)


def cvt_color(image, code):
    """cv2.cvtColor with COLOR_<code>: "bgr2rgb", "rgb2bgr", "bgr2gray", "rgb2gray" on HWC
    images (gray keeps no channel axis, as cv2's), and "nv12_to_bgr", "nv12_to_rgb",
    "nv21_to_bgr", "nv21_to_rgb" on a camera's uint8 (H * 3/2, W) YUV 4:2:0 frame (cv2's
    COLOR_YUV2BGR_NV12 ...): bit for bit."""
    op = "cvt_color"
    if code not in COLOR_CODES:
        raise ValueError(f"{op}: code must be one of {', '.join(COLOR_CODES)}, got {code!r}")
    x, tensor = _unwrap(image, op)
    if code.startswith("nv"):
        _checked_dtype(x, op, (np.uint8,))
        frames = x[None] if x.ndim == 2 else x
        if frames.ndim != 3:
            raise ValueError(f"{op}: an NV12/NV21 frame is (H * 3/2, W), got {x.shape}")
        out = native.cvt_color_bhwc(frames, code)
        return _wrap(out[0] if x.ndim == 2 else out, tensor)
    _checked_dtype(x, op)
    if x.ndim < 3 or x.shape[-1] != 3:
        raise ValueError(f"{op}: {code} takes 3-channel HWC images, got {x.shape}")
    bhwc, restore = _as_bhwc(x, op)
    out = native.cvt_color_bhwc(bhwc, code)
    out = restore(out)
    return _wrap(out[..., 0] if code.endswith("gray") else out, tensor)


def crop(image, top, left, height, width, layout="HWC"):
    """image[top:top + height, left:left + width] (HWC; the last two axes with "NCHW"), the
    window inside the image; a Tensor keeps its gradient."""
    op = "crop"
    h_axis = -2 if layout == "NCHW" else (0 if image.ndim <= 3 else 1)
    h, w = image.shape[h_axis], image.shape[h_axis + 1]
    if top < 0 or left < 0 or height < 1 or width < 1 or top + height > h or left + width > w:
        raise ValueError(f"{op}: window (top {top}, left {left}, {height}x{width}) is not "
                         f"inside the {h}x{w} image")
    index = [slice(None)] * image.ndim
    index[h_axis] = slice(top, top + height)
    index[h_axis + 1] = slice(left, left + width)
    return image[tuple(index)]


def flip(image, horizontal=True, layout="HWC"):
    """Mirrored left-right (`horizontal`) or top-bottom (cv2.flip codes 1 / 0)."""
    h_axis = -2 if layout == "NCHW" else (0 if image.ndim <= 3 else 1)
    index = [slice(None)] * image.ndim
    index[h_axis + (1 if horizontal else 0)] = slice(None, None, -1)
    out = image[tuple(index)]
    return np.ascontiguousarray(out) if isinstance(out, np.ndarray) else out


def to_nchw(image, mean=None, std=None, scale=1.0):
    """HWC uint8 / float32 image(s) -> a float32 (N, C, H, W) Tensor, per channel
    (x * scale - mean) / std in one native pass (the model card's normalisation)."""
    op = "to_nchw"
    x, _ = _unwrap(image, op)
    _checked_dtype(x, op)
    bhwc, _ = _as_bhwc(x, op)
    c = bhwc.shape[3]
    mean, std = (None if v is None else [float(t) for t in np.broadcast_to(v, (c,))]
                 for v in (mean, std))
    return Tensor(native.to_chw_bhwc(bhwc, mean, std, scale))


def to_hwc(x, mean=None, std=None, scale=1.0, dtype=np.uint8):
    """The inverse of to_nchw: (N, C, H, W) -> (N, H, W, C) numpy, x * std + mean, / scale;
    uint8 rounded half to even and saturated."""
    data = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
    if data.ndim != 4:
        raise ValueError(f"to_hwc: expected (N, C, H, W), got {data.shape}")
    c = data.shape[1]
    out = data.astype(np.float32)
    if std is not None:
        out = out * np.asarray(np.broadcast_to(std, (c,)), np.float32)[:, None, None]
    if mean is not None:
        out = out + np.asarray(np.broadcast_to(mean, (c,)), np.float32)[:, None, None]
    out = (out / np.float32(scale)).transpose(0, 2, 3, 1)
    if np.dtype(dtype) == np.uint8:
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(out.astype(dtype))


def normalize(x, mean, std, layout="NCHW"):
    """(x - mean) / std per channel: the channel axis 1 ("NCHW", a Tensor keeps its gradient)
    or last ("HWC")."""
    if layout == "HWC":
        data, tensor = _unwrap(x, "normalize")
        out = (data.astype(np.float32) - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
        return _wrap(out.astype(np.float32), tensor)
    shape = (1, -1, 1, 1)
    m = np.asarray(mean, np.float32).reshape(shape)
    s = np.asarray(std, np.float32).reshape(shape)
    if isinstance(x, Tensor):
        return (x - Tensor(m.astype(x.dtype))) / Tensor(s.astype(x.dtype))
    return ((np.asarray(x, np.float32) - m) / s).astype(np.float32)
