"""Inception-v3 (Szegedy et al., 1512.00567) in the two forms image metrics use.

- `inception_v3`: torchvision's `Inception3` (1000 classes, the auxiliary head), with its
  names and shapes (`Conv2d_1a_3x3.conv`, `.bn`, `Mixed_5b.branch5x5_1`, `AuxLogits`, `fc`),
  so `inception_v3_google-0cc3c7bd.pth` loads by name. With weights it transforms its
  ImageNet-normalised input as torchvision's does (`transform_input`).
- `fid_inception_v3` (`FIDInception`): the network of pytorch-fid's
  `pt_inception-2015-12-05-6726825d.pth`, the TF 2015 Inception graph FID and IS are defined
  on: 1008 classes, no auxiliary head, and TF's pooling quirks: blocks A, C and the first E
  average-pool without counting padding, the last E max-pools. It takes RGB in [0, 1] of any
  size, resizes bilinearly to 299 (align_corners False, no antialias) and scales to [-1, 1],
  as pytorch-fid's `InceptionV3` does. `features_and_logits` gives the 2048-d final pool
  (FID's features) and the logits.

Both are plain float models in the zoo's conventions (activations, concats and pools are
modules; `fuse_groups` lists conv + bn + relu), so they trace and fuse like the
classifiers. The smallest input is 75 x 75 (stride-2 valid convolutions).

>>> import tianyuan as ty
>>> from tianyuan.zoo import FIDInception
>>> model = FIDInception().eval()                       # random weights; weights=... loads
>>> feats, logits = model.features_and_logits(ty.rand(2, 3, 32, 32))   # resized to 299
>>> feats.shape, logits.shape
((2, 2048), (2, 1008))
"""
from tianyuan import nn
from tianyuan.weights import preprocessing
from tianyuan.weights.inception_maps import FID_CLASSES, MIXED, STEM, block_convs

from ..classification.common import load_into
from ..registry import register_model

FID_SIZE = 299      # pytorch-fid resizes every input to 299 x 299


class BasicConv2d(nn.Module):
    """conv (no bias) -> BN (eps 0.001, TF's) -> ReLU."""

    def __init__(self, in_ch, out_ch, kernel_size, stride=1, padding=0):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel_size, stride, padding, bias=False)
        self.bn = nn.BatchNorm2d(out_ch, eps=0.001)
        self.relu = nn.ReLU()

    def forward(self, x):
        return nn.batch_norm_act(self.bn, self.relu, self.conv(x))


def _branch_pool(kind):
    """The 3x3 stride-1 pool before a block's pool branch: "avg" (padding counted, the
    paper's and torchvision's), "avg_tf" (TF: padding not counted), "max" (the FID graph's
    last block)."""
    if kind == "max":
        return nn.MaxPool2d(3, 1, 1)
    if kind not in ("avg", "avg_tf"):
        raise ValueError(f"Inception: pool must be 'avg', 'avg_tf' or 'max', got {kind!r}")
    return nn.AvgPool2d(3, 1, 1, count_include_pad=kind == "avg")


class _Mixed(nn.Module):
    """A block of parallel branches, each a chain of named BasicConv2d layers, built from
    its row of weights/inception_maps.py (the table the weight files are checked against)."""

    def __init__(self, kind, in_ch, widths=None):
        super().__init__()
        for name, cin, cout, kernel, stride, padding in block_convs(kind, in_ch, widths):
            setattr(self, name, BasicConv2d(cin, cout, kernel, stride, padding))

    def _chain(self, x, *names):
        for name in names:
            x = getattr(self, name)(x)
        return x

    def fuse_groups(self, prefix):
        return [[f"{prefix}.{n}.conv", f"{prefix}.{n}.bn", f"{prefix}.{n}.relu"]
                for n, m in self._modules.items() if isinstance(m, BasicConv2d)]


