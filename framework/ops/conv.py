"""Convolution primitives: im2col (native, framework/csrc/im2col/im2col.cpp) + GEMM (numpy matmul),
or a direct kernel where one applies (depthwise: framework/csrc/depthwise/depthwise.cpp); the choice
per shape is conv_algo.choose's.

Shapes (G groups; K = kh * kw; L = out_h * out_w; M = images_in_chunk * L):
    Conv2d           x (N, C, H, W), w (Co, C/G, kh, kw), b (Co,) -> (N, Co, out_h, out_w)
    ConvTranspose2d  x (N, Ci, H, W), w (Ci, Co/G, kh, kw), b (Co,) -> (N, Co, out_h, out_w)
Columns are (C*K, M) with rows grouped by channel, so group g's rows are one contiguous
block and `cols.reshape(G, C/G*K, M)` feeds one batched matmul for all groups. The batch is
processed in chunks so a chunk's columns stay under COLUMN_BUDGET bytes.
Arguments arrive normalised by tianyuan.functional.conv: stride/dilation pairs, padding
(top, bottom, left, right). Numpy twins of the kernels: conv_ref.py.
"""
import numpy as np

from .. import _C
from ..autograd import Function
from . import conv_algo, winograd
from .conv_algo import algorithm_choices, force_algorithm  # noqa: F401  (public here)
from .conv_ref import conv_out_size

COLUMN_BUDGET = 64 << 20  # bytes of im2col columns per batch chunk


def fma_peak(steps=10_000_000, repeat=5):
    """This machine's float32 peak in operations per second (2 per multiply-add) on the
    current ISA path: the median of `repeat` runs of a register-only FMA loop (`steps` x 12
    vfmadd231ps, on zmm from avx512 up, ymm on avx2 and avxvnni) on every kernel thread,
    after one run that wakes the threads. RuntimeError on the generic path."""
    if steps < 1 or repeat < 1:
        raise ValueError(f"fma_peak: steps and repeat must be >= 1, got {steps}, {repeat}")
    _C.testing.fma_peak(int(steps))
    return float(np.median([_C.testing.fma_peak(int(steps)) for _ in range(repeat)]))


