"""The detection task: COCO-format data (COCO, Objects365, your own, generated shapes), the
detector's loss dict, box AP by pycocotools.

The zoo's detectors take a list of [0, 1] RGB images of any size with targets {"boxes"
(N, 4) xyxy pixels, "labels" (N,)} and return their losses in training, detections in
eval mode; they resize, normalise and pad inside, and draw a multi-scale training size
themselves (`model.min_size` a list). So the data here only flips (`train_resize` resizes
the shorter side in the data instead, for a model that does not), the loader moves uint8
images as per-image lists, and the forward converts them. Training
batches group images by aspect ratio (GroupedAspectRatioBatchSampler). Crowd boxes are
left out of the targets (as torchvision's and detectron2's references do) and scored by
pycocotools as crowd regions. Images with no box are kept as negatives (`keep_empty`),
or left out with a count.

>>> train_loader, val_loader, meta = detection_data("shapes", None, batch_size=8)
>>> task = DetectionTask()                         # tianyuan train experiment=smoke_detection
"""
import os

from hydra.utils import instantiate

from tianyuan import distributed as dist
from tianyuan.datasets import (COCO, BatchSampler, CocoFormat, DataLoader,
                               GroupedAspectRatioBatchSampler, Objects365, list_collate)
from tianyuan.datasets import transforms as T
from tianyuan.datasets.synthetic_boxes import write_coco_shapes
from tianyuan.datasets.transforms.detection import model_images
from tianyuan.evaluation.detection import COCOEvaluator

from . import coco_data
from .coco_data import split_paths, synthetic_root, train_sampler, write_once
from .task import Task

DATA_KINDS = ("coco", "coco_format", "objects365", "shapes")
# where each kind's splits are, relative to data.root (data.train / data.val override them)
LAYOUTS = {
    "coco": {"train": ("train2017", "annotations/instances_train2017.json"),
             "val": ("val2017", "annotations/instances_val2017.json")},
    "objects365": {"train": ("train", "zhiyuan_objv2_train.json"),     # v2
                   "val": ("val", "zhiyuan_objv2_val.json")},
    "objects365_v1": {"train": ("train", "objects365_train.json"),
                      "val": ("val", "objects365_val.json")},
    "shapes": {"train": ("train/images", "train/annotations.json"),
               "val": ("val/images", "val/annotations.json")},
}


def shapes_coco(root=None, num_train=400, num_val=100, size=96, num_classes=3, seed=0,
                max_objects=3, radii=(0.15, 0.3)):
    """`root/{train,val}/images` + `annotations.json` of generated shapes with boxes (written
    once, coco_data.write_once; datasets.synthetic_boxes). Without `root` under
    $TIANYUAN_HOME/synthetic/<settings>."""
    root = synthetic_root(root, f"shapes_det_c{num_classes}_n{num_train}_v{num_val}_s{size}"
                                f"_o{max_objects}_r{radii[0]:g}-{radii[1]:g}_seed{seed}")
    extra = {"max_objects": max_objects, "radii": tuple(radii)}

    def write(folder):
        write_coco_shapes(os.path.join(folder, "train"), num_train, size, num_classes, seed,
                          **extra)
        write_coco_shapes(os.path.join(folder, "val"), num_val, size, num_classes, seed + 1,
                          **extra)
    return write_once(root, ".shapes_det.", write)


def detection_dataset(kind, root, split, transform=None, paths=None, version=2,
                      keep_empty=True, on_error="raise"):
    """The `split` ("train" or "val") of one of DATA_KINDS as a COCO-format dataset."""
    if kind not in DATA_KINDS:
        raise ValueError(f"detection_dataset: kind must be one of {DATA_KINDS}, got {kind!r}")
    layout = "objects365_v1" if kind == "objects365" and version == 1 else kind
    images, ann_file = split_paths(LAYOUTS, layout, root, split, paths, "detection_data")
    kwargs = {"transform": transform, "on_error": on_error, "remove_empty": not keep_empty}
    if kind == "objects365":
        return Objects365(images, ann_file, version=version, **kwargs)
    if kind == "coco_format":
        return CocoFormat(images, ann_file, **kwargs)
    return COCO(images, ann_file, **kwargs)


