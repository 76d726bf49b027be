"""Inception-v3's layer tables and the state-dict spec of its two published files.

torchvision's `inception_v3_google-0cc3c7bd.pth` (1000 classes, with the auxiliary head)
and pytorch-fid's `pt_inception-2015-12-05-6726825d.pth` (the TF 2015 graph: 1008 classes,
no auxiliary head) both use torchvision's `Inception3` names: `Conv2d_1a_3x3.conv.weight`,
`Mixed_5b.branch5x5_1.bn.running_mean`, `AuxLogits.fc.weight`, `fc.bias`. Ours are the
same, so the name map is the identity (the "torchvision" one); missing `num_batches_tracked`
are filled with 0 and every name and shape is checked against `inception_spec`.

The zoo builds its blocks from these tables (`zoo/gan/inception.py`), so the model and the
file check share one source.

>>> spec = inception_spec("fid_inception_v3")
>>> spec["Mixed_6b.branch7x7_2.conv.weight"], spec["fc.weight"]
(((128, 128, 1, 7), 'float32'), ((1008, 2048), 'float32'))
"""
from collections import OrderedDict

# block kind -> its BasicConv2d layers (name, in, out, kernel, stride, padding); "in" is the
# block's input width, "pf" InceptionA's pool features, "c7" InceptionC's 7x7 width
BLOCKS = {
    "A": [("branch1x1", "in", 64, 1, 1, 0), ("branch5x5_1", "in", 48, 1, 1, 0),
          ("branch5x5_2", 48, 64, 5, 1, 2), ("branch3x3dbl_1", "in", 64, 1, 1, 0),
          ("branch3x3dbl_2", 64, 96, 3, 1, 1), ("branch3x3dbl_3", 96, 96, 3, 1, 1),
          ("branch_pool", "in", "pf", 1, 1, 0)],
    "B": [("branch3x3", "in", 384, 3, 2, 0), ("branch3x3dbl_1", "in", 64, 1, 1, 0),
          ("branch3x3dbl_2", 64, 96, 3, 1, 1), ("branch3x3dbl_3", 96, 96, 3, 2, 0)],
    "C": [("branch1x1", "in", 192, 1, 1, 0), ("branch7x7_1", "in", "c7", 1, 1, 0),
          ("branch7x7_2", "c7", "c7", (1, 7), 1, (0, 3)),
          ("branch7x7_3", "c7", 192, (7, 1), 1, (3, 0)),
          ("branch7x7dbl_1", "in", "c7", 1, 1, 0),
          ("branch7x7dbl_2", "c7", "c7", (7, 1), 1, (3, 0)),
          ("branch7x7dbl_3", "c7", "c7", (1, 7), 1, (0, 3)),
          ("branch7x7dbl_4", "c7", "c7", (7, 1), 1, (3, 0)),
          ("branch7x7dbl_5", "c7", 192, (1, 7), 1, (0, 3)),
          ("branch_pool", "in", 192, 1, 1, 0)],
    "D": [("branch3x3_1", "in", 192, 1, 1, 0), ("branch3x3_2", 192, 320, 3, 2, 0),
          ("branch7x7x3_1", "in", 192, 1, 1, 0),
          ("branch7x7x3_2", 192, 192, (1, 7), 1, (0, 3)),
          ("branch7x7x3_3", 192, 192, (7, 1), 1, (3, 0)),
          ("branch7x7x3_4", 192, 192, 3, 2, 0)],
    "E": [("branch1x1", "in", 320, 1, 1, 0), ("branch3x3_1", "in", 384, 1, 1, 0),
          ("branch3x3_2a", 384, 384, (1, 3), 1, (0, 1)),
          ("branch3x3_2b", 384, 384, (3, 1), 1, (1, 0)),
          ("branch3x3dbl_1", "in", 448, 1, 1, 0), ("branch3x3dbl_2", 448, 384, 3, 1, 1),
          ("branch3x3dbl_3a", 384, 384, (1, 3), 1, (0, 1)),
          ("branch3x3dbl_3b", 384, 384, (3, 1), 1, (1, 0)),
          ("branch_pool", "in", 192, 1, 1, 0)],
    "Aux": [("conv0", "in", 128, 1, 1, 0), ("conv1", 128, 768, 5, 1, 0)],
}
# the stem's BasicConv2d layers (name, in, out, kernel, stride, padding); max-pools 3/2
# after Conv2d_2b_3x3 and Conv2d_4a_3x3
STEM = [("Conv2d_1a_3x3", 3, 32, 3, 2, 0), ("Conv2d_2a_3x3", 32, 32, 3, 1, 0),
        ("Conv2d_2b_3x3", 32, 64, 3, 1, 1), ("Conv2d_3b_1x1", 64, 80, 1, 1, 0),
        ("Conv2d_4a_3x3", 80, 192, 3, 1, 0)]
