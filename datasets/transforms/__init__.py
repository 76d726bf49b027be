"""Transforms: dict in, dict out; geometry moves boxes and keypoints with the image."""
from . import geometry
from .classification import (IMAGENET_EIGVAL, IMAGENET_EIGVEC, IMAGENET_MEAN, IMAGENET_STD,
                             CenterCrop, ColorJitter, Compose, Lighting, Normalize,
                             PadRandomCrop, RandomHorizontalFlip, RandomResizedCrop, Resize,
                             ToCHW)
from .detection import ShortestEdgeResize, model_image, model_images
from .keypoints import (COCO_LOWER_BODY, COCO_UPPER_BODY, HalfBody, HeatmapTarget, TopDownAffine,
                        box_to_centre_scale, crop_matrix)
from .random import get_rng, sample_rng, seed