def train_transform(flip=0.5, train_resize=None):
    """Horizontal flip with probability `flip`; with `train_resize` {min_size: int or list
    (one chosen per image: multi-scale), max_size} the shorter side is resized first."""
    steps = []
    if train_resize:
        sizes = train_resize["min_size"]
        sizes = sizes if isinstance(sizes, int) else tuple(sizes)
        steps.append(T.ShortestEdgeResize(sizes, train_resize.get("max_size", 1333)))
    if flip:
        steps.append(T.RandomHorizontalFlip(flip))
    return T.Compose(steps)


def _train_loader(train, batch_size, num_workers, seed, aspect_grouping):
    """Batches of one aspect-ratio group (coco_data.train_sampler's order), each process
    augmenting with draws of its own (seed + rank)."""
    sampler = train_sampler(train, seed)
    batches = GroupedAspectRatioBatchSampler(sampler, train.aspect_ratios(), batch_size,
                                             drop_last=True) if aspect_grouping else \
        BatchSampler(sampler, batch_size, drop_last=True)
    return DataLoader(train, batch_sampler=batches, num_workers=num_workers,
                      collate_fn=list_collate, seed=seed + dist.rank(),
                      persistent_workers=num_workers > 0)


def detection_data(kind, root=None, batch_size=2, num_workers=0, val_batch_size=None,
                   train=None, val=None, version=2, flip=0.5, train_resize=None,
                   keep_empty=True, aspect_grouping=True, on_error="raise", synthetic=None,
                   seed=0, splits=("train", "val")):
    """(train loader, val loader, meta) of COCO-format detection data; a split not in
    `splits` is None (evaluation lists no training images). `batch_size` is per process.
    meta: {"classes", "category_ids" (label order), "ann_file" (the val json)}.
    `keep_empty`: training images with no box stay as negatives (RetinaNet); false leaves
    them out, counted in one line."""
    if kind == "shapes":
        root = shapes_coco(root, **(synthetic or {}))
    train_loader = val_loader = None
    meta = {}
    if "train" in splits:
        dataset = detection_dataset(kind, root, "train", train_transform(flip, train_resize),
                                    train, version, keep_empty, on_error)
        _say_empty(dataset, keep_empty)
        meta = {"classes": list(dataset.classes), "category_ids": list(dataset.category_ids)}
        train_loader = _train_loader(dataset, batch_size, num_workers, seed, aspect_grouping)
    if "val" in splits:
        dataset = detection_dataset(kind, root, "val", None, val, version, True, on_error)
        if meta and meta["category_ids"] != list(dataset.category_ids):
            raise ValueError(f"detection_data: the train and val jsons have other categories "
                             f"({len(meta['category_ids'])} and {len(dataset.category_ids)})")
        meta = {"classes": list(dataset.classes), "category_ids": list(dataset.category_ids),
                "ann_file": dataset.ann_file}
        val_loader = coco_data.val_loader(dataset, val_batch_size or batch_size, num_workers,
                                          seed, list_collate)
    return train_loader, val_loader, meta


def _say_empty(dataset, keep_empty):
    total = len(dataset.api.imgs) - getattr(dataset, "num_missing", 0)
    empty = total - len(dataset) if not keep_empty else \
        sum(1 for r in dataset.records if not len(r["labels"]))
    if empty and dist.is_main():
        what = "kept as negatives" if keep_empty else \
            "left out (data.keep_empty=true keeps them as negatives)"
        print(f"train: {empty} of {total} images have no boxes: {what}", flush=True)


