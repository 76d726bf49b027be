"""Heatmaps -> keypoints, flip test, rescoring and OKS-NMS: Xiao et al.'s test-time recipe.

Decoding (`get_final_preds`): each heatmap's argmax, moved a quarter pixel toward its
higher neighbour in x and in y (where the peak is not on the border), then mapped back to
the image through the crop's centre and scale (datasets/keypoint_geometry.py: pixel
indices, as the published weights expect). The flip test averages the heatmaps of the
crop and of its mirror image, the latter mirrored back with left/right channels swapped
and shifted one pixel right (`flip_back` + the shift: the mirrored crop is the plain one
mirrored about w / 2, not (w - 1) / 2). Before COCO's evaluation each person is rescored
by its box score times the mean confidence of its joints above 0.2, and persons of one
image whose OKS with a higher-scored one exceeds 0.9 are dropped (`oks_nms`).

>>> heatmaps = flip_test(lambda x: model(ty.tensor(x)), images, COCO_FLIP_PAIRS)  # doctest: +SKIP
>>> coords, maxvals = get_final_preds(heatmaps, batch["center"], batch["scale"])  # doctest: +SKIP
"""
import numpy as np

from tianyuan.datasets.keypoint_geometry import heatmap_to_image

# COCO's per-joint OKS constants (pycocotools' kpt_oks_sigmas)
COCO_SIGMAS = np.array([.26, .25, .25, .35, .35, .79, .79, .72, .72, .62, .62, 1.07, 1.07,
                        .87, .87, .89, .89]) / 10.0


def as_heatmaps(outputs):
    """(N, K, h, w) float32 numpy of a model's output: a Tensor or array, or a list of stage
    outputs (MSPN: the last, finest stage is decoded)."""
    if isinstance(outputs, (list, tuple)):
        outputs = outputs[-1]
    array = outputs.numpy() if hasattr(outputs, "numpy") else np.asarray(outputs)
    if array.ndim != 4:
        raise ValueError(f"keypoints: heatmaps must be (N, K, h, w), got shape {array.shape}")
    return array.astype(np.float32, copy=False)


