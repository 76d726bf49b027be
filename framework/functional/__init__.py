"""Every op, as functions (`import tianyuan.functional as F`). Modules are thin wrappers."""
from .math import (abs, add, argmax, argmin, broadcast_to, clip, concat, div, exp, expand_dims,
                   flatten, gather, log, matmul, max, maximum, mean, min, minimum, mul, neg, pad,
                   permute, pow, reshape, split, sqrt, squeeze, stack, sub, sum, transpose, var,
                   where)