def detection_forward(model, batch):
    """The detector's loss dict {"loss_cls", "loss_box_reg", ...} of one batch of per-image
    lists {"image" (H, W, 3) uint8, "boxes" (N, 4), "labels" (N,)}."""
    targets = [{"boxes": boxes, "labels": labels}
               for boxes, labels in zip(batch["boxes"], batch["labels"])]
    return dict(model(model_images(batch["image"]), targets))


def _check_total_batch(cfg):
    """A recipe's LR scales with `total_batch`: it must be what the processes take."""
    total = cfg.get("total_batch")
    taken = int(cfg.data.batch_size) * dist.world_size()
    if total is not None and int(total) != taken:
        raise ValueError(f"train: total_batch={total} (the LR scales with it), but "
                         f"data.batch_size={cfg.data.batch_size} x {dist.world_size()} "
                         f"process(es) is {taken}: give total_batch={taken}")


class DetectionTask(Task):
    """A detector's loss dict on COCO-format data; box AP by pycocotools (the best checkpoint
    tracks AP). `label_space`: the model's labels are the data's contiguous labels
    ("contiguous"), COCO category ids ("coco_ids": torchvision's 91-class heads) or decided
    from the model's class count ("auto"). `results_file`: the COCO-format detections of the
    last evaluation (default out_dir/coco_results.json; eval: next to `out`).

    Fine-tuning is the model builder's: `model.weights` (COCO weights: every tensor but a
    class head of another class count) and `model.trainable_backbone_layers`."""

    name, metric, mode = "detection", "AP", "max"

    def __init__(self, label_space="auto", results_file=None):
        self.label_space, self.results_file = label_space, results_file
        self.meta = {}

    def build_data(self, cfg):
        _check_total_batch(cfg)
        loaders = instantiate(cfg.data, seed=cfg.seed)
        self.meta = loaders[2]
        return loaders

    def build_model(self, cfg, meta):
        """cfg.model with as many classes as the data has (said in one line where the model
        config had another count; a COCO-id head keeps its own)."""
        classes = (meta or {}).get("classes") or []
        count = cfg.model.get("num_classes")
        if classes and count and count != len(classes) and self.label_space != "coco_ids":
            if dist.is_main():
                print(f"train: {len(classes)} classes, from the data (the model config said "
                      f"{count})", flush=True)
            return instantiate(cfg.model, num_classes=len(classes))
        return instantiate(cfg.model)

    def evaluator(self, cfg, meta):
        return COCOEvaluator(meta["ann_file"], meta.get("category_ids"), meta.get("classes"),
                             self.label_space, self._results_path(cfg))

    def _results_path(self, cfg):
        if self.results_file:
            return self.results_file
        if cfg.get("out_dir"):
            return os.path.join(cfg.out_dir, "coco_results.json")
        if cfg.get("out"):
            return os.path.splitext(cfg.out)[0] + "_coco_results.json"
        return None

    def forward(self, model, batch):
        return detection_forward(model, batch)

    def results(self, trainer):
        """The classes in label order (read by `tianyuan detect` for the weights' names)."""
        return {key: self.meta[key] for key in ("classes", "category_ids") if key in self.meta}

    # ------------------------------------------------------------ tianyuan quantize
    def quant_inputs(self, model, loader, count):
        """The first `count` validation images as the detector's network takes them:
        resized, normalised and padded into one batch (model.transform)."""
        images = []
        for batch in loader:
            images += model_images(batch["image"])
            if len(images) >= count:
                break
        return model.transform(images[:count])[0]

    def quant_forward(self, model, x):
        """The network (backbone, FPN, heads: what int8 runs) on a normalised padded batch;
        box decoding and NMS are float and the same in both."""
        return model.run_network(x)

    def quant_output_comparable(self, model):
        """Not for a two-stage detector: its box head scores proposals each model finds."""
        return not getattr(model, "two_stage", False)

    def report_metrics(self, metrics):
        return {k: metrics[k] for k in ("AP", "AP50", "AP75") if k in metrics}
