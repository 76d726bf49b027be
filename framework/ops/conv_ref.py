"""Numpy twins of the convolution kernels: the living spec the native code is tested against.

Column layout (see framework/csrc/im2col/im2col.h):
    cols[(c * kh + i) * kw + j, (n * out_h + oy) * out_w + ox]
        = x[n, c, oy * sh - pt + i * dh, ox * sw - pl + j * dw]   (0 outside the image)
`padding` is always (top, bottom, left, right) here.
"""
import numpy as np


def conv_out_size(size, kernel, stride, pad_lo, pad_hi, dilation):
    return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1


def _windows(x, kernel, stride, padding, dilation):
    """Yield (i, j, view) with view (N, C, out_h, out_w) = the padded input at offset (i, j)."""
    (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw) = kernel, stride, padding, dilation
    n, c, h, w = x.shape
    oh = conv_out_size(h, kh, sh, pt, pb, dh)
    ow = conv_out_size(w, kw, sw, pl, pr, dw)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dh, j * dw
            yield i, j, xp[:, :, y0:y0 + sh * (oh - 1) + 1:sh, x0:x0 + sw * (ow - 1) + 1:sw]


def im2col_ref(x, kernel, stride, padding, dilation):
    """x (N, C, H, W) -> cols (C*kh*kw, N*out_h*out_w)."""
    n, c = x.shape[:2]
    kh, kw = kernel
    views = [v for _, _, v in _windows(x, kernel, stride, padding, dilation)]
    stacked = np.stack(views, axis=2)  # (N, C, kh*kw, out_h, out_w)
    oh, ow = stacked.shape[-2:]
    return stacked.transpose(1, 2, 0, 3, 4).reshape(c * kh * kw, n * oh * ow)


def col2im_ref(cols, input_shape, kernel, stride, padding, dilation):
    """Adjoint of im2col_ref: cols (C*kh*kw, N*out_h*out_w) -> summed x (N, C, H, W)."""
    n, c, h, w = input_shape
    (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw) = kernel, stride, padding, dilation
    oh = conv_out_size(h, kh, sh, pt, pb, dh)
    ow = conv_out_size(w, kw, sw, pl, pr, dw)
    blocks = cols.reshape(c, kh, kw, n, oh, ow)
    xp = np.zeros((n, c, h + pt + pb, w + pl + pr), cols.dtype)
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dh, j * dw
            xp[:, :, y0:y0 + sh * (oh - 1) + 1:sh, x0:x0 + sw * (ow - 1) + 1:sw] += \
                blocks[:, i, j].transpose(1, 0, 2, 3)
    return xp[:, :, pt:pt + h, pl:pl + w]


