"""Collate a list of item dicts into a batch dict of numpy arrays and lists.

Same-shape arrays and numbers are stacked; variable-size fields (boxes, labels,
keypoints of detection items) and dicts (`info`) become lists. `None` items (skipped
unreadable images) are dropped. The trainer turns arrays into tianyuan Tensors.

>>> batch = default_collate([{"image": np.zeros((2, 2, 3), np.uint8), "label": 1}] * 4)
>>> batch["image"].shape, batch["label"].dtype
((4, 2, 2, 3), dtype('int64'))
"""
import numbers

import numpy as np

VARIABLE_FIELDS = ("boxes", "labels", "keypoints", "crowd_boxes")


def _stack_field(values):
    first = values[0]
    if isinstance(first, np.ndarray):
        if all(isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype
               for v in values):
            return np.stack(values)
        return list(values)
    if isinstance(first, (bool, np.bool_)):
        return np.array(values, dtype=bool)
    if isinstance(first, numbers.Integral):
        return np.array(values, dtype=np.int64)
    if isinstance(first, numbers.Real):
        return np.array(values, dtype=np.float32)
    return list(values)


def default_collate(items):
    """Stack every field of dict items; a tuple/list item collates position-wise."""
    items = [item for item in items if item is not None]
    if not items:
        return None
    first = items[0]
    if isinstance(first, dict):
        return {key: _stack_field([item[key] for item in items]) for key in first}
    if isinstance(first, (tuple, list)):
        return type(first)(_stack_field(list(column)) for column in zip(*items))
    return _stack_field(items)


def list_collate(items):
    """A batch dict of per-item lists, nothing stacked: detectors that take a list of images
    of any size (the zoo's, which resize and pad inside) with their boxes and labels."""
    items = [item for item in items if item is not None]
    if not items:
        return None
    return {key: [item[key] for item in items] for key in items[0]}


def _is_chw(image):
    return image.ndim == 3 and image.shape[0] in (1, 3) and image.shape[-1] not in (1, 3)


def pad_images(images, size_divisibility=32, value=0):
    """(B, ...) array of images padded bottom/right to the batch max rounded up to a multiple
    of `size_divisibility`, and their (B, 2) int64 (h, w) sizes before padding."""
    chw = _is_chw(images[0])
    sizes = np.array([im.shape[1:3] if chw else im.shape[:2] for im in images], np.int64)
    height, width = sizes.max(0)
    if size_divisibility > 1:
        height = -(-height // size_divisibility) * size_divisibility
        width = -(-width // size_divisibility) * size_divisibility
    first = images[0]
    shape = (len(images), first.shape[0], height, width) if chw else \
        (len(images), height, width) + first.shape[2:]
    batch = np.full(shape, value, dtype=first.dtype)
    for i, (image, (h, w)) in enumerate(zip(images, sizes)):
        if chw:
            batch[i, :, :h, :w] = image
        else:
            batch[i, :h, :w] = image
    return batch, sizes


def detection_collate(items, size_divisibility=32, pad_value=0):
    """Images padded to a common size (a multiple of 32) and stacked, "image_sizes" (B, 2);
    boxes, labels, keypoints and other variable fields stay per-image lists."""
    items = [item for item in items if item is not None]
    if not items:
        return None
    images, sizes = pad_images([item["image"] for item in items], size_divisibility, pad_value)
    batch = {"image": images, "image_sizes": sizes}
    for key in items[0]:
        if key == "image":
            continue
        values = [item[key] for item in items]
        batch[key] = list(values) if key in VARIABLE_FIELDS else _stack_field(values)
    return batch
