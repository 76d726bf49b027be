"""What every dataset shares: path checks, image decoding, the corrupt-image policy.

Items are dicts (see DESIGN.md "Data"): `image` HWC uint8 RGB, `label` int, `boxes`
float32 (N, 4) xyxy pixels, `labels` int64 (N,), `keypoints` float32 (N, K, 3), `info`.

With `on_error="skip"` a dataset returns `None` for an item whose image cannot be
decoded; it counts the skip (`dataset.num_skipped`, `dataset.skipped_files`) and warns
once; the DataLoader drops `None` items from the batch and reports the count once per
epoch. With `on_error="raise"` (the default) the error names the file.
"""
import os
import warnings

import cv2
import numpy as np

# the most pixels an image header may claim (Pillow's own refusal is at 2 x 89,478,485);
# TIANYUAN_MAX_IMAGE_PIXELS or set_max_image_pixels(n) change it for both backends
_LIMIT = {"pixels": int(os.environ.get("TIANYUAN_MAX_IMAGE_PIXELS", 178_956_970))}

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")
_JPEG_SOI, _JPEG_EOI = b"\xff\xd8", b"\xff\xd9"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class CorruptImageError(OSError):
    """An image file that cannot be decoded (truncated, corrupt, or not an image)."""


def require_path(path, what, owner):
    """Raise FileNotFoundError naming `path` and what `owner` expected to find there."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{owner}: {path} does not exist; expected {what} there")
    return path


def _check_complete(data, path):
    """Truncated JPEGs and PNGs decode partially in OpenCV without an error; refuse them."""
    if data[:2] == _JPEG_SOI and _JPEG_EOI not in data[-1024:]:
        raise CorruptImageError(f"{path}: truncated JPEG (no end-of-image marker)")
    if data[:8] == _PNG_MAGIC and b"IEND" not in data[-64:]:
        raise CorruptImageError(f"{path}: truncated PNG (no IEND chunk)")


def set_max_image_pixels(pixels):
    """The largest width x height decode_image accepts (both backends); returns the old one.
    Larger headers are refused with CorruptImageError before any pixel is decoded (a 1.9 KB
    JPEG can claim 20000 x 20000: 1.2 GB of junk)."""
    old, _LIMIT["pixels"] = _LIMIT["pixels"], int(pixels)
    return old


def _check_pixels(data, path):
    """Refuse a header claiming more pixels than the limit (read by Pillow without decoding;
    a format Pillow does not know is left to OpenCV's own limit)."""
    import io

    from PIL import Image
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except Image.DecompressionBombError as error:
        raise CorruptImageError(f"{path}: over Pillow's pixel limit ({error})") from None
    except Exception:
        return
    if width * height > _LIMIT["pixels"]:
        raise CorruptImageError(
            f"{path}: the header claims {width} x {height} pixels, over the limit of "
            f"{_LIMIT['pixels']:,} (a decompression bomb?); TIANYUAN_MAX_IMAGE_PIXELS or "
            "tianyuan.datasets.set_max_image_pixels raise it")


def _decode_pillow(data, path):
    """Pillow's decoding made OpenCV's: EXIF orientation applied, 16-bit grey scaled."""
    import io

    from PIL import Image, ImageOps
    try:
        with Image.open(io.BytesIO(data)) as image:
            image = ImageOps.exif_transpose(image)
            if image.mode.startswith("I;16"):  # Pillow's convert clips 16-bit values at 255
                grey = (np.asarray(image).astype(np.uint16) >> 8).astype(np.uint8)
                return np.repeat(grey[..., None], 3, axis=2)
            return np.asarray(image.convert("RGB"))
    except Exception as error:  # Pillow raises many types for bad data
        raise CorruptImageError(f"{path}: cannot decode image ({error})") from error


def decode_image(path, backend="cv2"):
    """Read `path` as HWC uint8 RGB (grey and CMYK converted, 16-bit scaled to 8, a JPEG's
    EXIF orientation applied: the picture as a viewer shows it) with either backend, which
    give the same pixels (a JPEG's within a level). Errors name the file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise CorruptImageError(f"{path}: cannot read image file ({error})") from error
    if not data:
        raise CorruptImageError(f"{path}: empty image file")
    if backend not in ("cv2", "pil"):
        raise ValueError(f"decode_image: backend must be 'cv2' or 'pil', got {backend!r}")
    _check_complete(data, path)
    _check_pixels(data, path)
    if backend == "pil":
        return _decode_pillow(data, path)
    try:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    except cv2.error as error:      # e.g. a header over OpenCV's 2^30-pixel limit
        raise CorruptImageError(f"{path}: cannot decode image ({error})") from error
    if bgr is None:
        # OpenCV lacks some formats (e.g. GIF); Pillow gets a second try.
        return _decode_pillow(data, path)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


class VisionDataset:
    """Base class: root check, `transform`, `on_error` policy, `load_image`."""

    def __init__(self, root, transform=None, on_error="raise", backend="cv2"):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"{type(self).__name__}: on_error must be 'raise' or 'skip', "
                             f"got {on_error!r}")
        self.root = os.fspath(root)
        self.transform = transform
        self.on_error = on_error
        self.backend = backend
        self.num_skipped = 0
        self.skipped_files = []

    def load_image(self, path):
        """The decoded image, or None (counted, warned once) when skipping corrupt files."""
        try:
            return decode_image(path, self.backend)
        except CorruptImageError as error:
            if self.on_error == "raise":
                raise
            self.num_skipped += 1
            if len(self.skipped_files) < 100:
                self.skipped_files.append(path)
            if self.num_skipped == 1:
                warnings.warn(f"{type(self).__name__}: skipping unreadable image ({error}); "
                              "further skips are counted in num_skipped", RuntimeWarning,
                              stacklevel=2)
            return None

    def finish(self, item):
        """Apply the transform (None items, i.e. skipped ones, pass through)."""
        if item is None or self.transform is None:
            return item
        return self.transform(item)


def list_images(folder):
    """Sorted image file names (by extension, case-insensitive) directly in `folder`."""
    return sorted(name for name in os.listdir(folder)
                  if name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith("."))