def conv2d_ref(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """Direct convolution (cross-correlation), no im2col: sums kernel offsets."""
    n, c = x.shape[:2]
    co, cg, kh, kw = w.shape
    out = None
    xg = x.reshape(n, groups, cg, *x.shape[2:])
    for g in range(groups):
        wg = w[g * (co // groups):(g + 1) * (co // groups)]
        for i, j, view in _windows(xg[:, g], (kh, kw), stride, padding, dilation):
            term = np.einsum("nchw,oc->nohw", view, wg[:, :, i, j])
            if out is None:
                out = np.zeros((n, co) + term.shape[2:], np.result_type(x, w))
            out[:, g * (co // groups):(g + 1) * (co // groups)] += term
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def conv2d_weight_grad_ref(x, gy, kernel, stride, padding, dilation):
    """Weight gradient of conv2d_ref (groups 1): x (N, C, H, W), gy (N, Co, out_h, out_w)
    -> gw (Co, C, kh, kw) = sum over images and positions of gy times the window."""
    gw = np.zeros((gy.shape[1], x.shape[1]) + tuple(kernel), np.result_type(x, gy))
    for i, j, view in _windows(x, kernel, stride, padding, dilation):
        gw[:, :, i, j] = np.einsum("nchw,nohw->oc", view, gy)
    return gw


def conv_epilogue_ref(y, scale=None, shift=None, act=0):
    """act(scale * y + shift) per channel of y (N, C, H, W): the store of _C.conv2d_gemm
    (act 0 none, 1 ReLU, 2 ReLU6), in y's dtype."""
    if scale is not None:
        y = y * scale.reshape(1, -1, 1, 1)
    if shift is not None:
        y = y + shift.reshape(1, -1, 1, 1)
    if act >= 1:
        y = np.maximum(y, 0)
    if act == 2:
        y = np.minimum(y, 6)
    return y


def conv_transpose2d_ref(x, w, b=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0),
                         dilation=(1, 1), groups=1):
    """Direct transposed convolution: every input pixel scatters weight * value into the output."""
    n, cin, h, wd = x.shape
    cig, cog, kh, kw = w.shape[0] // groups, w.shape[1], w.shape[2], w.shape[3]
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    full = np.zeros((n, cog * groups, oh + 2 * ph + sh, ow + 2 * pw + sw), np.result_type(x, w))
    for g in range(groups):
        xg = x[:, g * cig:(g + 1) * cig]
        wg = w[g * cig:(g + 1) * cig]
        for i in range(kh):
            for j in range(kw):
                term = np.einsum("nchw,co->nohw", xg, wg[:, :, i, j])
                y0, x0 = i * dh, j * dw
                full[:, g * cog:(g + 1) * cog, y0:y0 + sh * (h - 1) + 1:sh,
                     x0:x0 + sw * (wd - 1) + 1:sw] += term
    out = full[:, :, ph:ph + oh, pw:pw + ow]
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return out


def depthwise_conv2d_ref(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)):
    """Twin of framework/csrc/depthwise/depthwise.cpp: x (N, C, H, W), w (C, 1, kh, kw) -> per-channel
    cross-correlation, one strided view per kernel offset."""
    out = None
    for i, j, view in _windows(x, w.shape[2:], stride, padding, dilation):
        term = view * w[None, :, 0, i, j, None, None]
        out = term if out is None else out + term
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def depthwise_backward_input_ref(gy, w, input_shape, stride, padding, dilation):
    """gy (N, C, out_h, out_w) -> gx (N, C, H, W): each output's gradient times the tap's
    weight, summed into the pixel the tap read."""
    n, c, h, wd = input_shape
    (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw) = w.shape[2:], stride, padding, dilation
    oh, ow = gy.shape[2:]
    gp = np.zeros((n, c, h + pt + pb, wd + pl + pr), gy.dtype)
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dh, j * dw
            gp[:, :, y0:y0 + sh * (oh - 1) + 1:sh, x0:x0 + sw * (ow - 1) + 1:sw] += \
                gy * w[None, :, 0, i, j, None, None]
    return gp[:, :, pt:pt + h, pl:pl + wd]


def depthwise_backward_weight_ref(x, gy, kernel, stride, padding, dilation):
    """x (N, C, H, W), gy (N, C, out_h, out_w) -> gw (C, 1, kh, kw)."""
    gw = np.zeros((x.shape[1], 1) + tuple(kernel), gy.dtype)
    for i, j, view in _windows(x, kernel, stride, padding, dilation):
        gw[:, 0, i, j] = (view * gy).sum(axis=(0, 2, 3))
    return gw


# Winograd F(2x2, 3x3) (Lavin & Gray 2016): Y = A^T [(G g G^T) * (B^T d B)] A per 4x4 tile
WINO_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
WINO_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
WINO_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def winograd_weight_transform(w):
    """w (Co, C, 3, 3) -> U (16, Co, C) = G g G^T per filter, position-major."""
    g = WINO_G.astype(w.dtype)
    u = np.matmul(np.matmul(g, w), g.T)  # (Co, C, 4, 4)
    return np.ascontiguousarray(u.transpose(2, 3, 0, 1)).reshape(16, w.shape[0], w.shape[1])


def winograd_input_ref(x, padding, out_size):
    """Twin of _C.winograd_input_transform: x (N, C, H, W) -> V (16, C, N*th*tw)."""
    (pt, pl), (oh, ow) = padding, out_size
    n, c, h, w = x.shape
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    xp = np.zeros((n, c, 2 * th + 2, 2 * tw + 2), x.dtype)
    rows, cols = min(h, 2 * th + 2 - pt), min(w, 2 * tw + 2 - pl)
    xp[:, :, pt:pt + rows, pl:pl + cols] = x[:, :, :rows, :cols]
    d = np.stack([np.stack([xp[:, :, r:r + 2 * th:2, q:q + 2 * tw:2] for q in range(4)], -1)
                  for r in range(4)], -2)  # (N, C, th, tw, 4, 4)
    v = np.einsum("ar,nctsrq,bq->abcnts", WINO_BT, d, WINO_BT)
    return v.reshape(16, c, n * th * tw).astype(x.dtype)


def winograd_output_ref(m, batch, out_size):
    """Twin of _C.winograd_output_transform: M (16, Co, N*th*tw) -> (N, Co, oh, ow)."""
    oh, ow = out_size
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    co = m.shape[1]
    mm = m.reshape(4, 4, co, batch, th, tw)
    y = np.einsum("ra,abonts,qb->notrsq", WINO_AT, mm, WINO_AT)  # (N, Co, th, 2, tw, 2)
    return y.reshape(batch, co, 2 * th, 2 * tw)[:, :, :oh, :ow].astype(m.dtype)