class InceptionA(_Mixed):
    """35 x 35: 1x1 | 1x1 -> 5x5 | 1x1 -> 3x3 -> 3x3 | pool -> 1x1 (paper fig. 5)."""

    def __init__(self, in_ch, pool_features, pool="avg"):
        super().__init__("A", in_ch, {"pf": pool_features})
        self.pool, self.cat = _branch_pool(pool), nn.Concat(1)

    def forward(self, x):   # (N, C, 35, 35) -> (N, 224 + pool_features, 35, 35)
        return self.cat([self.branch1x1(x), self._chain(x, "branch5x5_1", "branch5x5_2"),
                         self._chain(x, "branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"),
                         self.branch_pool(self.pool(x))])


class InceptionB(_Mixed):
    """35 -> 17 grid reduction: 3x3/2 | 1x1 -> 3x3 -> 3x3/2 | max-pool/2."""

    def __init__(self, in_ch):
        super().__init__("B", in_ch)
        self.pool, self.cat = nn.MaxPool2d(3, 2), nn.Concat(1)

    def forward(self, x):   # (N, 288, 35, 35) -> (N, 768, 17, 17)
        return self.cat([self.branch3x3(x),
                         self._chain(x, "branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"),
                         self.pool(x)])


class InceptionC(_Mixed):
    """17 x 17 with factorised 7x7 (1x7 and 7x1) convolutions (paper fig. 6)."""

    def __init__(self, in_ch, channels_7x7, pool="avg"):
        super().__init__("C", in_ch, {"c7": channels_7x7})
        self.pool, self.cat = _branch_pool(pool), nn.Concat(1)

    def forward(self, x):   # -> (N, 768, 17, 17)
        dbl = [f"branch7x7dbl_{i}" for i in range(1, 6)]
        return self.cat([self.branch1x1(x),
                         self._chain(x, "branch7x7_1", "branch7x7_2", "branch7x7_3"),
                         self._chain(x, *dbl), self.branch_pool(self.pool(x))])


class InceptionD(_Mixed):
    """17 -> 8 grid reduction: 1x1 -> 3x3/2 | 1x1 -> 1x7 -> 7x1 -> 3x3/2 | max-pool/2."""

    def __init__(self, in_ch):
        super().__init__("D", in_ch)
        self.pool, self.cat = nn.MaxPool2d(3, 2), nn.Concat(1)

    def forward(self, x):   # (N, 768, 17, 17) -> (N, 1280, 8, 8)
        seven = [f"branch7x7x3_{i}" for i in range(1, 5)]
        return self.cat([self._chain(x, "branch3x3_1", "branch3x3_2"), self._chain(x, *seven),
                         self.pool(x)])


class InceptionE(_Mixed):
    """8 x 8 with expanded filter banks: the 3x3 branches split into 1x3 and 3x1 (fig. 7)."""

    def __init__(self, in_ch, pool="avg"):
        super().__init__("E", in_ch)
        self.pool = _branch_pool(pool)
        self.cat_3x3, self.cat_3x3dbl, self.cat = nn.Concat(1), nn.Concat(1), nn.Concat(1)

    def forward(self, x):   # -> (N, 2048, 8, 8)
        b3 = self.branch3x3_1(x)
        b3 = self.cat_3x3([self.branch3x3_2a(b3), self.branch3x3_2b(b3)])
        dbl = self._chain(x, "branch3x3dbl_1", "branch3x3dbl_2")
        dbl = self.cat_3x3dbl([self.branch3x3dbl_3a(dbl), self.branch3x3dbl_3b(dbl)])
        return self.cat([self.branch1x1(x), b3, dbl, self.branch_pool(self.pool(x))])


class InceptionAux(_Mixed):
    """The auxiliary classifier on the 17 x 17 grid (training only; torchvision's weights
    carry it)."""

    def __init__(self, in_ch, num_classes):
        super().__init__("Aux", in_ch)
        self.pool = nn.AvgPool2d(5, 3)
        self.avgpool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten(1)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x):   # (N, 768, 17, 17) -> (N, 768, 5, 5) -> (N, num_classes)
        x = self._chain(self.pool(x), "conv0", "conv1")
        return self.fc(self.flatten(self.avgpool(x)))


