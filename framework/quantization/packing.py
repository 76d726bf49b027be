"""int8 weights packed once for the native kernels (`kernels.py`): `pack_weights` gives a
`PackedWeight`, whose other layouts (AMX tiles, the channels-last engine, the narrow AVX2
form, a linear weight as a 1x1 convolution's) are made on first use and kept.
"""
import numpy as np

from .. import _C


class PackedWeight:
    """int8 weights packed once: (N, K) for the GEMM (layout in framework/csrc/int8_gemm/int8_gemm.h),
    (OC, C/groups, kh, kw) for the convolution (framework/csrc/int8_cgemm/int8_cgemm.h).

    shape: the original weight shape, (N, K) for linear or (OC, C/groups, kh, kw) for conv.
    Depthwise convolutions (C/groups == 1, groups > 1) keep the raw weights.
    `narrow` is the conv weights' form for the AVX2 tile without VNNI, made on first use.
    """

    def __init__(self, w, groups=1):
        w = np.ascontiguousarray(w, np.int8) if np.asarray(w).dtype == np.int8 else None
        if w is None or w.ndim not in (2, 4) or w.shape[0] % groups:
            raise ValueError("pack_weights: w must be int8 (N, K) or (OC, C/groups, kh, kw) "
                             f"with OC divisible by groups={groups}")
        self.shape, self.groups = tuple(w.shape), int(groups)
        self.depthwise = w.ndim == 4 and groups > 1 and w.shape[1] == 1
        self._w4 = w if w.ndim == 4 and groups == 1 else None
        self._w2 = w if w.ndim == 2 else None
        self._amx, self._narrow, self._nhwc, self._conv = None, None, None, None
        if self.depthwise:
            self.raw, self.packed, self.row_sums = w, None, None
        else:
            self.raw = None
            per_group = (groups, w.shape[0] // groups) + (
                (w.shape[1], w.shape[2] * w.shape[3]) if w.ndim == 4 else (-1,))
            pack = _C.int8_pack_conv_weights if w.ndim == 4 else _C.int8_pack_weights
            packed, self.row_sums = pack(w.reshape(per_group))
            self.packed = _aligned(packed)

    def __setstate__(self, state):
        # a copy (deepcopy, pickle) gets numpy's alignment: align the packed buffers again
        self.__dict__.update(state)
        self.__dict__.pop("narrow", None)  # a bool before the narrow form replaced it
        self.__dict__.setdefault("_narrow", None)
        self.__dict__.setdefault("_nhwc", None)
        self.__dict__.setdefault("_w2", None)
        self.__dict__.setdefault("_conv", None)
        for key in ("packed", "_amx", "_nhwc"):
            if getattr(self, key, None) is not None:
                setattr(self, key, _aligned(getattr(self, key)))
        if self._narrow:
            same = np.array_equal(self._narrow[0], self.packed)
            self._narrow = (self.packed if same else _aligned(self._narrow[0]),) + tuple(
                self._narrow[1:])

    @property
    def out_channels(self):
        return self.shape[0]

    @property
    def amx(self):
        """The AMX tiles' layout (framework/csrc/int8_amx/int8_amx.h), packed on first use; None
        where they cannot run this weight (groups 1, C a multiple of 64, OC of 32)."""
        if self._amx is None and self._w4 is not None and self.shape[1] % 64 == 0 and (
                self.shape[0] % 32 == 0):
            self._amx = _aligned(_C.int8_pack_conv_weights_amx(self._w4))
        return self._amx

    @property
    def as_conv(self):
        """A linear weight (N, K) packed as that of a 1x1 convolution (N, K, 1, 1), made on
        first use (PreparedLinear's AMX path); None for conv weights."""
        if self._conv is None and self._w2 is not None:
            self._conv = PackedWeight(self._w2.reshape(self._w2.shape + (1, 1)))
        return self._conv

    @property
    def nhwc(self):
        """The channels-last engine's layout (framework/csrc/int8_conv/int8_conv_nhwc.h), packed on first
        use; None where it cannot run this weight (groups 1 only)."""
        if self._nhwc is None and self._w4 is not None:
            self._nhwc = _aligned(_C.int8_pack_conv_weights_nhwc(self._w4))
        return self._nhwc

    @property
    def narrow(self):
        """The narrow form for the AVX2 tile without VNNI (framework/csrc/int8_cgemm/int8_cgemm.h,
        NarrowWeights): (packed s8, res_ptr s32 (OC + 1,), res s32), made on first use; None
        for linear and depthwise weights, and where the residual holds more than
        NARROW_MAX_RESIDUAL of the rows' k-quads (the tile splitting the activations then
        wins). With 7-bit weights (`reduce_range`) the residual is empty."""
        if self._narrow is None:
            self._narrow = False
            if len(self.shape) == 4 and not self.depthwise:
                form = split_narrow(self)
                quads = self.packed.size // 4
                if form[2].size // 2 <= NARROW_MAX_RESIDUAL * quads:
                    # no residual (7-bit weights): the packed bytes themselves
                    bytes_ = self.packed if form[2].size == 0 else _aligned(form[0])
                    self._narrow = (bytes_,) + form[1:]
        return self._narrow or None

    @property
    def nbytes(self):
        extra = [a for a in (self._amx, self._nhwc) + (self._narrow or ())
                 if a is not None and a is not self.packed]
        return (self.raw.nbytes if self.depthwise
                else self.packed.nbytes + self.row_sums.nbytes + sum(a.nbytes for a in extra) +
                (self._conv.nbytes if self._conv is not None else 0))