# the mixed blocks in order: (name, kind, input width, block widths); the auxiliary head
# reads Mixed_6e's 768 channels
MIXED = [("Mixed_5b", "A", 192, {"pf": 32}), ("Mixed_5c", "A", 256, {"pf": 64}),
         ("Mixed_5d", "A", 288, {"pf": 64}), ("Mixed_6a", "B", 288, {}),
         ("Mixed_6b", "C", 768, {"c7": 128}), ("Mixed_6c", "C", 768, {"c7": 160}),
         ("Mixed_6d", "C", 768, {"c7": 160}), ("Mixed_6e", "C", 768, {"c7": 192}),
         ("Mixed_7a", "D", 768, {}), ("Mixed_7b", "E", 1280, {}), ("Mixed_7c", "E", 2048, {})]
FEATURES = 2048           # Mixed_7c's width: the global pool FID reads
FID_CLASSES = 1008        # the TF graph's softmax: 1000 ImageNet classes + 8 unused
# arch -> (classes, auxiliary head); the FID graph's class count is fixed
INCEPTIONS = {"inception_v3": (None, True), "fid_inception_v3": (FID_CLASSES, False)}


def block_convs(kind, in_ch, widths=None):
    """A block's layers with its widths filled in: [(name, in, out, kernel, stride, pad)]."""
    values = {"in": in_ch, **(widths or {})}
    return [(name, values.get(cin, cin), values.get(cout, cout), k, s, p)
            for name, cin, cout, k, s, p in BLOCKS[kind]]


def _basic_conv(spec, name, in_ch, out_ch, kernel):
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    spec[f"{name}.conv.weight"] = ((out_ch, in_ch, kh, kw), "float32")
    for field in ("weight", "bias", "running_mean", "running_var"):
        spec[f"{name}.bn.{field}"] = ((out_ch,), "float32")
    spec[f"{name}.bn.num_batches_tracked"] = ((), "int64")


def _linear(spec, name, out_f, in_f):
    spec[f"{name}.weight"] = ((out_f, in_f), "float32")
    spec[f"{name}.bias"] = ((out_f,), "float32")


def inception_spec(arch, num_classes=1000):
    """OrderedDict {name: (shape, dtype name)} in torchvision's order (the aux head after
    Mixed_6e). fid_inception_v3 always has 1008 classes."""
    fixed, aux = INCEPTIONS[arch]
    num_classes = fixed or num_classes
    spec = OrderedDict()
    for name, cin, cout, k, _, _ in STEM:
        _basic_conv(spec, name, cin, cout, k)
    for block, kind, in_ch, widths in MIXED:
        for name, cin, cout, k, _, _ in block_convs(kind, in_ch, widths):
            _basic_conv(spec, f"{block}.{name}", cin, cout, k)
        if block == "Mixed_6e" and aux:
            for name, cin, cout, k, _, _ in block_convs("Aux", 768):
                _basic_conv(spec, f"AuxLogits.{name}", cin, cout, k)
            _linear(spec, "AuxLogits.fc", num_classes, 768)
    _linear(spec, "fc", num_classes, FEATURES)
    return spec
