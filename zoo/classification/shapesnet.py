"""ShapesNet: a tiny conv net for the generated shapes data (`tianyuan.datasets.synthetic`),
the model of `make demo` and the smoke experiments. Not a paper model: three conv-BN-ReLU
stages (two with 2x2 max pooling), global pooling, a linear classifier — ~25k parameters,
~100 % on 10 shape classes at 32x32 after a minute of CPU training.

>>> import tianyuan as ty
>>> from tianyuan.zoo import get_model
>>> get_model("shapesnet")(ty.randn(2, 3, 32, 32)).shape
(2, 10)
"""
from tianyuan import nn

from ..registry import classification_card, register_model
from .common import Classifier, conv_bn_act, seq_groups

# pixels in 0..255, (x - 127.5) / 64 (trainers/conf/data/shapes.yaml)
SHAPES_PREPROCESSING = {"resize": None, "crop": None, "pixel_scale": 1.0,
                        "mean": [127.5, 127.5, 127.5], "std": [64.0, 64.0, 64.0],
                        "channels": "RGB"}


class ShapesNet(Classifier):
    """QAT-ready: stubs at the ends, each conv-BN-ReLU fusable (`fuse_groups`)."""

    def __init__(self, num_classes=10, width=16):
        super().__init__()
        self.num_classes = num_classes
        self.quant, self.dequant = nn.QuantStub(), nn.DequantStub()
        self.features = nn.Sequential(
            conv_bn_act(3, width, 3), nn.MaxPool2d(2),                  # (N, w, 16, 16)
            conv_bn_act(width, 2 * width, 3), nn.MaxPool2d(2),          # (N, 2w, 8, 8)
            conv_bn_act(2 * width, 4 * width, 3),                       # (N, 4w, 8, 8)
            nn.AdaptiveAvgPool2d(1), nn.Flatten())                      # (N, 4w)
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        return self.dequant(self.fc(self.features(self.quant(x))))

    def fuse_groups(self):
        return [group for i in (0, 2, 4) for group in seq_groups(f"features.{i}",
                                                                 self.features[i])]


shapesnet = register_model("shapesnet", ShapesNet, classification_card(
    input_size=(3, 32, 32), dataset="shapes (generated, tianyuan.datasets.synthetic)",
    num_classes=10, preprocessing=SHAPES_PREPROCESSING,
    notes="a demo/smoke model, not a paper architecture"))
