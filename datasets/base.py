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
    _check_complete(data, path)
    if backend == "pil":
        return _decode_pillow(data, path)
    if backend != "cv2":
        raise ValueError(f"decode_image: backend must be 'cv2' or 'pil', got {backend!r}")
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
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
