"""Synthetic people: stick figures with COCO's 17 joints, written as a COCO keypoint folder.

Each figure is a front-facing body (so a person's left joints are on the image's right, as
in COCO) with random arm and leg angles, lean, height and position, drawn with OpenCV on a
noisy background: limbs as thick lines, the person's left side in warm colours, the right
in cool ones, the torso grey-white, a head disc with two eyes, a nose and two ears as dots.
One to `max_people` figures an image, their boxes kept apart. The joints are known
exactly, every one inside the image (visibility 2). Deterministic by seed and learnable
in minutes at a 128x96 input: the `smoke_pose` experiment trains on it.

>>> image, people = make_people(2, size=128, seed=0)[0]   # (128, 128, 3) uint8, (N, 17, 3)
>>> ann_file = write_coco_people("data/people/val", 50)            # doctest: +SKIP
>>> ds = CocoFormat("data/people/val/images", ann_file, task="keypoints")  # doctest: +SKIP
"""
import cv2
import numpy as np

from .coco import COCO_LIMBS, COCO_PERSON_KEYPOINTS
from .synthetic import _rotated
from .synthetic_boxes import _NOISE, _overlaps, save_coco_folder

# a standing figure of height 1, hip centre at the origin, y down; +x is the person's left
_SHOULDER, _HIP, _NECK_Y = 0.12, 0.08, -0.32
_FACE = {0: (0.0, -0.425), 1: (0.03, -0.455), 2: (-0.03, -0.455),   # nose, eyes
         3: (0.07, -0.44), 4: (-0.07, -0.44)}                       # ears
_UPPER_ARM, _FOREARM, _THIGH, _SHIN = 0.17, 0.15, 0.23, 0.22
_LEFT = (255, 70, 40)                      # RGB: the person's left side, warm
_RIGHT = (40, 120, 255)                    # the right side, cool
_TORSO = (235, 235, 235)


def _limb(start, angle, length):
    """The end of a segment from `start`, `angle` degrees from straight down (+: outward
    to +x)."""
    t = np.deg2rad(angle)
    return start + length * np.array([np.sin(t), np.cos(t)])


def _pose(rng):
    """(17, 2) joints of one random figure in body units (height about 1)."""
    joints = np.zeros((17, 2))
    for k, xy in _FACE.items():
        joints[k] = xy
    for side, sign in ((0, 1.0), (1, -1.0)):            # left (+x), right (-x)
        shoulder = np.array([sign * _SHOULDER, _NECK_Y])
        hip = np.array([sign * _HIP, 0.0])
        upper = rng.uniform(-30, 160)                   # arms: down .. raised overhead
        elbow = _limb(shoulder, sign * upper, _UPPER_ARM)
        wrist = _limb(elbow, sign * (upper + rng.uniform(-20, 120)), _FOREARM)
        thigh = rng.uniform(-15, 45)
        knee = _limb(hip, sign * thigh, _THIGH)
        ankle = _limb(knee, sign * (thigh + rng.uniform(-60, 10)), _SHIN)
        for k, point in zip((5, 7, 9, 11, 13, 15), (shoulder, elbow, wrist, hip, knee, ankle)):
            joints[k + side] = point
    return joints


def _figure(rng, size, heights):
    """(joints (17, 2) in pixels, line width) of a figure leaning up to 20 degrees, placed
    at random in the image."""
    height = rng.uniform(*heights) * size
    joints = _rotated(_pose(rng), rng.uniform(-20, 20)) * height
    low, high = joints.min(0) - 0.1 * height, joints.max(0) + 0.1 * height
    offset = rng.uniform(-low, size - high) if (high - low < size).all() else -low
    return joints + offset, max(2, int(round(height * 0.045)))


def _box(joints, width, size):
    """[x, y, w, h] around the drawn figure (joints grown by the line width), in the image."""
    low = (joints.min(0) - width).clip(0, size)
    high = (joints.max(0) + width).clip(0, size)
    return [float(low[0]), float(low[1]), float(high[0] - low[0]), float(high[1] - low[1])]


def _colour(side_of):
    return _LEFT if side_of == 1 else _RIGHT if side_of == 2 else _TORSO


