"""Every op, as functions (`import tianyuan.functional as F`). Modules are thin wrappers."""
from .math import (abs, add, argmax, argmin, broadcast_to, clip, concat, div, exp, expand_dims,
                   flatten, gather, log, matmul, max, maximum, mean, min, minimum, mul, neg, pad,
                   permute, pow, reshape, split, sqrt, squeeze, stack, sub, sum, transpose, var,
                   where)
from .activation import (dropout, hsigmoid, hswish, leaky_relu, log_softmax, relu, relu6, sigmoid,
                         softmax, softplus, tanh)
from .loss import (binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss,
                   sigmoid_focal_loss, smooth_l1_loss)
from .normalization import batch_norm, linear
from .conv import conv2d, conv2d_affine_act, conv_transpose2d
from .pooling import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from .roi import multi_scale_roi_align, roi_align
from .image import crop, cvt_color, flip, normalize, resize, to_hwc, to_nchw, warp_affine
from .vision import (batched_nms, box_area, box_iou, channel_shuffle, clip_boxes, concat_shuffle,
                     interpolate, nms, remove_small_boxes)
