import numpy as np
import pytest

from tianyuan.datasets import COCO_FLIP_PAIRS, detection_collate
from tianyuan.datasets import transforms as T


def dot_item(h, w, row, col, keypoint_index=0):
    """A 3x3 white dot centred on pixel (row, col); a keypoint and a box on it."""
    image = np.zeros((h, w, 3), np.uint8)
    image[row - 1:row + 2, col - 1:col + 2] = 255
    points = np.zeros((1, 17, 3), np.float32)
    points[0, keypoint_index] = [col + 0.5, row + 0.5, 2]
    box = np.array([[col - 1, row - 1, col + 2, row + 2]], np.float32)
    return {"image": image, "keypoints": points, "boxes": box, "labels": np.array([0])}


def centroid(image):
    weight = image[..., 0].astype(np.float64)
    ys, xs = np.mgrid[:image.shape[0], :image.shape[1]] + 0.5
    return np.array([(xs * weight).sum(), (ys * weight).sum()]) / weight.sum()


def bright_box(image, level=100):
    ys, xs = np.nonzero(image[..., 0] > level)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float32)


def assert_follows(out, index=0, tol=0.6):
    np.testing.assert_allclose(out["keypoints"][0, index, :2], centroid(out["image"]), atol=tol)
    np.testing.assert_allclose(out["boxes"][0], bright_box(out["image"]), atol=1.5 * tol + 0.5)


@pytest.mark.parametrize("transform", [
    T.Resize(30), T.Resize(90), T.Resize((50, 40)), T.CenterCrop(24),
    T.ShortestEdgeResize(64, max_size=80), T.RandomResizedCrop(32, scale=(0.6, 1.0)),
    T.RandomHorizontalFlip(p=1.0, flip_pairs=COCO_FLIP_PAIRS), T.PadRandomCrop((40, 60), 4),
])
def test_geometry_moves_keypoints_and_boxes_with_the_dot(transform):
    for seed in range(3):
        with T.sample_rng(np.random.SeedSequence([seed])):
            out = transform(dot_item(40, 60, 17, 27))
        assert_follows(out)


def test_pad_random_crop_is_a_window_of_the_zero_padded_image():
    image = np.random.default_rng(0).integers(1, 256, (32, 32, 3), dtype=np.uint8)
    padded = np.pad(image, ((4, 4), (4, 4), (0, 0)))
    corners = set()
    for seed in range(20):
        with T.sample_rng(np.random.SeedSequence([seed])):
            out = T.PadRandomCrop(32, 4)({"image": image, "label": 3})["image"]
        assert out.shape == (32, 32, 3) and out.dtype == np.uint8
        hits = [(t, l) for t in range(9) for l in range(9)
                if np.array_equal(padded[t:t + 32, l:l + 32], out)]
        assert hits, seed
        corners.add(hits[0])
    assert len(corners) > 5        # the window moves


def test_flip_swaps_left_and_right_keypoints():
    item = dot_item(20, 30, 5, 7, keypoint_index=1)   # left_eye on the dot
    item["keypoints"][0, 2] = [20.5, 10.5, 1]          # right_eye elsewhere
    out = T.RandomHorizontalFlip(p=1.0, flip_pairs=COCO_FLIP_PAIRS)(item)
    assert_follows(out, index=2)                       # the dot is now the right eye
    np.testing.assert_allclose(out["keypoints"][0, 1], [30 - 20.5, 10.5, 1])
    with pytest.raises(ValueError, match="flip_pairs"):
        T.RandomHorizontalFlip(p=1.0)(item)


