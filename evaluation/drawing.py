"""Drawing results on pictures with OpenCV: detection boxes (`tianyuan detect`) and pose
skeletons (`tianyuan pose`). Images are (H, W, 3) uint8 RGB; a copy is drawn on.

>>> picture = draw_skeleton(image, keypoints, threshold=0.2)    # keypoints (N, 17, 3)
"""
import colorsys

import cv2
import numpy as np

from tianyuan.datasets.coco import COCO_LIMBS


def box_colour(label):
    """An RGB colour per class: hues spaced by the golden ratio, full saturation."""
    red, green, blue = colorsys.hsv_to_rgb((label * 0.618033988749895) % 1.0, 0.9, 1.0)
    return int(red * 255), int(green * 255), int(blue * 255)


def class_name(names, label):
    return names[label] if 0 <= label < len(names) else f"class {label}"


def draw_detections(image, boxes, scores, labels, names, thickness=2):
    """A copy of `image` (H, W, 3) uint8 RGB with each box, its class name and score drawn;
    a box covers pixel columns x1..x2-1 and rows y1..y2-1 of its xyxy coordinates."""
    out = np.ascontiguousarray(image).copy()
    scale = max(0.4, min(out.shape[:2]) / 800)
    for box, score, label in zip(boxes, scores, labels):
        colour = box_colour(int(label))
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        cv2.rectangle(out, (x1, y1), (max(x1, x2 - 1), max(y1, y2 - 1)), colour, thickness)
        text = f"{class_name(names, int(label))} {float(score):.2f}"
        (width, height), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
        top = y1 - height - base if y1 - height - base >= 0 else y1 + thickness
        cv2.rectangle(out, (x1, top), (x1 + width, top + height + base), colour, cv2.FILLED)
        ink = (0, 0, 0) if sum(colour) > 380 else (255, 255, 255)
        cv2.putText(out, text, (x1, top + height), cv2.FONT_HERSHEY_SIMPLEX, scale, ink, 1,
                    cv2.LINE_AA)
    return out


def limb_colour(index):
    """The colour of limb `index` (of COCO_LIMBS or your own list): one hue per limb."""
    return box_colour(index + 3)


def draw_skeleton(image, keypoints, limbs=COCO_LIMBS, threshold=0.2, thickness=None):
    """A copy of `image` (H, W, 3) uint8 with each person's limbs drawn where both joints'
    confidence reaches `threshold`, and each such joint as a white-rimmed dot whose radius
    grows with its confidence (1 and above: the full radius). keypoints (N, K, 3): x, y at
    the image's pixel indices (COCO's results convention), confidence or visibility."""
    out = np.ascontiguousarray(image).copy()
    points = np.asarray(keypoints, np.float64).reshape(-1, *np.shape(keypoints)[-2:])
    width = thickness or max(1, int(round(min(out.shape[:2]) / 240)))
    for person in points:
        shown = person[:, 2] >= threshold
        xy = np.round(person[:, :2]).astype(int)
        for index, (a, b) in enumerate(limbs):
            if a < len(person) and b < len(person) and shown[a] and shown[b]:
                cv2.line(out, tuple(xy[a]), tuple(xy[b]), limb_colour(index), width, cv2.LINE_AA)
        for k in np.nonzero(shown)[0]:
            radius = max(1, int(round(2 * width * min(1.0, float(person[k, 2])))))
            cv2.circle(out, tuple(xy[k]), radius + 1, (255, 255, 255), -1, cv2.LINE_AA)
            cv2.circle(out, tuple(xy[k]), radius, (20, 20, 20), -1, cv2.LINE_AA)
    return out
