"""The keypoints task: top-down human pose on COCO-format keypoint data (COCO, your own, the
generated stick figures), the pose model's loss dict, OKS AP by pycocotools.

The data config (trainers/conf/data/coco_keypoints.yaml, coco_format_keypoints.yaml,
people_shapes.yaml) builds person crops with heatmap targets (datasets.TopDownKeypoints) and
returns (train loader, val loader, meta); meta says the joints (`num_joints`, `flip_pairs`,
`keypoint_names`) and the validation annotations. The zoo's pose models take a batch of
crops and give heatmaps; `model.losses(images, target, target_weight)` is their loss dict
(SimpleBaseline: joints MSE; MSPN: per-stage coarse-to-fine MSE + OHKM). Evaluation
decodes the heatmaps (flip test by default), rescores and OKS-NMSes the people, and scores
them with pycocotools' COCOeval(iouType="keypoints") (evaluation/keypoints.py); the best
checkpoint tracks AP.

>>> task = KeypointTask()                          # tianyuan train experiment=smoke_pose
"""
import os

from hydra.utils import instantiate

import tianyuan as ty
from tianyuan import distributed as dist

from .detection import _check_total_batch
from .task import Task


class KeypointTask(Task):
    """A pose model's loss dict on top-down person crops; OKS AP by pycocotools.
    `flip_test`: evaluate on the crop and its mirror, averaging the heatmaps (the
    references' test setting). `results_file`: the COCO keypoint results of the last
    evaluation (default out_dir/keypoint_results.json; eval: next to `out`)."""

    name, metric, mode = "keypoints", "AP", "max"

    def report_metrics(self, metrics):
        """The QuantReport's columns: OKS AP, AP50, AP75."""
        return {k: metrics[k] for k in ("AP", "AP50", "AP75") if k in metrics}

    def __init__(self, flip_test=True, results_file=None, **evaluator_args):
        self.flip_test, self.results_file = bool(flip_test), results_file
        self.evaluator_args = dict(evaluator_args)
        self.meta = {}

    def build_data(self, cfg):
        _check_total_batch(cfg)
        loaders = instantiate(cfg.data, seed=cfg.seed)
        self.meta = dict(loaders[2] or {})
        return loaders

    def build_model(self, cfg, meta):
        """cfg.model with as many joints as the data has (said in one line where the model
        config had another count)."""
        joints = (meta or {}).get("num_joints")
        count = cfg.model.get("num_joints")
        if joints and count and int(joints) != int(count):
            if dist.is_main():
                print(f"train: {joints} joints, from the data (the model config said "
                      f"{count})", flush=True)
            return instantiate(cfg.model, num_joints=int(joints))
        return instantiate(cfg.model)

    def evaluator(self, cfg, meta):
        """KeypointEvaluator on the validation annotations (meta's `coco`, else `ann_file`),
        with the data's flip pairs and OKS sigmas."""
        from tianyuan.evaluation.keypoints import KeypointEvaluator
        meta = meta or {}
        gt = meta.get("coco") or meta.get("ann_file")
        if gt is None:
            raise ValueError("keypoints: the data config's meta names no validation annotations "
                             "(coco or ann_file)")
        return KeypointEvaluator(gt, flip_pairs=meta.get("flip_pairs"), flip=self.flip_test,
                                 sigmas=meta.get("sigmas"), results_file=self._results_path(cfg),
                                 **self.evaluator_args)

    def _results_path(self, cfg):
        if self.results_file:
            return self.results_file
        if cfg.get("out_dir"):
            return os.path.join(cfg.out_dir, "keypoint_results.json")
        if cfg.get("out"):
            return os.path.splitext(cfg.out)[0] + "_keypoint_results.json"
        return None

    def forward(self, model, batch):
        """The pose model's loss dict of one batch {"image" (N, 3, H, W), "target"
        (N, K, h, w) or (N, S, K, h, w), "target_weight" (N, K)}."""
        return dict(model.losses(ty.tensor(batch["image"]), batch["target"],
                                 batch["target_weight"]))

    def results(self, trainer):
        """The joints and the crop size (read by `tianyuan pose` next to the weights)."""
        keys = ("num_joints", "keypoint_names", "flip_pairs", "skeleton", "input_size",
                "heatmap_size")
        return {k: _plain(self.meta[k]) for k in keys if self.meta.get(k) is not None}


def _plain(value):
    """JSON-able: tuples and arrays as lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
