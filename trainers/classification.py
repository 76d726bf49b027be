"""The classification task: data, loss, fine-tune and QAT preparation, evaluation.

`ClassificationTask` is what the shared Trainer (engine.py) runs; the functions below it
take explicit arguments (the config is unpacked by the task and train.py).

>>> train_loader, val_loader, classes = classification_data("folder", "data/shapes", 64)
>>> task = ClassificationTask(label_smoothing=0.1)
"""
import copy
import os
import shutil
import tempfile

import numpy as np

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import distributed as dist
from tianyuan.datasets import CIFAR10, DataLoader, DistributedSampler, ImageFolder, ImageNet
from tianyuan.datasets import transforms as T
from tianyuan.datasets.synthetic import write_image_folder
from tianyuan.evaluation.classification import ClassificationEvaluator, eval_transform

from .task import Task

DATA_KINDS = ("imagenet", "folder", "cifar10", "shapes")


def train_transform(augment, image_size, mean, std, resize=None):
    """augment: "imagenet" (RandomResizedCrop + flip), "cifar" (pad 4 + crop + flip),
    "flip", "none" or "eval" (no augmentation: the evaluation's resize and centre crop, as
    calibration takes the training images); mean/std in the 0..255 scale."""
    if augment == "eval":
        return eval_transform(resize, image_size, mean, std)
    head = {"imagenet": [T.RandomResizedCrop(image_size), T.RandomHorizontalFlip()],
            "cifar": [T.PadRandomCrop(image_size, 4), T.RandomHorizontalFlip()],
            "flip": [T.RandomHorizontalFlip()], "none": []}
    if augment not in head:
        raise ValueError(f"train_transform: augment must be one of {sorted(head) + ['eval']}, "
                         f"got {augment!r}")
    return T.Compose(head[augment] + [T.Normalize(mean, std), T.ToCHW()])


def shapes_folder(root=None, num_per_class=40, val_per_class=10, size=32, num_classes=10,
                  seed=0):
    """`root/train` and `root/val` ImageFolder trees of generated shapes (written once).

    Without `root` they go to $TIANYUAN_HOME/synthetic/<settings>; the tree is written in a
    temporary folder and renamed, so concurrent runs never see half a dataset.
    """
    if root is None:
        from tianyuan.weights import tianyuan_home
        name = f"shapes_c{num_classes}_n{num_per_class}_v{val_per_class}_s{size}_seed{seed}"
        root = os.path.join(tianyuan_home(), "synthetic", name)
    if os.path.isdir(os.path.join(root, "val")):
        return root
    parent = os.path.dirname(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".shapes.")
    try:
        write_image_folder(os.path.join(tmp, "train"), num_per_class, size, seed, num_classes)
        write_image_folder(os.path.join(tmp, "val"), val_per_class, size, seed + 1, num_classes)
        try:
            os.replace(tmp, root)
        except OSError:  # a concurrent run (another data-parallel process) renamed first
            if not os.path.isdir(os.path.join(root, "val")):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def classification_dataset(kind, root, train, transform, synthetic=None, classes=None,
                           on_error="raise"):
    """The train or val split of one of DATA_KINDS (folder/shapes: root/train, root/val).
    `on_error`: "raise" at an unreadable image (naming it), or "skip" it (counted, the
    first named; CIFAR-10's batches hold no image files)."""
    if kind not in DATA_KINDS:
        raise ValueError(f"classification_dataset: kind must be one of {DATA_KINDS}, "
                         f"got {kind!r}")
    if kind == "shapes":
        root, kind = shapes_folder(root, **(synthetic or {})), "folder"
    if root is None:
        raise ValueError(f"classification_dataset: data kind {kind!r} needs data.root "
                         "(the dataset folder)")
    if kind == "imagenet":
        return ImageNet(root, "train" if train else "val", transform, on_error)
    if kind == "cifar10":
        return CIFAR10(root, train, transform)
    return ImageFolder(os.path.join(root, "train" if train else "val"), transform, on_error,
                       classes=classes)


def classification_data(kind, root, batch_size, num_workers=0, image_size=224, resize=256,
                        mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD, augment="imagenet",
                        val_batch_size=None, seed=0, synthetic=None, splits=("train", "val"),
                        on_error="raise"):
    """(train loader, val loader, class names); a split not in `splits` is None (evaluation
    lists no training images). Train order and augmentation are a pure function of (seed,
    epoch); the last incomplete train batch is dropped. Under an MPI launch each process
    gets its share of the train set (`batch_size` is per process) and of the val set (every
    image once)."""
    unknown = set(splits) - {"train", "val"}
    if unknown:
        raise ValueError(f"classification_data: splits are 'train' and 'val', got "
                         f"{sorted(unknown)}")
    train_loader = val_loader = None
    classes = None
    rank, world = dist.rank(), dist.world_size()
    if "train" in splits:
        train = classification_dataset(kind, root, True,
                                       train_transform(augment, image_size, mean, std, resize),
                                       synthetic, on_error=on_error)
        classes = list(getattr(train, "classes", []))
        # several processes: each its share of one permutation (augmented with draws of its
        # own: seed + rank) and of the val set
        share = None if world == 1 else DistributedSampler(train, rank, world, shuffle=True,
                                                            seed=seed, drop_last=True)
        train_loader = DataLoader(train, batch_size, shuffle=share is None, sampler=share,
                                  num_workers=num_workers, drop_last=True, seed=seed + rank,
                                  persistent_workers=num_workers > 0)
    if "val" in splits:
        val = classification_dataset(kind, root, False,
                                     eval_transform(resize, image_size, mean, std),
                                     synthetic, classes or None, on_error)
        classes = classes or list(getattr(val, "classes", []))
        val_share = None if world == 1 else DistributedSampler(val, rank, world,
                                                                shuffle=False, exact=True)
        val_loader = DataLoader(val, val_batch_size or batch_size, sampler=val_share,
                                num_workers=num_workers, seed=seed)
    return train_loader, val_loader, classes


