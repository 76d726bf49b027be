"""Native ops take an array by its dtype's value, not by numpy's instance of that dtype.

An unpickled array (a CIFAR batch, an optimizer state written with pickle, a user's .pkl)
carries a dtype object of its own that equals np.float32 / np.uint8; the bindings once
compared dtype objects by identity and refused such arrays as "must be float32, got float32".
"""
import pickle

import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan.quantization import kernels as K


def unpickled(a):
    b = pickle.loads(pickle.dumps(np.asarray(a)))
    assert b.dtype == a.dtype and b.dtype is not np.dtype(a.dtype)  # the case under test
    return b


@pytest.fixture
def x():
    return np.random.default_rng(0).standard_normal((2, 3, 9, 9)).astype(np.float32)


def test_float_ops(x):
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    mean, var = np.zeros(3, np.float32), np.ones(3, np.float32)
    ops = [lambda a, k: F.conv2d(ty.tensor(a), ty.tensor(k), padding=1),
           lambda a, k: F.max_pool2d(ty.tensor(a), 3, 2),
           lambda a, k: F.avg_pool2d(ty.tensor(a), 3, 2, padding=1),
           lambda a, k: F.batch_norm(ty.tensor(a), ty.tensor(mean), ty.tensor(var),
                                     training=False)]
    for op in ops:
        np.testing.assert_array_equal(op(unpickled(x), unpickled(w)).numpy(), op(x, w).numpy())


@pytest.mark.parametrize("cls, kwargs", [(ty.optim.SGD, dict(lr=0.1, momentum=0.9)),
                                         (ty.optim.Adam, dict(lr=0.1))],
                         ids=["SGD", "Adam"])
def test_optimizer_resumed_from_a_pickle(cls, kwargs, x):
    params = [ty.tensor(x.copy(), requires_grad=True) for _ in range(2)]
    opts = [cls([p], **kwargs) for p in params]
    for step in range(3):
        for p, opt in zip(params, opts):
            p.grad = ty.tensor(x * (step + 1))
            opt.step()
        if step == 0:  # the second optimizer goes through pickle, as a checkpoint might
            opts[1].load_state_dict(pickle.loads(pickle.dumps(opts[1].state_dict())))
            params[1].grad = ty.tensor(unpickled(x))
    np.testing.assert_array_equal(params[0].numpy(), params[1].numpy())


def test_int8_kernels():
    rng = np.random.default_rng(2)
    q = rng.integers(0, 256, (2, 8, 6, 6)).astype(np.uint8)
    w = rng.integers(-127, 128, (5, 8, 3, 3)).astype(np.int8)
    packed = K.pack_weights(w)
    args = (packed, np.zeros(5, np.int32), np.full(5, 1 << 20, np.int32), np.full(5, 30),
            3, True, np.uint8, 1, 1, 1)
    ops = [lambda a: K.conv2d(a, 7, *args),
           lambda a: K.max_pool2d(a, 2),
           lambda a: K.add(a, 7, a, 7, 1 << 20, 1 << 20, 21, 0, False, np.uint8),
           lambda a: K.concat([a, a], [7, 7], [1 << 20] * 2, [20] * 2, 0, np.uint8),
           lambda a: K.avg_pool2d(a, 7, 3, 2, 1)]
    for op in ops:
        np.testing.assert_array_equal(op(unpickled(q)), op(q))
    f = q.astype(np.float32)
    np.testing.assert_array_equal(K.quantize(unpickled(f), 0.5, 3, np.uint8),
                                  K.quantize(f, 0.5, 3, np.uint8))