def batch_chunks(n, bytes_per_image):
    """Slices of the batch whose columns fit in COLUMN_BUDGET (at least one image each)."""
    step = max(1, COLUMN_BUDGET // max(1, bytes_per_image))
    return [slice(s, min(n, s + step)) for s in range(0, n, step)]


def to_columns(x, groups):
    """(n, C, h, w) -> (G, C/G, n*h*w): the pointwise 'im2col' is only a transpose."""
    n, c = x.shape[:2]
    return x.reshape(n, c, -1).transpose(1, 0, 2).reshape(groups, c // groups, -1)


def from_columns(cols, n, shape):
    """(G, ..., n*h*w) -> (n, C, h, w), inverse of to_columns; `shape` is (C, h, w)."""
    c = shape[0]
    return cols.reshape(c, n, -1).transpose(1, 0, 2).reshape((n,) + tuple(shape))


class _Geometry:
    """Kernel, stride, (top, bottom, left, right) padding and dilation of one convolution."""

    def __init__(self, kernel, stride, padding, dilation):
        self.kernel, self.stride = tuple(kernel), tuple(stride)
        self.padding, self.dilation = tuple(padding), tuple(dilation)

    def out_size(self, h, w):
        (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw) = (
            self.kernel, self.stride, self.padding, self.dilation)
        return conv_out_size(h, kh, sh, pt, pb, dh), conv_out_size(w, kw, sw, pl, pr, dw)

    @property
    def pointwise(self):
        return self.kernel == (1, 1) and self.stride == (1, 1) and not any(self.padding)

    def im2col(self, x, groups):
        """x (n, C, h, w) -> (G, C/G*K, n*L)."""
        if self.pointwise:
            return to_columns(x, groups)
        cols = _C.im2col(x, self.kernel, self.stride, self.padding, self.dilation)
        return cols.reshape(groups, cols.shape[0] // groups, -1)

    def col2im(self, cols, shape):
        """(G, C/G*K, n*L) -> summed (n, C, h, w) for an input of `shape`."""
        if self.pointwise:
            return from_columns(cols, shape[0], shape[1:])
        return _C.col2im(cols.reshape(-1, cols.shape[-1]), tuple(shape), self.kernel,
                         self.stride, self.padding, self.dilation)

    def column_bytes(self, c, h, w, itemsize):
        """Bytes of columns one image of (c, h, w) produces."""
        oh, ow = self.out_size(h, w)
        return c * self.kernel[0] * self.kernel[1] * oh * ow * itemsize


def _forward(algo, x, w, b, geo, groups):
    """Convolution of numpy arrays with algorithm `algo` (one of conv_algo.ALGORITHMS)."""
    if algo == "depthwise_direct":
        return _C.depthwise_conv2d(x, w, b, geo.stride, geo.padding, geo.dilation)
    if algo == "gemm_direct":
        return _C.conv2d_gemm(x, w, None, b, geo.stride, geo.padding, geo.dilation)
    if algo == "winograd_f2x2":
        out = winograd.conv2d(x, w, geo.padding)
        return out if b is None else out + b.reshape(1, -1, 1, 1)
    n, c, h, wd = x.shape
    co = w.shape[0]
    oh, ow = geo.out_size(h, wd)
    wg = w.reshape(groups, co // groups, -1)  # (G, Co/G, C/G*K)
    if algo == "gemm_1x1":
        # (G, Co/G, C/G) @ (n, G, C/G, L): no column copy at all
        out = np.matmul(wg, x.reshape(n, groups, c // groups, h * wd)).reshape(n, co, oh, ow)
    else:
        out = np.empty((n, co, oh, ow), x.dtype)
        for sl in batch_chunks(n, geo.column_bytes(c, h, wd, x.itemsize)):
            y = np.matmul(wg, geo.im2col(x[sl], groups))  # (G, Co/G, nb*L)
            out[sl] = from_columns(y, y.shape[-1] // (oh * ow), (co, oh, ow))
    if b is not None:
        out += b.reshape(1, co, 1, 1)
    return out


class Conv2d(Function):
    """Cross-correlation with groups (depthwise when groups == C); bias optional."""

    def forward(self, x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                groups=1):
        self.x, self.w, self.has_bias, self.groups = x, w, b is not None, groups
        self.geo = geo = _Geometry(w.shape[2:], stride, padding, dilation)
        run = lambda name: self._run(name, x, w, b)  # noqa: E731
        self.algo = conv_algo.choose(x, w, groups, geo, run)
        return run(self.algo)

    def _run(self, algo, x, w, b):
        return _forward(algo, x, w, b, self.geo, self.groups)

    def backward(self, g):
        x, w, geo, groups = self.x, self.w, self.geo, self.groups
        need_x, need_w = self.needs_input_grad[0], self.needs_input_grad[1]
        if self.algo == "depthwise_direct":
            return self._depthwise_backward(g, need_x, need_w)
        gx = None
        if need_x and self.algo == "winograd_f2x2":
            gx = winograd.conv2d_input_grad(g, w, geo.padding)
        elif need_x and self.algo == "gemm_direct":
            gx = _direct_input_grad(g, w, geo)
        if need_x and gx is None and conv_algo.columns_on_direct_wins(x, w, groups, geo):
            gx = _columns_input_grad(g, w, geo, x.shape)
        need_x = need_x and gx is None
        gw_direct = None
        if need_w and conv_algo.wgrad_direct_wins(x, w, groups):
            gw_direct = _C.conv2d_gemm_weight_grad(x, np.ascontiguousarray(g, x.dtype),
                                                   geo.kernel, geo.stride, geo.padding,
                                                   geo.dilation)
            need_w = False
        wg = w.reshape(groups, w.shape[0] // groups, -1)
        gx = np.empty_like(x) if need_x else gx
        gw = np.zeros_like(wg) if need_w else gw_direct
        chunks = batch_chunks(x.shape[0], geo.column_bytes(*x.shape[1:], x.itemsize))
        for sl in chunks if need_x or need_w else ():
            gy = to_columns(g[sl], groups)  # (G, Co/G, nb*L)
            if need_w:
                gw += np.matmul(gy, geo.im2col(x[sl], groups).transpose(0, 2, 1))
            if need_x:
                dcols = np.matmul(wg.transpose(0, 2, 1), gy)  # (G, C/G*K, nb*L)
                gx[sl] = geo.col2im(dcols, x[sl].shape)
        grads = (gx, None if gw is None else gw.reshape(w.shape))
        if self.has_bias:
            grads += (g.sum(axis=(0, 2, 3)) if self.needs_input_grad[2] else None,)
        return grads

    def _depthwise_backward(self, g, need_x, need_w):
        x, w, geo = self.x, self.w, self.geo
        args = (geo.stride, geo.padding, geo.dilation)
        g = np.ascontiguousarray(g, x.dtype)
        grads = (_C.depthwise_conv2d_backward_input(g, w, x.shape, *args) if need_x else None,
                 _C.depthwise_conv2d_backward_weight(x, g, geo.kernel, *args) if need_w else None)
        if self.has_bias:
            grads += (g.sum(axis=(0, 2, 3)) if self.needs_input_grad[2] else None,)
        return grads


def _direct_input_grad(g, w, geo):
    """Input gradient of a stride-1 convolution as a convolution itself (gemm_direct): g
    (N, Co, oh, ow) with the flipped, transposed kernel (C, Co, kh, kw) and padding
    dilation * (k - 1) - p per side gives (N, C, H, W). None where that does not apply
    (strided, or padding beyond the kernel's reach) or would not be faster."""
    (kh, kw), (pt, pb, pl, pr), (dh, dw) = geo.kernel, geo.padding, geo.dilation
    if geo.stride != (1, 1) or max(pt, pb) > dh * (kh - 1) or max(pl, pr) > dw * (kw - 1):
        return None
    padding = (dh * (kh - 1) - pt, dh * (kh - 1) - pb, dw * (kw - 1) - pl, dw * (kw - 1) - pr)
    adjoint = _Geometry(geo.kernel, (1, 1), padding, geo.dilation)
    if not conv_algo.gemm_direct_wins(g, w.transpose(1, 0, 2, 3), adjoint, adjoint=True):
        return None
    flipped = _C.conv_flip_kernel(w)
    return _C.conv2d_gemm(np.ascontiguousarray(g), flipped, None, None, (1, 1), padding,
                          geo.dilation)


def _columns_input_grad(g, w, geo, shape):
    """Input gradient as im2col's adjoint, the columns W^T gy from the direct kernel: per
    image they are a 1x1 convolution of gy (N, Co, oh, ow) with w's transpose (C*kh*kw, Co),
    whose (C*kh*kw, oh*ow) output col2im sums into the image. Numpy's GEMM, which the loop in
    Conv2d.backward runs otherwise, competes for the cores with our OpenMP workers still
    spinning from the last kernel (conv_algo.columns_on_direct_wins has the figures)."""
    n, co = g.shape[:2]
    wt = _C.conv_flip_kernel(w.reshape(co, -1, 1, 1))  # 1x1 taps: a parallel transpose
    gx = np.empty(shape, g.dtype)
    image = (1,) + tuple(shape[1:])
    for sl in batch_chunks(n, geo.column_bytes(*shape[1:], g.dtype.itemsize)):
        cols = _C.conv2d_gemm(np.ascontiguousarray(g[sl]), wt, None, None, (1, 1), (0, 0, 0, 0),
                              (1, 1))
        for i, cols_i in enumerate(cols.reshape(len(cols), len(wt), -1)):
            gx[sl.start + i] = _C.col2im(cols_i, image, geo.kernel, geo.stride, geo.padding,
                                         geo.dilation)[0]
    return gx


def conv2d_inference(x, w, scale, shift, act, stride, padding, dilation, groups):
    """act(scale * conv2d(x, w) + shift) per output channel, numpy in and out, no autograd:
    a frozen conv + batch norm + activation. gemm_direct applies scale, shift and act in its
    store; the other algorithms run with the scale folded into w (or, where the output is
    smaller than the weights, as batch 1 of deep layers, multiplied into the output: folding
    a 512 x 4608 kernel took a pass over 9 MB per call) and shift as the bias, then clamp in
    place. act: 0 none, 1 ReLU, 2 ReLU6."""
    geo = _Geometry(w.shape[2:], stride, padding, dilation)
    algo = conv_algo.choose(x, w, groups, geo)
    if algo == "gemm_direct":
        return _C.conv2d_gemm(x, w, scale, shift, geo.stride, geo.padding, geo.dilation, act)
    oh, ow = geo.out_size(*x.shape[2:])
    scale_output = scale is not None and w[0].size > x.shape[0] * oh * ow
    if scale is not None and not scale_output:
        w = w * scale.reshape(-1, 1, 1, 1).astype(w.dtype)
    out = _forward(algo, x, w, None if scale_output else shift, geo, groups)
    if scale_output:
        out *= scale.reshape(1, -1, 1, 1).astype(out.dtype)
        if shift is not None:
            out += shift.reshape(1, -1, 1, 1).astype(out.dtype)
    if act:
        np.clip(out, 0, 6 if act == 2 else None, out=out)
    return out


class ConvTranspose2d(Function):
    """Adjoint of Conv2d's input path: out = col2im(w^T @ x). Padding is (t, b, l, r).

    Output padding extends the bottom/right edge: rows that conv padding would have cropped
    are kept (the col2im geometry's bottom padding shrinks by output_padding) and any rows
    beyond the full scatter are zeros.
    """

    def forward(self, x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), output_padding=(0, 0),
                dilation=(1, 1), groups=1):
        self.x, self.w, self.has_bias, self.groups = x, w, b is not None, groups
        n, ci, h, wd = x.shape
        kh, kw = w.shape[2:]
        co = w.shape[1] * groups
        (sh, sw), (pt, pb, pl, pr), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
        oh = (h - 1) * sh - pt - pb + dh * (kh - 1) + oph + 1
        ow = (wd - 1) * sw - pl - pr + dw * (kw - 1) + opw + 1
        self.extra = (max(0, oph - pb), max(0, opw - pr))  # zero rows / columns at the edge
        self.inner = (oh - self.extra[0], ow - self.extra[1])
        crop = (pt, max(0, pb - oph), pl, max(0, pr - opw))
        self.geo = geo = _Geometry((kh, kw), stride, crop, dilation)
        wg = w.reshape(groups, ci // groups, -1)  # (G, Ci/G, Co/G*K)
        out = np.zeros((n, co, oh, ow), x.dtype)
        for sl in batch_chunks(n, geo.column_bytes(co, *self.inner, x.itemsize)):
            cols = np.matmul(wg.transpose(0, 2, 1), to_columns(x[sl], groups))
            nb = sl.stop - sl.start
            out[sl, :, :self.inner[0], :self.inner[1]] = geo.col2im(cols, (nb, co) + self.inner)
        if b is not None:
            out += b.reshape(1, co, 1, 1)
        return out

    def backward(self, g):
        x, w, geo, groups = self.x, self.w, self.geo, self.groups
        need_x, need_w = self.needs_input_grad[0], self.needs_input_grad[1]
        n, ci = x.shape[:2]
        wg = w.reshape(groups, ci // groups, -1)
        gx = np.empty_like(x) if need_x else None
        inner = g[:, :, :self.inner[0], :self.inner[1]]  # the zero edge has no inputs
        gw = None
        if need_w and conv_algo.wgrad_direct_wins(inner, w, groups):
            # the weight gradient of the convolution whose input gradient this layer is
            gw = _C.conv2d_gemm_weight_grad(np.ascontiguousarray(inner, x.dtype), x,
                                            geo.kernel, geo.stride, geo.padding, geo.dilation)
            need_w = False
        gw = np.zeros_like(wg) if need_w else gw
        chunks = batch_chunks(n, geo.column_bytes(g.shape[1], *self.inner, x.itemsize))
        for sl in chunks if need_x or need_w else ():
            gcols = geo.im2col(np.ascontiguousarray(inner[sl]), groups)  # (G, Co/G*K, nb*L)
            if need_w:
                gw += np.matmul(to_columns(x[sl], groups), gcols.transpose(0, 2, 1))
            if need_x:
                gx[sl] = from_columns(np.matmul(wg, gcols), sl.stop - sl.start, x.shape[1:])
        grads = (gx, None if gw is None else gw.reshape(w.shape))
        if self.has_bias:
            grads += (g.sum(axis=(0, 2, 3)) if self.needs_input_grad[2] else None,)
        return grads
