"""Anchors: torchvision's `AnchorGenerator` (models/detection/anchor_utils.py), in numpy.

Each level has its cell anchors, one per (aspect ratio, size) pair, ratio-major, centred on
0 and rounded (half to even) as torchvision rounds them: for ratio r and size s,
w = s / sqrt(r), h = s * sqrt(r), the box (-w, -h, w, h) / 2, all in float32. A level's
anchors are its cell anchors shifted to every grid point (x * stride, y * stride), row-major,
all of a point's anchors together: the order in which the heads' (N, A * K, H, W) maps are
flattened to (N, H * W * A, K). Strides are the padded image's size // the level's grid
size, per axis. Anchors are the same for every image of a batch.

>>> gen = AnchorGenerator(((32,),), ((0.5, 1.0, 2.0),))
>>> gen.cell_anchors[0].tolist()
[[-23.0, -11.0, 23.0, 11.0], [-16.0, -16.0, 16.0, 16.0], [-11.0, -23.0, 11.0, 23.0]]
>>> gen((64, 64), [(2, 2)]).shape        # 2 x 2 points x 3 anchors, stride 32
(12, 4)
"""
import numpy as np

from tianyuan import nn


def cell_anchors(sizes, aspect_ratios):
    """(len(ratios) * len(sizes), 4) float32 zero-centred anchors (torchvision's
    generate_anchors)."""
    scales = np.asarray(sizes, np.float32)
    ratios = np.asarray(aspect_ratios, np.float32)
    h_ratios = np.sqrt(ratios)
    w_ratios = np.float32(1) / h_ratios
    ws = (w_ratios[:, None] * scales[None, :]).reshape(-1)
    hs = (h_ratios[:, None] * scales[None, :]).reshape(-1)
    return np.round(np.stack([-ws, -hs, ws, hs], axis=1) / np.float32(2))


def grid_anchors(base, grid_size, stride):
    """(H * W * A, 4) float32: the (A, 4) cell anchors at every point of an (H, W) grid."""
    (grid_h, grid_w), (stride_h, stride_w) = grid_size, stride
    shift_x = np.arange(grid_w, dtype=np.int64) * stride_w
    shift_y = np.arange(grid_h, dtype=np.int64) * stride_h
    shift_y, shift_x = np.meshgrid(shift_y, shift_x, indexing="ij")
    shift_x, shift_y = shift_x.reshape(-1), shift_y.reshape(-1)
    shifts = np.stack([shift_x, shift_y, shift_x, shift_y], axis=1).astype(np.float32)
    return (shifts[:, None, :] + base[None, :, :]).reshape(-1, 4)


class AnchorGenerator(nn.Module):
    """Anchors for feature levels: `sizes[i]` and `aspect_ratios[i]` are level i's (tuples).
    No state: the state dict is unchanged (torchvision's holds none either)."""

    def __init__(self, sizes=((128, 256, 512),), aspect_ratios=((0.5, 1.0, 2.0),)):
        super().__init__()
        if len(sizes) != len(aspect_ratios):
            raise ValueError(f"AnchorGenerator: {len(sizes)} levels of sizes but "
                             f"{len(aspect_ratios)} of aspect ratios; give one tuple each "
                             "per feature level")
        self.sizes = tuple(tuple(s) for s in sizes)
        self.aspect_ratios = tuple(tuple(a) for a in aspect_ratios)
        self.cell_anchors = [cell_anchors(s, a) for s, a in zip(self.sizes, self.aspect_ratios)]

    def num_anchors_per_location(self):
        return [len(s) * len(a) for s, a in zip(self.sizes, self.aspect_ratios)]

    def per_level(self, image_size, grid_sizes):
        """[(H_i * W_i * A_i, 4) float32] for a padded batch of `image_size` (H, W) and the
        levels' grid sizes [(H_i, W_i)]."""
        if len(grid_sizes) != len(self.cell_anchors):
            raise ValueError(f"AnchorGenerator: {len(grid_sizes)} feature levels, but anchors "
                             f"are defined for {len(self.cell_anchors)}")
        out = []
        for base, (grid_h, grid_w) in zip(self.cell_anchors, grid_sizes):
            stride = (image_size[0] // grid_h, image_size[1] // grid_w)
            out.append(grid_anchors(base, (grid_h, grid_w), stride))
        return out

    def forward(self, image_size, grid_sizes):
        """(sum_i H_i * W_i * A_i, 4) float32, the levels' anchors one after another."""
        return np.concatenate(self.per_level(image_size, grid_sizes), axis=0)

    def extra_repr(self):
        return f"sizes={self.sizes}, aspect_ratios={self.aspect_ratios}"


def retinanet_anchor_generator(base_sizes=(32, 64, 128, 256, 512), aspect_ratios=(0.5, 1.0, 2.0)):
    """RetinaNet's (torchvision's _default_anchorgen): per level, sizes x * 2^0, 2^(1/3),
    2^(2/3), truncated to ints (32, 40, 50 at P3), and the three ratios."""
    sizes = tuple((x, int(x * 2 ** (1.0 / 3)), int(x * 2 ** (2.0 / 3))) for x in base_sizes)
    return AnchorGenerator(sizes, (tuple(aspect_ratios),) * len(sizes))
