"""Top-down pose geometry in the references' pixel-index convention: person box -> centre and
scale, the crop's affine, half-body boxes, Gaussian heatmap targets.

Why a second convention next to transforms/keypoints.py (continuous coordinates): the
published SimpleBaseline, HRNet and MSPN weights were trained with joints at COCO's pixel
indices, a crop that maps the box centre to (w / 2, h / 2) in output indices, and a heatmap
whose pixel j stands for input pixel stride * j (Xiao et al.'s `generate_target` and
`transform_preds`). A network trained that way puts its peaks there, so decoding its
heatmaps in another convention shifts every joint by 1.5 input pixels (Huang et al. 2020,
"The Devil is in the Details", UDP). Here the data and evaluation/keypoints.py both keep
the references' convention, so our models and the published ones decode alike.

`scale` is the crop window's (w, h) in image pixels: the references' `scale * 200`.

>>> center, scale = box_to_center_scale([10, 20, 30, 60], aspect=192 / 256)
>>> center.tolist(), scale.tolist()
([25.0, 50.0], [56.25, 75.0])
"""
import numpy as np

from .transforms.keypoints import COCO_LOWER_BODY, COCO_UPPER_BODY, crop_matrix

def clean_box(bbox, width, height):
    """COCO `[x, y, w, h]` clipped to the image as Xiao et al.'s loader does (pixel-index
    corners: x2 = x1 + w - 1, clipped to the last pixel), or None when nothing of it is
    inside (a box outside the image)."""
    x, y, w, h = (float(v) for v in bbox)
    x1, y1 = max(0.0, x), max(0.0, y)
    x2 = min(width - 1.0, x1 + max(0.0, w - 1.0))
    y2 = min(height - 1.0, y1 + max(0.0, h - 1.0))
    if w * h <= 0 or x2 < x1 or y2 < y1:
        return None
    return np.array([x1, y1, x2 - x1, y2 - y1], np.float64)


def box_to_center_scale(bbox, aspect, padding=1.25, aspect_fix=True):
    """(center (2,), scale (2,) = crop (w, h) in pixels) of an [x, y, w, h] box: grown to the
    input's aspect w / h (unless not `aspect_fix`), times `padding`."""
    x, y, w, h = (float(v) for v in bbox)
    center = np.array([x + w * 0.5, y + h * 0.5], np.float32)
    if aspect_fix and w > aspect * h:
        h = w / aspect
    elif aspect_fix and w < aspect * h:
        w = h * aspect
    return center, np.array([w * padding, h * padding], np.float32)


def crop_affine(center, scale, rotation, out_w, out_h, flip_width=None):
    """2x3 map of image pixel indices onto the out_w x out_h crop (cv2.warpAffine's matrix):
    the `scale` window around `center`, rotated `rotation` degrees. `flip_width`: the image
    is mirrored first (x -> flip_width - 1 - x; give the mirrored centre)."""
    matrix = crop_matrix(np.asarray(center, np.float64), np.asarray(scale, np.float64),
                         rotation, out_w, out_h)
    if flip_width is not None:
        mirror = np.array([[-1.0, 0.0, flip_width - 1.0], [0.0, 1.0, 0.0], [0, 0, 1]])
        matrix = (np.vstack([matrix, [0, 0, 1]]) @ mirror)[:2]
    return matrix


def affine_points(matrix, points):
    """(..., 2) points through a 2x3 matrix."""
    points = np.asarray(points, np.float64)
    return points @ matrix[:, :2].T + matrix[:, 2]


def heatmap_to_image(coords, center, scale, heatmap_size):
    """(N, K, 2) heatmap coordinates -> image pixels through each crop's (N, 2) center and
    scale (the references' transform_preds at rotation 0); heatmap_size (w, h)."""
    size = np.asarray(heatmap_size, np.float64)
    scale = np.asarray(scale, np.float64)[:, None, :]
    center = np.asarray(center, np.float64)[:, None, :]
    return np.asarray(coords, np.float64) * scale / size + center - scale * 0.5


def half_body_box(joints, visible, rng, aspect, upper=COCO_UPPER_BODY, expand=1.5):
    """(center, scale) around the upper or the lower body's labelled joints (Wang et al.'s
    HRNet half-body augmentation: upper chosen when randn < 0.5 and it has more than 2
    joints; centre the joints' mean; extent times `expand`), or None with fewer than 2."""
    upper_ids = [j for j in range(len(joints)) if visible[j] and j in upper]
    lower_ids = [j for j in range(len(joints)) if visible[j] and j not in upper]
    if rng.normal() < 0.5 and len(upper_ids) > 2:
        chosen = upper_ids
    else:
        chosen = lower_ids if len(lower_ids) > 2 else upper_ids
    if len(chosen) < 2:
        return None
    points = np.asarray(joints, np.float64)[chosen, :2]
    center = points.mean(0)
    w, h = points.max(0) - points.min(0)
    if w > aspect * h:
        h = w / aspect
    elif w < aspect * h:
        w = h * aspect
    return center.astype(np.float32), np.array([w * expand, h * expand], np.float32)


def render_heatmaps(joints, weight, input_size, heatmap_size, sigma=2.0):
    """(K, h, w) float32 unnormalised Gaussians (peak 1) and (K,) float32 weights for joints
    (K, 2) in input-crop pixels: Xiao et al.'s generate_target. The peak sits at the joint's
    heatmap pixel int(x / stride + 0.5), cut at 3 sigma; a joint whose cut-out lies wholly
    outside the heatmap gets weight 0. input_size and heatmap_size are (w, h)."""
    hm_w, hm_h = heatmap_size
    stride = np.array(input_size, np.float64) / np.array(heatmap_size, np.float64)
    target = np.zeros((len(joints), hm_h, hm_w), np.float32)
    weight = np.asarray(weight, np.float32).copy()
    radius = sigma * 3
    centre = int(2 * radius + 1) // 2          # the patch's middle, as the reference's x0
    us, vs = np.arange(hm_w), np.arange(hm_h)
    for k, (x, y) in enumerate(np.asarray(joints, np.float64)):
        if weight[k] <= 0:
            continue
        mu_x, mu_y = int(x / stride[0] + 0.5), int(y / stride[1] + 0.5)
        left, top = int(mu_x - radius), int(mu_y - radius)
        right, bottom = int(mu_x + radius + 1), int(mu_y + radius + 1)
        if left >= hm_w or top >= hm_h or right < 0 or bottom < 0:
            weight[k] = 0.0
            continue
        gx = np.exp(-(us - left - centre) ** 2 / (2 * sigma ** 2)) * ((us >= left) & (us < right))
        gy = np.exp(-(vs - top - centre) ** 2 / (2 * sigma ** 2)) * ((vs >= top) & (vs < bottom))
        target[k] = gy[:, None] * gx[None, :]                              # (h, w)
    return target, weight


__all__ = ["COCO_LOWER_BODY", "COCO_UPPER_BODY", "affine_points", "box_to_center_scale",
           "clean_box", "crop_affine", "half_body_box", "heatmap_to_image", "render_heatmaps"]