def _aligned(a):
    """A copy of `a` whose data starts on a 64-byte boundary: the kernels read packed weights
    in 64-byte rows, and a row across two cache lines makes an AMX tile load far slower
    (numpy's own buffers start on 16-byte boundaries)."""
    buf = np.empty(a.nbytes + 64, np.uint8)
    off = -buf.ctypes.data % 64
    out = buf[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


# The narrow tile's residual costs about two dense k-quads a quad (one row, not six, per
# activation load, and an index); past this share of quads the split tile is faster.
NARROW_MAX_RESIDUAL = 0.25


def split_narrow(packed):
    """A conv PackedWeight's narrow form, whatever its residual: (packed s8, res_ptr s32
    (OC + 1,), res s32 (2 * entries,)); `PackedWeight.narrow` keeps it where it pays."""
    oc, cg, kh, kw = packed.shape
    kp = -(-cg * kh * kw // 4) * 4
    return _C.int8_split_narrow(packed.packed, packed.groups, oc // packed.groups, kp)


def pack_weights(w, groups=1):
    """int8 (N, K) or (OC, C/groups, kh, kw) -> PackedWeight (packed buffer + row sums)."""
    return PackedWeight(w, groups)


class PackedDeconvWeight:
    """int8 ConvTranspose2d weights (C, OC/groups, kh, kw) packed once for the native
    transposed conv (layout in framework/csrc/int8_deconv/int8_deconv.h: per group, W^T with
    rows (kh, kw, OC/groups) in the GEMM's panels, and their row sums)."""

    def __init__(self, w, groups=1):
        w = np.asarray(w)
        if w.dtype != np.int8 or w.ndim != 4 or w.shape[0] % groups:
            raise ValueError("pack_deconv_weights: w must be int8 (C, OC/groups, kh, kw) with C "
                             f"divisible by groups={groups}, got {w.dtype} {w.shape}")
        self.shape, self.groups = tuple(w.shape), int(groups)
        packed, self.row_sums = _C.int8_pack_deconv_weights(np.ascontiguousarray(w), groups)
        self.packed = _aligned(packed)

    @property
    def out_channels(self):
        return self.shape[1] * self.groups

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.packed = _aligned(self.packed)   # a copy gets numpy's alignment: align again


def pack_deconv_weights(w, groups=1):
    """int8 (C, OC/groups, kh, kw) -> PackedDeconvWeight."""
    return PackedDeconvWeight(w, groups)