def classification_forward(model, batch, label_smoothing=0.0):
    """{"loss_cls": cross entropy, "acc": batch top-1} of one batch {"image" (N, 3, H, W),
    "label" (N,)}."""
    logits = model(ty.tensor(batch["image"]))                    # (N, classes)
    labels = ty.tensor(batch["label"])
    loss = F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
    accuracy = (logits.numpy().argmax(axis=1) == batch["label"]).mean()
    return {"loss_cls": loss, "acc": ty.tensor(np.float32(accuracy))}


class ClassificationTask(Task):
    """Cross entropy (with `label_smoothing`) on the data's classes, top-k evaluation (the
    best checkpoint tracks top-1), and fine-tuning: `finetune` {weights: a file to start
    from, new_head: a classifier for the data's classes, freeze_backbone: train the head
    only}."""

    name, metric, mode = "classification", "top1", "max"

    def report_metrics(self, metrics):
        return {k: v for k, v in metrics.items() if k.startswith("top")}

    def __init__(self, label_smoothing=0.0, topk=(1, 5), finetune=None):
        self.label_smoothing, self.topk = float(label_smoothing), tuple(int(k) for k in topk)
        self.finetune = {"weights": None, "new_head": False, "freeze_backbone": False,
                         **dict(finetune or {})}

    def build_model(self, cfg, classes):
        """cfg.model; trained from scratch, with as many classes as the data has (said in
        one line where the model config had another count)."""
        from hydra.utils import instantiate
        model = instantiate(cfg.model)
        tune = self.finetune
        count = getattr(model, "num_classes", None)
        if classes and count and count != len(classes) and not tune["weights"]:
            if dist.is_main():
                print(f"train: {len(classes)} classes, from the data (the model config said "
                      f"{count})", flush=True)
            model = instantiate(cfg.model, num_classes=len(classes))
        prepare_finetune(model, tune["weights"], len(classes) if tune["new_head"] else None,
                         tune["freeze_backbone"])
        return model

    def evaluator(self, cfg, classes):
        return ClassificationEvaluator(self.topk)

    def forward(self, model, batch):
        return classification_forward(model, batch, self.label_smoothing)


def prepare_finetune(model, weights=None, num_classes=None, freeze_backbone=False):
    """Load `weights` (a file, or a checkpoint's "model"), put on a new `num_classes` head,
    and optionally freeze everything but the head. Returns the parameters to train."""
    head = getattr(model, "classifier_name", "fc")
    if num_classes is not None:
        model.reset_classifier(int(num_classes))
    if weights:
        from .checkpoint import model_weights
        state = model_weights(ty.load(weights))
        if num_classes is not None:   # the new head keeps its fresh initialisation
            state = {k: v for k, v in state.items() if not k.startswith(head + ".")}
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith(head + ".")]
        if missing or unexpected:
            raise RuntimeError(f"prepare_finetune: {weights} does not fit "
                               f"{type(model).__name__}: missing {missing}, "
                               f"unexpected {unexpected}")
    if not freeze_backbone:
        return list(model.parameters())
    model.requires_grad_(False)
    model.get_submodule(head).requires_grad_(True)
    return list(model.get_submodule(head).parameters())


def prepare_qat(model, qconfig="ema_fakequant", keep_float=()):
    """Convert `model` for quantization-aware training or calibration (fused Conv-BN-ReLU,
    observers, fake quantizers). `qconfig`: a QConfig, or the name of a preset
    (`tianyuan.quantization.get_qconfig`: ema_fakequant, calibration, lsq, ...).
    `keep_float`: dotted names of submodules that stay float (`disable_quantize`), e.g.
    ["fc"] for a classifier whose logits lose accuracy as uint8; `model` is not modified."""
    from tianyuan import quantization as Q
    try:
        qconfig = Q.get_qconfig(qconfig)
    except ValueError as error:
        raise ValueError(f"prepare_qat: {error}") from None
    if isinstance(keep_float, str):
        keep_float = [keep_float]
    if not keep_float:
        return Q.quantize_qat(model, qconfig)
    model = copy.deepcopy(model)
    for name in keep_float:
        try:
            Q.disable_quantize(model.get_submodule(str(name)))
        except AttributeError as e:
            top = ", ".join(model._modules)
            raise ValueError(f"prepare_qat: keep_float: {e}; the model's top-level modules: "
                             f"{top}") from None
    return Q.quantize_qat(model, qconfig, inplace=True)
