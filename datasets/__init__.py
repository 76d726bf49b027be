"""Datasets, transforms, DataLoader and samplers.

Items are dicts (DESIGN.md "Data"): `image` HWC uint8 RGB, `label` int, `boxes` float32
(N, 4) xyxy pixels, `labels` int64 (N,), `keypoints` float32 (N, K, 3), `info`.

>>> from tianyuan.datasets import ImageNet, DataLoader, transforms as T
>>> ds = ImageNet(root, "train", transform=T.Compose([T.RandomResizedCrop(224),
...      T.RandomHorizontalFlip(), T.Normalize(), T.ToCHW()]))            # doctest: +SKIP
>>> loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=8, seed=0)  # doctest: +SKIP
"""
from . import transforms
from ._worker import WorkerInfo, get_worker_info
from .base import CorruptImageError, VisionDataset, decode_image, set_max_image_pixels
from .cifar import CIFAR10
from .coco import (COCO, COCO_FLIP_PAIRS, COCO_LIMBS, COCO_PERSON_KEYPOINTS, CocoFormat,
                   Objects365, flip_pairs_from_names, keypoints_to_coco)
from .collate import default_collate, detection_collate, list_collate, pad_images
from .dataloader import DataLoader, DataLoaderWorkerError
from .folder import ImageFolder
from .imagenet import ImageNet
from .keypoints import TopDownKeypoints
from .imagenet_meta import ImageNetMeta, load_imagenet_meta
from .samplers import (BatchSampler, DistributedSampler, GroupedAspectRatioBatchSampler,
                       InfiniteSampler, RandomSampler, SequentialSampler)
from .synthetic import ShapesDataset, make_shapes, write_image_folder
from .synthetic_boxes import make_shape_boxes, write_coco_shapes