KINDS = {"A": InceptionA, "B": InceptionB, "C": InceptionC, "D": InceptionD, "E": InceptionE}
_WIDTH_ARGS = {"A": "pf", "C": "c7"}
# The FID graph's branch pools (TF's): average without counting padding ("avg_tf"), except
# in Mixed_7c, which max-pools; the paper's and torchvision's count the padding ("avg").
FID_POOLS = {"Mixed_7c": "max"}
_STEM_ORDER = ["Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "maxpool1", "Conv2d_3b_1x1",
               "Conv2d_4a_3x3", "maxpool2"]


def _block(name, kind, in_ch, widths, fid):
    """Mixed block `name` of `kind` ("A".."E") with the fid graph's pools or the paper's."""
    args = [in_ch] + ([widths[_WIDTH_ARGS[kind]]] if kind in _WIDTH_ARGS else [])
    if kind in ("B", "D"):   # grid reductions: a plain max-pool branch
        return KINDS[kind](*args)
    return KINDS[kind](*args, pool=FID_POOLS.get(name, "avg_tf") if fid else "avg")


# torchvision's transform_input: ImageNet-normalised input -> the (x - 0.5) / 0.5 the ported
# TF weights expect, per channel: x * std / 0.5 + (mean - 0.5) / 0.5
_MEAN, _STD = preprocessing.IMAGENET_MEAN, preprocessing.IMAGENET_STD


class Inception3(nn.Module):
    """Inception-v3: stem, Mixed_5b..7c, global pool, dropout, fc (torchvision's names).

    fid: the TF 2015 graph's pools (see the module docstring). aux_logits: build the
    auxiliary head (its weights are in torchvision's file; `forward_with_aux` runs it).
    transform_input: map ImageNet-normalised input to [-1, 1] first (torchvision's weights).
    """
    classifier_name = "fc"

    def __init__(self, num_classes=1000, aux_logits=True, transform_input=False, dropout=0.5,
                 fid=False, init_weights=True):
        super().__init__()
        self.num_classes, self.transform_input, self.fid = num_classes, transform_input, fid
        # torchvision's transform_input, a module (jit.trace records it), run where that is set
        self.transform = nn.Rescale([s / 0.5 for s in _STD], [(m - 0.5) / 0.5 for m in _MEAN])
        self.quant = nn.QuantStub()
        for name, *conv in STEM:
            setattr(self, name, BasicConv2d(*conv))
        self.maxpool1, self.maxpool2 = nn.MaxPool2d(3, 2), nn.MaxPool2d(3, 2)
        for name, kind, in_ch, widths in MIXED:
            setattr(self, name, _block(name, kind, in_ch, widths, fid))
            if name == "Mixed_6e" and aux_logits:
                self.AuxLogits = InceptionAux(768, num_classes)
        if not aux_logits:
            self.AuxLogits = None
        self.avgpool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten(1)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(2048, num_classes)
        self.dequant = nn.DequantStub()
        if init_weights:
            self.init_weights()

    def init_weights(self):
        """torchvision's: truncated normal weights (std 0.1; the aux head's conv1 0.01 and fc
        0.001), BN 1 and 0."""
        for name, module in self.named_modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                std = {"AuxLogits.conv1.conv": 0.01, "AuxLogits.fc": 0.001}.get(name, 0.1)
                nn.init.trunc_normal_(module.weight, std=std, a=-2, b=2)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def prepare_input(self, x):
        """What the network sees: torchvision's transform_input, if set."""
        return self.transform(x) if self.transform_input else x

    def _trunk(self, x):
        """(Mixed_6e's output (N, 768, 17, 17), Mixed_7c's (N, 2048, 8, 8)) at 299 x 299."""
        x = self.quant(self.prepare_input(x))
        for name in _STEM_ORDER:
            x = getattr(self, name)(x)
        for name, *_ in MIXED[:8]:
            x = getattr(self, name)(x)
        mid = x
        for name, *_ in MIXED[8:]:
            x = getattr(self, name)(x)
        return mid, x

    def forward_pool(self, x):
        """The 2048-d global average pool (pytorch-fid's "pool3" features), (N, 2048)."""
        return self.flatten(self.avgpool(self._trunk(x)[1]))

    def features_and_logits(self, x):
        """(pool features (N, 2048), logits (N, num_classes)); dropout is off in eval."""
        feats = self.forward_pool(x)
        return feats, self.dequant(self.fc(self.dropout(feats)))

    def forward(self, x):
        return self.features_and_logits(x)[1]

    def forward_with_aux(self, x):
        """(logits, aux logits) for training with the auxiliary loss (the paper's 0.3 x)."""
        if self.AuxLogits is None:
            raise ValueError("Inception3.forward_with_aux: built with aux_logits=False")
        mid, x = self._trunk(x)
        logits = self.fc(self.dropout(self.flatten(self.avgpool(x))))
        return self.dequant(logits), self.AuxLogits(mid)

    def fuse_groups(self):
        groups = [[f"{n}.conv", f"{n}.bn", f"{n}.relu"] for n, *_ in STEM]
        for name, *_ in MIXED:
            groups += getattr(self, name).fuse_groups(name)
        return groups


