"""Top-k against hand computations; evaluation over a loader; the report helpers."""
import json

import numpy as np
import pytest

import tianyuan as ty
from tianyuan.evaluation.classification import (card_preprocessing, eval_transform,
                                                evaluate_classification, topk_correct)
from tianyuan.evaluation.report import format_table, write_json


def test_topk_by_hand():
    logits = np.array([[0.1, 0.5, 0.2, 0.9],    # order 3, 1, 2, 0
                       [0.8, 0.1, 0.0, 0.3],    # order 0, 3, 1, 2
                       [0.2, 0.2, 0.9, 0.1]])   # order 2, 0, 1, 3 (tie: lower index first)
    labels = np.array([1, 0, 1])
    # row 0: label 1 is 2nd; row 1: 1st; row 2: 3rd
    assert topk_correct(logits, labels, (1, 2, 3, 4)) == {1: 1, 2: 2, 3: 3, 4: 3}
    assert topk_correct(logits, labels, (5,)) == {5: 3}   # k above C: every row counts


def test_rows_with_nan_logits_count_as_wrong():
    logits = np.array([[np.nan, np.nan, np.nan], [0.1, np.inf, 0.2], [0.3, 0.2, 0.1]])
    assert topk_correct(logits, np.array([0, 1, 0]), (1, 3)) == {1: 1, 3: 1}
    table = np.full((4, 3), np.nan, np.float32)
    table[0] = [1.0, 0.0, 0.0]
    images = np.arange(4, dtype=np.float32)[:, None, None, None] * np.ones((1, 3, 2, 2))
    loader = [{"image": images, "label": np.zeros(4, np.int64)}]
    with pytest.warns(RuntimeWarning, match="3 of 4 images gave NaN"):
        result = evaluate_classification(_Lookup(table), loader, topk=(1,), progress=False)
    assert result["top1"] == 25.0 and result["nonfinite"] == 3


def test_topk_checks_shapes():
    with pytest.raises(ValueError, match=r"\(N, C\)"):
        topk_correct(np.zeros((2, 3)), np.zeros(3, np.int64))


class _Lookup(ty.nn.Module):
    """Logits read from a table by the first pixel value (the sample's index)."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def forward(self, x):
        return ty.tensor(self.table[x.numpy()[:, 0, 0, 0].astype(int)])


def test_evaluate_classification_matches_topk():
    rng = np.random.default_rng(0)
    table, labels = rng.standard_normal((10, 6)).astype(np.float32), rng.integers(0, 6, 10)
    images = np.arange(10, dtype=np.float32)[:, None, None, None] * np.ones((1, 3, 2, 2))
    loader = [{"image": images[i:i + 4], "label": labels[i:i + 4]} for i in range(0, 10, 4)]
    result = evaluate_classification(_Lookup(table), loader, topk=(1, 5), progress=False)
    expected = topk_correct(table, labels, (1, 5))
    assert result["top1"] == pytest.approx(100 * expected[1] / 10)
    assert result["top5"] == pytest.approx(100 * expected[5] / 10)
    assert result["images"] == 10


def test_card_preprocessing_and_transform():
    card = {"preprocessing": {"resize": 36, "crop": 32, "pixel_scale": 255.0,
                              "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}}
    pre = card_preprocessing(card)
    assert pre["mean"] == pytest.approx((127.5,) * 3) and pre["std"] == pytest.approx((63.75,) * 3)
    out = eval_transform(**pre)({"image": np.full((40, 50, 3), 127, np.uint8), "label": 0})
    assert out["image"].shape == (3, 32, 32) and out["image"].dtype == np.float32


def test_table_and_json(tmp_path):
    text = format_table([{"model": "a", "top1": 70.123456}, {"model": "bb", "top1": 1.5}])
    assert "70.123" in text and text.splitlines()[0].startswith("model")
    path = write_json(str(tmp_path / "x" / "r.json"), {"a": np.float32(1.5), "b": np.arange(2)})
    assert json.load(open(path)) == {"a": 1.5, "b": [0, 1]}
