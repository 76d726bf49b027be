"""draw_skeleton: limbs in their colours between confident joints, nothing for the others,
joint dots sized by confidence; the input is not drawn on."""
import numpy as np

from tianyuan.datasets import COCO_LIMBS
from tianyuan.evaluation.drawing import draw_skeleton, limb_colour


def _person():
    """(1, 17, 3): a standing figure in a 200 x 200 picture, every joint confidence 0.9."""
    xy = [(100, 40), (95, 35), (105, 35), (90, 38), (110, 38), (80, 60), (120, 60), (70, 90),
          (130, 90), (60, 120), (140, 120), (85, 120), (115, 120), (85, 155), (115, 155),
          (85, 190), (115, 190)]
    return np.array([[(x, y, 0.9) for x, y in xy]], np.float32)


def test_limb_pixels_and_confidence():
    image = np.full((200, 200, 3), 50, np.uint8)
    people = _person()
    people[0, 10, 2] = 0.1                                 # right wrist below the threshold
    drawn = draw_skeleton(image, people, threshold=0.2, thickness=2)
    assert (image == 50).all()                             # a copy is drawn on
    for index, (a, b) in enumerate(COCO_LIMBS):
        if 10 in (a, b) or np.hypot(*(people[0, a, :2] - people[0, b, :2])) < 20:
            continue                                       # hidden, or a face limb under dots
        # a quarter along the limb: away from the joint dots, on the line
        x, y = np.round(people[0, a, :2] * 0.75 + people[0, b, :2] * 0.25).astype(int)
        assert np.array_equal(drawn[y, x], limb_colour(index)), (a, b)
    elbow, wrist = people[0, 8, :2], people[0, 10, :2]      # right elbow -> (hidden) wrist
    x, y = np.round((elbow + wrist) / 2).astype(int)
    assert np.array_equal(drawn[y, x], [50, 50, 50])
    assert np.array_equal(drawn[120, 140], [50, 50, 50])   # no dot for the wrist either


def test_dot_radius_grows_with_confidence():
    image = np.zeros((60, 120, 3), np.uint8)
    people = np.zeros((1, 17, 3), np.float32)
    people[0, :, :2] = (200, 200)                          # off the picture
    people[0, 0] = (30, 30, 0.25)
    people[0, 1] = (90, 30, 1.0)
    drawn = draw_skeleton(image, people, threshold=0.2, thickness=3)
    inked = (drawn.max(-1) > 0)
    assert inked[:, :60].sum() < inked[:, 60:].sum()
    assert inked[30, 30] and inked[30, 90] and not inked[5, 5]