@pytest.mark.parametrize("rotation", [0.0, 30.0, -70.0])
def test_top_down_affine_follows_the_dot(rotation):
    item = dot_item(80, 60, 30, 25)
    item["boxes"] = np.array([[10, 12, 40, 60]], np.float32)
    crop = T.TopDownAffine((48, 64), train=False)
    centre, size = T.box_to_centre_scale(item["boxes"][0], 48 / 64, 1.25)
    matrix = T.crop_matrix(centre, size * 0.9, rotation, 48, 64)
    crop.sample = lambda: (0.9, rotation)
    out = crop(item)
    np.testing.assert_allclose(out["info"]["crop_matrix"], matrix)
    assert out["image"].shape == (64, 48, 3)
    np.testing.assert_allclose(out["keypoints"][0, 0, :2], centroid(out["image"]), atol=0.6)


def test_heatmap_peak_at_the_keypoint():
    item = dot_item(64, 48, 21, 30)
    out = T.HeatmapTarget((12, 16), sigma=1.5)(item)
    heat = out["heatmaps"]
    assert heat.shape == (17, 16, 12) and out["target_weight"].tolist() == [1] + [0] * 16
    # keypoint (30.5, 21.5) at stride 4 -> heatmap centre (7.625, 5.375) -> pixel (5, 7)
    assert np.unravel_index(heat[0].argmax(), heat[0].shape) == (5, 7)
    assert heat[1:].max() == 0
    staged = T.HeatmapTarget((12, 16), kernel=[3, 5, 7])(item)["heatmaps"]
    assert staged.shape == (3, 17, 16, 12) and staged[:, 0, 5, 7].tolist() == [1, 1, 1]
    assert staged[0, 0].sum() < staged[2, 0].sum()


def test_half_body_picks_a_body_half():
    item = dot_item(100, 100, 50, 50)
    rng = np.random.default_rng(0)
    item["keypoints"][0, :, :2] = rng.uniform(10, 90, (17, 2))
    item["keypoints"][0, :, 2] = 2
    out = T.HalfBody(prob=1.0)(item)
    box = out["boxes"][0]
    upper, lower = item["keypoints"][0, :11, :2], item["keypoints"][0, 11:, :2]
    inside = [((p >= box[:2]) & (p <= box[2:])).all() for p in (upper, lower)]
    assert any(inside) and not np.array_equal(box, item["boxes"][0])


def test_photometric_transforms_and_determinism():
    image = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    pipeline = T.Compose([T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.Lighting(0.1), T.Normalize(),
                          T.ToCHW()])
    outs = []
    for _ in range(2):
        with T.sample_rng(np.random.SeedSequence([5])):
            outs.append(pipeline({"image": image, "label": 1}))
    assert outs[0]["image"].shape == (3, 16, 16) and outs[0]["image"].dtype == np.float32
    np.testing.assert_array_equal(outs[0]["image"], outs[1]["image"])
    plain = T.Compose([T.Normalize(), T.ToCHW()])({"image": image})["image"]
    np.testing.assert_allclose(plain[0], (image[..., 0] - 123.675) / 58.395, rtol=1e-5)
    grey = T.ColorJitter(saturation=0.5)({"image": np.full((4, 4, 3), 77, np.uint8)})
    assert (grey["image"] == 77).all()   # saturation cannot change a grey image


def test_detection_collate_pads_to_32():
    items = [{"image": np.ones((3, 40, 50), np.float32), "boxes": np.zeros((2, 4), np.float32),
              "labels": np.zeros(2, np.int64)},
             {"image": np.ones((3, 33, 20), np.float32), "boxes": np.zeros((0, 4), np.float32),
              "labels": np.zeros(0, np.int64)}]
    batch = detection_collate(items)
    assert batch["image"].shape == (2, 3, 64, 64)
    assert batch["image_sizes"].tolist() == [[40, 50], [33, 20]]
    assert batch["image"][1, :, 33:].sum() == 0 and batch["image"][1, :, :33, :20].min() == 1
    assert [len(b) for b in batch["boxes"]] == [2, 0]
    hwc = detection_collate([{"image": np.ones((10, 70, 3), np.uint8)}])
    assert hwc["image"].shape == (1, 32, 96, 3)