class FIDInception(Inception3):
    """pytorch-fid's network: 1008 classes, no aux head, TF pools; input RGB in [0, 1].

    resize_input: bilinear to 299 x 299 first (align_corners False); normalize_input: 2x - 1.
    """

    def __init__(self, resize_input=True, normalize_input=True, init_weights=True):
        super().__init__(FID_CLASSES, aux_logits=False, fid=True, init_weights=init_weights)
        self.resize_input, self.normalize_input = resize_input, normalize_input
        self.resize = nn.Upsample(size=(FID_SIZE, FID_SIZE), mode="bilinear",
                                  align_corners=False)
        self.normalize = nn.Rescale(2.0, -1.0)

    def prepare_input(self, x):
        if self.resize_input and tuple(x.shape[2:]) != (FID_SIZE, FID_SIZE):
            x = self.resize(x)
        return self.normalize(x) if self.normalize_input else x


def _inception_v3(*, num_classes=1000, weights=None, pretrained=False, aux_logits=True,
                  transform_input=None, dropout=0.5):
    # torchvision: published weights expect transform_input (ImageNet-normalised input)
    given = weights is not None or pretrained
    transform = given if transform_input is None else transform_input
    model = Inception3(num_classes, aux_logits, transform, dropout)
    return load_into(model, "inception_v3", weights, pretrained)


def _fid_inception_v3(*, weights=None, pretrained=False, resize_input=True,
                      normalize_input=True):
    model = FIDInception(resize_input, normalize_input, init_weights=not (weights or pretrained))
    return load_into(model, "fid_inception_v3", weights, pretrained)


# Not "classification" cards: the classifier sweeps in tests/zoo run at 32 x 32, below
# Inception's 75 x 75; tests/zoo/test_zoo_inception.py covers both. The published numbers
# are the weights manifest's entries.
_TV_CARD = {"task": "image_features", "dataset": "ImageNet-1K", "num_classes": 1000,
            "input_size": (3, 299, 299), "preprocessing": preprocessing.TORCHVISION_INCEPTION}
_FID_CARD = {"task": "image_features", "dataset": "ImageNet-1K (TF 2015 graph)",
             "num_classes": FID_CLASSES, "input_size": (3, FID_SIZE, FID_SIZE),
             "preprocessing": preprocessing.PYTORCH_FID}

inception_v3 = register_model("inception_v3", _inception_v3, _TV_CARD)
fid_inception_v3 = register_model("fid_inception_v3", _fid_inception_v3, _FID_CARD)
