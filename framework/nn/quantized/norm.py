"""Int8 batch norm alone (BatchNorm2d, BnReLU2d): the eval affine as the int8 depthwise 1x1
convolution (qat/norm.py says why that is exact), on the depthwise kernel of `conv.Conv2d`."""
from .conv import Conv2d


class BatchNorm2d(Conv2d):
    """Int8 BN: (N, C, H, W) QArray -> (N, C, H, W) QArray, per-channel scale and shift (+ReLU)."""

    @classmethod
    def from_qat(cls, qat):
        m = cls()
        m.in_channels = m.out_channels = m.groups = qat.num_features
        m.kernel_size, m.stride, m.dilation = (1, 1), (1, 1), (1, 1)
        m.padding = (0, 0, 0, 0)
        m.set_weights(qat)
        m.pack()
        return m


class BnReLU2d(BatchNorm2d):
    pass
