"""Folders of images for FID: which files are read, and how they become batches.

pytorch-fid reads the files of one folder (not its sub-folders) whose extension is one of
IMAGE_EXTENSIONS, sorted; it opens each with PIL and converts it to RGB (a grey image
becomes R = G = B, a palette is expanded, alpha is dropped) and hands the pixels unresized
to the network, which resizes each batch to 299 x 299. So do these, with two differences:

- extensions match in any case (pytorch-fid's glob is case-sensitive, so it silently skips
  `.PNG` and `.JPG` files);
- a folder of images of several sizes is read in runs of one size, so each image is resized
  from its own size, as pytorch-fid does at batch size 1 (at a larger one its DataLoader
  cannot stack them and it fails); a FIDWarning says so.

>>> files = list_images("samples/")
>>> next(folder_batches(files, 50)).shape      # uint8 (n, 3, H, W)
(50, 3, 32, 32)
"""
import os
import warnings

import numpy as np
from PIL import Image

class FIDWarning(UserWarning):
    """An FID that is computed but should be read with care (rank-deficient covariance,
    images of several sizes)."""


IMAGE_EXTENSIONS = ("bmp", "jpg", "jpeg", "pgm", "png", "ppm", "tif", "tiff", "webp")


def list_images(folder, n=None):
    """The image files directly in `folder`, sorted; the first `n` if given."""
    folder = os.fspath(folder)
    if not os.path.exists(folder):
        raise FileNotFoundError(f"{folder}: no such folder")
    if not os.path.isdir(folder):
        raise ValueError(f"{folder}: neither a folder of images nor an .npz statistics file")
    files = sorted(os.path.join(folder, name) for name in os.listdir(folder)
                   if name.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS
                   and os.path.isfile(os.path.join(folder, name)))
    if not files:
        raise ValueError(f"{folder}: no images ({', '.join(IMAGE_EXTENSIONS)}) in this folder "
                         "(sub-folders are not read)")
    if n is not None:
        if n < 1 or n > len(files):
            raise ValueError(f"{folder}: n={n}, but the folder holds {len(files)} images")
        files = files[:n]
    return files


def read_rgb(path):
    """uint8 (3, H, W) of an image file, through PIL's convert("RGB") as pytorch-fid."""
    try:
        with Image.open(path) as image:
            rgb = np.asarray(image.convert("RGB"), np.uint8)     # (H, W, 3)
    except OSError as error:   # PIL.UnidentifiedImageError is an OSError
        raise ValueError(f"{path}: not a readable image ({error})") from None
    return np.ascontiguousarray(rgb.transpose(2, 0, 1))


def folder_batches(files, batch_size=50):
    """uint8 batches (n <= batch_size, 3, H, W) of consecutive files of one size."""
    batch, first, warned = [], None, False
    for path in files:
        image = read_rgb(path)
        first = image.shape if first is None else first
        if image.shape != first and not warned:
            warnings.warn(f"{os.path.dirname(path) or '.'}: images of several sizes ({first[1:]}"
                          f", {image.shape[1:]}, ...): each is resized to 299 x 299 from its own "
                          "size, as pytorch-fid does at batch size 1", FIDWarning, stacklevel=2)
            warned = True
        if batch and image.shape != batch[0].shape:
            yield np.stack(batch)
            batch = []
        batch.append(image)
        if len(batch) == batch_size:
            yield np.stack(batch)
            batch = []
    if batch:
        yield np.stack(batch)
