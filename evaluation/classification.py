"""Top-k accuracy over a DataLoader, with a model card's preprocessing.

>>> pre = card_preprocessing(tianyuan.zoo.model_card("resnet18"))   # resize 256, crop 224, ...
>>> loader = DataLoader(ImageNet(root, "val", eval_transform(**pre)), batch_size=100)
>>> evaluate_classification(model, loader)          # {"top1": 69.76, "top5": 89.08, ...}
"""
import warnings

import numpy as np

from tianyuan.datasets import transforms as T

from .evaluator import Evaluator, inference


def topk_correct(logits, labels, topk=(1, 5)):
    """{k: number of rows whose label is among the k largest logits}; logits (N, C),
    labels (N,). Ties are broken by the lower class index (a stable sort). A row with a NaN
    or infinite logit counts as wrong (argsort would rank its NaNs last: a diverged model's
    all-NaN rows had "predicted" class 0)."""
    logits, labels = np.asarray(logits), np.asarray(labels)
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"topk_correct: need logits (N, C) and labels (N,), got "
                         f"{logits.shape} and {labels.shape}")
    order = np.argsort(-logits, axis=1, kind="stable")              # (N, C) best first
    hits = order == labels[:, None]                                 # (N, C), one True per row
    hits &= np.isfinite(logits).all(axis=1, keepdims=True)
    return {k: int(hits[:, :min(k, logits.shape[1])].any(axis=1).sum()) for k in topk}


def eval_transform(resize=256, crop=224, mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD):
    """Resize the shorter side to `resize` (None: keep), centre-crop `crop`, normalise
    (mean/std in 0..255), HWC -> CHW."""
    steps = [T.Resize(resize)] if resize else []
    steps += [T.CenterCrop(crop)] if crop else []
    return T.Compose(steps + [T.Normalize(mean, std), T.ToCHW()])


def card_preprocessing(card):
    """eval_transform keyword arguments from a zoo model card's "preprocessing" entry
    (its mean/std are given for pixels scaled by 1/pixel_scale)."""
    pre = card["preprocessing"]
    scale = float(pre.get("pixel_scale", 1.0))
    return {"resize": pre.get("resize"), "crop": pre.get("crop"),
            "mean": tuple(float(m) * scale for m in pre["mean"]),
            "std": tuple(float(s) * scale for s in pre["std"])}


class ClassificationEvaluator(Evaluator):
    """Top-k accuracy (%) of logits (N, C) against batch["label"] (N,); a row with a NaN or
    infinite logit counts as wrong and is counted in "nonfinite"."""

    name = "classification"

    def __init__(self, topk=(1, 5)):
        super().__init__()
        self.topk = tuple(int(k) for k in topk)

    def process(self, batch, outputs):
        logits = outputs.numpy() if hasattr(outputs, "numpy") else np.asarray(outputs)
        hits = topk_correct(logits, batch["label"], self.topk)
        self.records.append({"correct": [hits[k] for k in self.topk],
                             "seen": len(batch["label"]),
                             "nonfinite": int((~np.isfinite(logits).all(axis=1)).sum())})

    def postfix(self):
        seen = sum(r["seen"] for r in self.records)
        right = sum(r["correct"][0] for r in self.records)
        return f"top{self.topk[0]}={100.0 * right / max(seen, 1):.2f}"

    def evaluate(self):
        seen = sum(r["seen"] for r in self.records)
        nonfinite = sum(r["nonfinite"] for r in self.records)
        if seen == 0:
            raise ValueError("evaluate_classification: the loader yielded no images")
        if nonfinite:
            warnings.warn(f"evaluate_classification: {nonfinite} of {seen} images gave NaN or "
                          "infinite logits (counted as wrong); the model has diverged or "
                          "overflowed", RuntimeWarning, stacklevel=2)
        correct = [sum(r["correct"][i] for r in self.records) for i in range(len(self.topk))]
        result = {f"top{k}": 100.0 * n / seen for k, n in zip(self.topk, correct)}
        return {**result, "images": seen, "nonfinite": nonfinite}


def evaluate_classification(model, loader, topk=(1, 5), progress=True, distributed=False):
    """{"top1": %, "top5": %, "images": N, "nonfinite": N, "seconds": s} of `model` (put in
    eval mode) over a loader of batches {"image" (N, 3, H, W) float32, "label" (N,)}.
    `distributed`: the loader holds this process's share (DistributedSampler(exact=True));
    each process gets the whole result."""
    return inference(model, loader, ClassificationEvaluator(topk), progress, distributed)
