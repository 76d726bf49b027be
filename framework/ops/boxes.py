"""Box primitives for detection, in numpy: the spec a native kernel is tested against.

Boxes are (N, 4) `x1, y1, x2, y2` in pixels, float32 or float64; every function computes in
the boxes' dtype with torchvision's expressions in torchvision's order (torchvision.ops.boxes
and its CPU NMS kernel), so float32 results are bit-equal to torchvision's. None of these
needs a gradient: they act on anchors, targets and detached detections.

NMS is greedy, as torchvision's: boxes by decreasing score (stable: ties keep their input
order); a box is dropped when its IoU with a kept box of higher score exceeds the threshold
(strictly). Two scans give that answer with few numpy calls. The sparse one finds the pairs
that can pass the threshold (a sweep over x1, pruned by the overlap IoU > t needs in x and
in y), computes their IoU, and walks the boxes with an edge in score order. Where the x sweep
finds more than an eighth of all pairs, the blocked one runs NMS_BLOCK ranked boxes at a
time: a greedy walk over the block's (B, B) IoU matrix, then the block's kept boxes drop
every later box they overlap at once (dense sets lose most boxes in the first blocks).

>>> b = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]], np.float32)
>>> nms(b, np.array([0.9, 0.8, 0.7], np.float32), 0.5)
array([0, 2])
"""
import numpy as np

# sorted boxes per NMS block: a (B, B) IoU matrix and B steps of the greedy scan per block
NMS_BLOCK = 256
# torchvision's CPU batched_nms: per class above this many coordinates, else one NMS over
# boxes offset per class
BATCHED_NMS_PER_CLASS_ABOVE = 4000