def get_max_preds(heatmaps):
    """(coords (N, K, 2) float32 x, y of each heatmap's argmax -- 0 where the max is not
    positive --, maxvals (N, K, 1))."""
    heatmaps = np.asarray(heatmaps, np.float32)
    n, k, _, width = heatmaps.shape
    flat = heatmaps.reshape(n, k, -1)
    index = flat.argmax(2)
    maxvals = flat.max(2)[..., None]                                    # (N, K, 1)
    coords = np.stack([index % width, index // width], 2).astype(np.float32)
    return coords * (maxvals > 0), maxvals


def get_final_preds(heatmaps, center, scale, post_process=True):
    """(coords (N, K, 2) in image pixels, maxvals (N, K, 1)) of heatmaps (N, K, h, w) of
    crops with centres (N, 2) and scales (N, 2) (the crop window's w, h in pixels)."""
    heatmaps = as_heatmaps(heatmaps)
    coords, maxvals = get_max_preds(heatmaps)
    height, width = heatmaps.shape[2:]
    if post_process:
        px = np.floor(coords[..., 0] + 0.5).astype(np.int64)
        py = np.floor(coords[..., 1] + 0.5).astype(np.int64)
        inner = (px > 1) & (px < width - 1) & (py > 1) & (py < height - 1)    # the reference's
        n, k = np.nonzero(inner)
        x, y = px[n, k], py[n, k]
        dx = heatmaps[n, k, y, x + 1] - heatmaps[n, k, y, x - 1]
        dy = heatmaps[n, k, y + 1, x] - heatmaps[n, k, y - 1, x]
        coords[n, k] += np.sign(np.stack([dx, dy], 1)) * 0.25
    preds = heatmap_to_image(coords, center, scale, (width, height))
    return preds.astype(np.float32), maxvals


def flip_back(heatmaps, flip_pairs):
    """Heatmaps (N, K, h, w) of mirrored crops mirrored back, each left/right pair swapped."""
    out = np.asarray(heatmaps)[..., ::-1].copy()
    for left, right in flip_pairs:
        out[:, [left, right]] = out[:, [right, left]]
    return out


def flip_test(forward, images, flip_pairs, shift=True):
    """(N, K, h, w): the mean of forward(images) and flip_back(forward(mirrored images)),
    the latter shifted one pixel right (`shift`, the references' SHIFT_HEATMAP).
    `forward` maps (N, 3, H, W) numpy images to heatmaps (Tensor, array or stage list)."""
    images = np.asarray(images)
    plain = as_heatmaps(forward(images))
    mirrored = flip_back(as_heatmaps(forward(np.ascontiguousarray(images[..., ::-1]))),
                         flip_pairs)
    if shift:
        mirrored[..., 1:] = mirrored[..., :-1].copy()
    return (plain + mirrored) * 0.5


def rescore(keypoints, box_score, threshold=0.2):
    """The box score times the mean confidence of the joints above `threshold` (0 with none)
    of one person's keypoints (K, 3)."""
    confidence = np.asarray(keypoints, np.float64)[:, 2]
    above = confidence[confidence > threshold]
    return float(box_score) * (float(above.mean()) if above.size else 0.0)


def oks_iou(g, d, area_g, area_d, sigmas=None, threshold=None):
    """OKS of one person's keypoints g (K, 3) with each of d (M, K, 3), the scale the mean
    of their areas; `threshold`: only joints confident above it in d count (the
    reference's `list(vg > t) and list(vd > t)`, which is d's list)."""
    sigmas = COCO_SIGMAS if sigmas is None else np.asarray(sigmas, np.float64)
    variances = (sigmas * 2) ** 2
    g, d = np.asarray(g, np.float64), np.asarray(d, np.float64).reshape(-1, *np.shape(g))
    squared = ((d[..., :2] - g[None, :, :2]) ** 2).sum(-1)              # (M, K)
    area = (area_g + np.asarray(area_d, np.float64))[:, None] / 2 + np.spacing(1)
    e = squared / variances / area / 2
    counted = np.ones_like(e, bool) if threshold is None else d[..., 2] > threshold
    total = (np.exp(-e) * counted).sum(1)
    number = counted.sum(1)
    return np.where(number > 0, total / np.maximum(number, 1), 0.0)


def oks_nms(keypoints, scores, areas, threshold=0.9, sigmas=None, vis_threshold=None):
    """Indices kept of one image's persons (keypoints (M, K, 3), scores (M,), areas (M,)),
    highest score first: each drops the rest whose OKS with it exceeds `threshold`."""
    keypoints = np.asarray(keypoints, np.float64)
    areas = np.asarray(areas, np.float64)
    order = np.asarray(scores, np.float64).argsort()[::-1]
    keep = []
    while order.size > 0:
        i = order[0]
        keep.append(int(i))
        overlap = oks_iou(keypoints[i], keypoints[order[1:]], areas[i], areas[order[1:]],
                          sigmas, vis_threshold)
        order = order[1:][overlap <= threshold]
    return keep


def megengine_preds(heatmaps, center, scale, input_width, heat_range=1.0, border=10,
                    kernel=17):
    """(coords (N, K, 2) in image pixels, scores (N, K, 1)) as MegEngine Models'
    official/vision/keypoints/test.py decodes (what its published SimpleBaseline and MSPN
    numbers use): each heatmap padded by `border` and blurred (`kernel`), the argmax moved
    towards the next maxima ("second_value_aug", kept as written there: its first zeroing
    lands `border` pixels off, so the 0.35 step falls on the peak itself and only the 0.15
    and 0.05 steps move), heatmap pixel u -> input pixel (u + 0.5) * stride - 0.5; the score
    is the heatmap / heat_range + 1 at the rounded position (the zoo's models already divide
    their output by the file's heat range of 255: heat_range 1 here)."""
    import cv2
    heatmaps = as_heatmaps(heatmaps)
    n, k, height, width = heatmaps.shape
    stride = input_width / width
    coords = np.zeros((n, k, 2), np.float64)
    scores = np.zeros((n, k, 1), np.float64)
    for i in range(n):
        for j in range(k):
            padded = np.zeros((height + 2 * border, width + 2 * border), np.float32)
            padded[border:-border, border:-border] = heatmaps[i, j]
            padded = cv2.GaussianBlur(padded, (kernel, kernel), 0)
            y, x = np.unravel_index(padded.argmax(), padded.shape)
            y, x = float(y - border), float(x - border)
            padded[int(y), int(x)] = 0
            for delta in (0.35, 0.15, 0.05):
                py, px = np.unravel_index(padded.argmax(), padded.shape)
                padded[py, px] = 0
                dy, dx = py - border - y, px - border - x
                length = (dx ** 2 + dy ** 2) ** 0.5
                if length > 1e-3:
                    x, y = x + delta * dx / length, y + delta * dy / length
            x, y = min(max(x, 0.0), width - 1.0), min(max(y, 0.0), height - 1.0)
            scores[i, j, 0] = heatmaps[i, j, int(round(y)), int(round(x))] / heat_range + 1
            coords[i, j] = ((x + 0.5) * stride - 0.5) / stride, ((y + 0.5) * stride - 0.5) / stride
    preds = heatmap_to_image(coords, center, scale, (width, height))
    return preds.astype(np.float32), scores.astype(np.float32)
