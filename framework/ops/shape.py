"""Shape primitives: reshape, permute, broadcast, index, concat, pad, gather."""
import numpy as np

from ..autograd import Function


class Reshape(Function):
    def forward(self, x, shape=None):
        self.shape = x.shape
        return x.reshape(shape)

    def backward(self, g):
        return g.reshape(self.shape)


class Permute(Function):
    def forward(self, x, axes=None):
        self.inverse = np.argsort(axes)
        return np.transpose(x, axes)

    def backward(self, g):
        return np.transpose(g, self.inverse)


def shuffled(x, groups):
    """x (N, g*k, H, W) with channel j * g + i taken from channel i * k + j: one copy."""
    n, c, h, w = x.shape
    return x.reshape(n, groups, c // groups, h * w).transpose(0, 2, 1, 3).copy().reshape(
        n, c, h, w)


class ChannelShuffle(Function):
    """ShuffleNet's channel shuffle as one op (it had been reshape, permute and reshape: three
    ops' Python around one copy); its gradient is the shuffle with the other factor."""

    def forward(self, x, groups=None):
        self.groups = groups
        return shuffled(x, groups)

    def backward(self, g):
        return shuffled(g, g.shape[1] // self.groups)


class Expand(Function):
    """broadcast_to: backward sums over the broadcast axes."""

    def forward(self, x, shape=None):
        self.shape = x.shape
        return np.broadcast_to(x, shape)

    def backward(self, g):
        from .elementwise import unbroadcast

        return unbroadcast(g, self.shape)


def is_basic_index(index):
    """Whether `index` is numpy basic indexing (ints, slices, None, Ellipsis): it selects each
    element at most once, so its gradient is a plain assignment."""
    parts = index if isinstance(index, tuple) else (index,)
    return all(p is None or p is Ellipsis or (isinstance(p, (slice, int, np.integer))
                                              and not isinstance(p, (bool, np.bool_)))
               for p in parts)


class GetItem(Function):
    """Basic and advanced indexing; repeated advanced indices accumulate in backward."""

    def forward(self, x, index=None):
        self.shape, self.dtype, self.index = x.shape, x.dtype, index
        return x[index]

    def backward(self, g):
        grad = np.zeros(self.shape, self.dtype)
        if is_basic_index(self.index):
            # np.add.at is a generic scatter, slow enough to show in ShuffleNetV2's training
            # step (its channel split)
            grad[self.index] = g
        else:
            np.add.at(grad, self.index, g)
        return grad


class GetItemBackward(Function):
    """GetItem's gradient as an op (g scattered into zeros of the input's shape), so a
    gradient taken with create_graph is differentiable again; its own gradient is the
    indexing."""

    def forward(self, g, shape=None, index=None):
        self.index = index
        grad = np.zeros(shape, g.dtype)
        if is_basic_index(index):
            grad[index] = g
        else:
            np.add.at(grad, index, g)
        return grad

    def backward(self, gg):
        return gg[self.index]


class Concat(Function):
    def forward(self, *xs, axis=0):
        self.axis = axis
        self.bounds = np.cumsum([x.shape[axis] for x in xs])[:-1]
        return np.concatenate(xs, axis=axis)

    def backward(self, g):
        return tuple(np.split(g, self.bounds, axis=self.axis))


class ConcatShuffle(Function):
    """Parts (N, k, H, W) of one shape joined with their channels interleaved (output channel
    j * parts + i is part i's channel j): one stack along a new axis 2, as one op (through
    stack and reshape it cost several times the copy)."""

    def forward(self, *xs):
        n, k, h, w = xs[0].shape
        return np.stack(xs, axis=2).reshape(n, k * len(xs), h, w)

    def backward(self, g):
        n, c, h, w = g.shape
        parts = g.reshape(n, -1, len(self.needs_input_grad), h, w)
        return tuple(parts[:, :, i] for i in range(parts.shape[2]))


class Pad(Function):
    """Constant padding; `pad_width` as numpy's ((before, after), ...) per axis."""

    def forward(self, x, pad_width=None, value=0.0):
        self.slices = tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, x.shape))
        return np.pad(x, pad_width, constant_values=value)

    def backward(self, g):
        return g[self.slices]


class Gather(Function):
    """take_along_axis(x, index, axis); the index gets no gradient."""

    def forward(self, x, index, axis=0):
        self.shape, self.dtype, self.index, self.axis = x.shape, x.dtype, index, axis
        return np.take_along_axis(x, index, axis=axis)

    def backward(self, g):
        grad = np.zeros(self.shape, self.dtype)
        idx = list(np.indices(self.index.shape, sparse=True))
        idx[self.axis] = self.index
        np.add.at(grad, tuple(idx), g)
        return grad, None