def box_area(boxes):
    """(N,) areas of (N, 4) boxes."""
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_iou(boxes1, boxes2):
    """(N, M) intersection over union of (N, 4) and (M, 4) boxes (torchvision's box_iou)."""
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = np.maximum(boxes1[:, None, :2], boxes2[None, :, :2])    # (N, M, 2)
    rb = np.minimum(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = np.maximum(rb - lt, np.zeros((), boxes1.dtype))
    inter = wh[:, :, 0] * wh[:, :, 1]
    with np.errstate(divide="ignore", invalid="ignore"):   # two empty boxes: NaN, as torch
        return inter / (area1[:, None] + area2[None, :] - inter)


def nms(boxes, scores, iou_threshold):
    """Indices (int64) of the boxes kept, by decreasing score."""
    n = boxes.shape[0]
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(-scores, kind="stable")
    # four contiguous (N,) coordinate columns by decreasing score, and their areas
    cols = tuple(np.ascontiguousarray(boxes[order, k]) for k in range(4))
    areas = (cols[2] - cols[0]) * (cols[3] - cols[1])
    pairs = (None if iou_threshold < 0 else
             _overlap_pairs(cols, iou_threshold, sweep_max_pairs(n)))
    if pairs is None:
        suppressed = _nms_blocks(cols, areas, iou_threshold)
    else:
        suppressed = _nms_sparse(cols, areas, pairs, iou_threshold)
    return order[~suppressed].astype(np.int64)


def sweep_max_pairs(n):
    """The sparse scan while the pairs overlapping in x number at most an eighth of all
    pairs; denser sets lose most boxes early, which the blocked scan exploits."""
    return max(n * (n - 1) // 16, 1 << 16)


def _overlap_pairs(cols, iou_threshold, limit):
    """(i, j) rank pairs that can have an IoU above the threshold (a sweep over x1), or None
    above `limit` pairs or for boxes with a negative side.

    IoU > t needs the x-overlap to exceed t * max(w_i, w_j) (inter <= overlap * min(h_i, h_j)
    and union >= max(area_i, area_j)); for q after p in x1 order the overlap is at most
    x2_p - x1_q, so only x1_q < x2_p - t * w_p pairs up (less a relative 1e-4 of t * w_p: a
    margin far wider than float32 rounding, so no suppressing pair is missed)."""
    x1, x2 = cols[0], cols[2]
    n = x1.shape[0]
    widths = x2 - x1
    if (widths < 0).any() or (cols[3] < cols[1]).any():
        return None
    by_x = np.argsort(x1, kind="stable").astype(np.int32)
    first = np.arange(1, n + 1, dtype=np.int32)
    reach = x2[by_x].astype(np.float64) - widths[by_x] * (iou_threshold * (1 - 1e-4))
    ends = np.searchsorted(x1[by_x], reach, side="left").astype(np.int32)
    counts = np.maximum(ends - first, 0)
    total = int(counts.sum(dtype=np.int64))
    if total > limit:
        return None
    rows = np.repeat(np.arange(n, dtype=np.int32), counts)
    shift = np.repeat(first - (np.cumsum(counts, dtype=np.int32) - counts), counts)
    return by_x[rows], by_x[np.arange(total, dtype=np.int32) + shift]


def _nms_sparse(cols, areas, pairs, iou_threshold):
    """Greedy scan over the pairs whose IoU exceeds the threshold (IoU is symmetric)."""
    suppressed = np.zeros(areas.shape[0], bool)
    i, j = _tall_overlaps(cols, iou_threshold, *pairs)
    over = _iou_of_pairs(cols, areas, i, j) > iou_threshold
    i, j = i[over], j[over]
    high, low = np.minimum(i, j), np.maximum(i, j)
    by_high = np.argsort(high, kind="stable")
    high, low = high[by_high], low[by_high]
    heads, starts = np.unique(high, return_index=True)
    stops = np.append(starts[1:], high.size)
    for head, start, stop in zip(heads.tolist(), starts.tolist(), stops.tolist()):
        if not suppressed[head]:
            suppressed[low[start:stop]] = True
    return suppressed


def _tall_overlaps(cols, iou_threshold, i, j):
    """The pairs whose y-overlap exceeds t * max(h_i, h_j) (with _overlap_pairs' margin):
    the rest cannot have an IoU above t."""
    y1, y2 = cols[1], cols[3]
    y1i, y2i, y1j, y2j = y1[i], y2[i], y1[j], y2[j]
    overlap = np.minimum(y2i, y2j) - np.maximum(y1i, y1j)
    tall = np.maximum(y2i - y1i, y2j - y1j) * np.float32(iou_threshold * (1 - 1e-4))
    keep = overlap >= tall
    return i[keep], j[keep]


def _iou_of_pairs(cols, areas, i, j):
    x1, y1, x2, y2 = cols
    zero = np.zeros((), x1.dtype)
    w = np.maximum(zero, np.minimum(x2[i], x2[j]) - np.maximum(x1[i], x1[j]))
    h = np.maximum(zero, np.minimum(y2[i], y2[j]) - np.maximum(y1[i], y1[j]))
    inter = w * h
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (areas[i] + areas[j] - inter)


def _pairwise_iou(cols, areas, a, b):
    """(len(a), len(b)) IoU of the ranked boxes `a` with `b` (index arrays or slices)."""
    x1, y1, x2, y2 = cols
    zero = np.zeros((), x1.dtype)
    w = np.maximum(zero, np.minimum(x2[a][:, None], x2[b]) - np.maximum(x1[a][:, None], x1[b]))
    h = np.maximum(zero, np.minimum(y2[a][:, None], y2[b]) - np.maximum(y1[a][:, None], y1[b]))
    inter = w * h
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (areas[a][:, None] + areas[b] - inter)


def _nms_blocks(cols, areas, iou_threshold):
    """Greedy scan a block of ranked boxes at a time; the block's kept boxes then drop the
    later ones they overlap. Returns the suppressed mask."""
    n = areas.shape[0]
    suppressed = np.zeros(n, bool)
    for start in range(0, n, NMS_BLOCK):
        stop = min(start + NMS_BLOCK, n)
        block = slice(start, stop)
        over = _pairwise_iou(cols, areas, block, block) > iou_threshold
        scan = suppressed[block]          # a view: the scan writes through
        for i in range(stop - start):
            if not scan[i]:
                scan[i + 1:] |= over[i, i + 1:]
        kept = start + np.flatnonzero(~scan)
        alive = stop + np.flatnonzero(~suppressed[stop:])
        if kept.size and alive.size:
            over = _pairwise_iou(cols, areas, kept, alive) > iou_threshold
            suppressed[alive[over.any(axis=0)]] = True
    return suppressed


def batched_nms(boxes, scores, idxs, iou_threshold):
    """NMS within each category `idxs` (N,): indices kept, by decreasing score.

    As torchvision's CPU batched_nms: up to BATCHED_NMS_PER_CLASS_ABOVE coordinates, one NMS
    over boxes shifted by idx * (max coordinate + 1), so that boxes of different categories
    never overlap; above, one NMS per category, merged by score."""
    if boxes.shape[0] == 0:
        return np.zeros(0, np.int64)
    if boxes.size > BATCHED_NMS_PER_CLASS_ABOVE:
        return _batched_nms_per_class(boxes, scores, idxs, iou_threshold)
    offsets = idxs.astype(boxes.dtype) * (boxes.max() + np.ones((), boxes.dtype))
    return nms(boxes + offsets[:, None], scores, iou_threshold)


def _batched_nms_per_class(boxes, scores, idxs, iou_threshold):
    keep = np.zeros(boxes.shape[0], bool)
    for idx in np.unique(idxs):
        members = np.flatnonzero(idxs == idx)
        keep[members[nms(boxes[members], scores[members], iou_threshold)]] = True
    kept = np.flatnonzero(keep)
    return kept[np.argsort(-scores[kept], kind="stable")].astype(np.int64)


def clip_boxes(boxes, size):
    """Boxes clamped into an image of `size` (height, width): x to [0, w], y to [0, h]."""
    height, width = size
    out = np.empty_like(boxes)
    out[..., 0::2] = np.clip(boxes[..., 0::2], 0, width)
    out[..., 1::2] = np.clip(boxes[..., 1::2], 0, height)
    return out


def remove_small_boxes(boxes, min_size):
    """Indices (int64) of the boxes at least `min_size` wide and high."""
    ws, hs = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    return np.flatnonzero((ws >= min_size) & (hs >= min_size)).astype(np.int64)