def _side(joint):
    """1: the person's left, 2: right, 0: the middle (nose) -- by COCO's name."""
    name = COCO_PERSON_KEYPOINTS[joint]
    return 1 if name.startswith("left_") else 2 if name.startswith("right_") else 0


def _draw(image, joints, width):
    """Limbs (COCO's, face ones left out), the head disc, and a dot on every face joint."""
    points = np.round(joints).astype(int)
    for a, b in COCO_LIMBS:
        if a < 5 or b < 5:                              # face limbs: the head disc instead
            continue
        side = _side(a) if _side(a) == _side(b) else 0
        cv2.line(image, tuple(points[a]), tuple(points[b]), _colour(side), width, cv2.LINE_AA)
    centre = (joints[1] + joints[2]) / 2 + (joints[0] - (joints[1] + joints[2]) / 2) * 0.3
    radius = max(3, int(round(np.linalg.norm(joints[3] - joints[4]) * 0.5)))
    cv2.circle(image, tuple(np.round(centre).astype(int)), radius, _TORSO, -1, cv2.LINE_AA)
    dot = max(1, width // 2)
    for k in range(5):
        cv2.circle(image, tuple(points[k]), dot, _colour(_side(k)) if k else (20, 20, 20), -1)
    for k in range(5, 17):
        cv2.circle(image, tuple(points[k]), dot, _colour(_side(k)), -1)


def draw_people(rng, size=128, max_people=3, heights=(0.35, 0.75)):
    """One (size, size, 3) uint8 RGB image and its people: (N, 17, 3) float32 x, y, v at
    COCO's pixel indices (v = 2), with their [x, y, w, h] boxes (N, 4) float32."""
    background = rng.uniform(0, 110) + rng.uniform(-15, 15, 3)    # dim, nearly grey
    image = np.broadcast_to(background, (size, size, 3)).astype(np.uint8).copy()
    people, boxes = [], []
    for _ in range(int(rng.integers(1, max_people + 1))):
        for _attempt in range(30):
            joints, width = _figure(rng, size, heights)
            box = _box(joints, width, size)
            xyxy = [box[0], box[1], box[0] + box[2], box[1] + box[3]]
            inside = (joints >= 0).all() and (joints <= size - 1).all()
            if inside and not _overlaps(xyxy, [[b[0], b[1], b[0] + b[2], b[1] + b[3]]
                                               for b in boxes], margin=2):
                _draw(image, joints, width)
                people.append(np.concatenate([joints, np.full((17, 1), 2.0)], 1))
                boxes.append(box)
                break
    noisy = image + rng.normal(0.0, _NOISE, image.shape)
    image = np.clip(np.round(noisy), 0, 255).astype(np.uint8)
    return (image, np.array(people, np.float32).reshape(-1, 17, 3),
            np.array(boxes, np.float32).reshape(-1, 4))


def make_people(num, size=128, seed=0, **kwargs):
    """[(image, keypoints (N, 17, 3), boxes (N, 4) [x, y, w, h])] of `num` images,
    deterministic per seed (draw_people)."""
    if size < 48:
        raise ValueError(f"make_people: size must be >= 48 pixels, got {size}")
    rng = np.random.default_rng(seed)
    return [draw_people(rng, size, **kwargs) for _ in range(num)]


# 1-based, as COCO's person category writes its skeleton
COCO_SKELETON = [[a + 1, b + 1] for a, b in COCO_LIMBS]


def write_coco_people(root, num, size=128, seed=0, **kwargs):
    """Write `root/images/<000000>.png` and `root/annotations.json` (COCO person keypoints:
    one "person" category with COCO's joint names and skeleton); returns the json's path."""
    samples = make_people(num, size, seed, **kwargs)
    annotations = []
    for index, (_, people, boxes) in enumerate(samples):
        for joints, box in zip(people, boxes.tolist()):
            annotations.append({"image_id": index + 1, "category_id": 1, "iscrowd": 0,
                                "bbox": box, "area": box[2] * box[3], "num_keypoints": 17,
                                "keypoints": [round(float(v), 2) for v in joints.reshape(-1)]})
    categories = [{"id": 1, "name": "person", "supercategory": "person",
                   "keypoints": list(COCO_PERSON_KEYPOINTS), "skeleton": COCO_SKELETON}]
    return save_coco_folder(root, [image for image, _, _ in samples], annotations, categories,
                            "tianyuan synthetic people")
