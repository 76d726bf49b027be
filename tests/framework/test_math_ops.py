import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from helpers import check_op

S = (3, 4)


@pytest.mark.parametrize("fn,ref", [
    (lambda a, b: a + b, np.add),
    (lambda a, b: a - b, np.subtract),
    (lambda a, b: a * b, np.multiply),
    (lambda a, b: a / (b.abs() + 1), lambda a, b: a / (np.abs(b) + 1)),
    (F.maximum, np.maximum),
    (F.minimum, np.minimum),
])
def test_binary_broadcast(fn, ref):
    check_op(fn, ref, [S, (4,)])
    check_op(fn, ref, [(2, 1, 4), (3, 1)])


def test_pow():
    check_op(lambda a, b: a.abs() ** b, lambda a, b: np.abs(a) ** b, [S, S], low=0.5)


def test_pow_zero_exponent_has_zero_slope_at_zero():
    # d/da a ** 0 = 0 everywhere, as PyTorch has it; b * a ** (b - 1) gives 0 * inf = NaN at 0
    a = ty.tensor(np.array([0.0, 0.0, 2.0], np.float32), requires_grad=True)
    b = ty.tensor(np.array([0.0, 2.0, 0.0], np.float32))
    (a ** b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("fn,ref,low", [
    (F.exp, np.exp, -2.0), (F.log, np.log, 0.5), (F.sqrt, np.sqrt, 0.5),
    (F.abs, np.abs, -2.0), (lambda x: -x, np.negative, -2.0),
    (lambda x: F.clip(x, -0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), -2.0),
])
def test_unary(fn, ref, low):
    check_op(fn, ref, [S], low=low)


@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True), ((0, 2), False)])
def test_reductions(axis, keepdims):
    for ours, ref in [(F.sum, np.sum), (F.mean, np.mean), (F.var, np.var), (F.max, np.max),
                      (F.min, np.min)]:
        check_op(lambda x: ours(x, axis, keepdims), lambda x: ref(x, axis, keepdims=keepdims),
                 [(2, 3, 4)])


def test_max_ties_split_gradient():
    x = ty.tensor([1.0, 3.0, 3.0], requires_grad=True)
    x.max().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0, 0.5, 0.5])


def test_argmax():
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(F.argmax(ty.tensor(x), 1).numpy(), x.argmax(1))


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 2)),
                                 ((3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4,)),
                                 ((4,), (3, 4, 2)), ((2, 3, 4), (4,))])
def test_matmul(a, b):
    check_op(F.matmul, np.matmul, [a, b], fwd_rtol=1e-4)


def test_dot_product_is_a_0d_tensor():
    a = ty.tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
    y = F.relu(a @ a)  # a 0-d result that a native op then takes
    assert isinstance(y.data, np.ndarray) and y.shape == ()
    # 0-d times 0-d: numpy's arithmetic hands relu's native backward a scalar gradient
    (y * ty.tensor(np.float32(0.5))).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, -2.0, 3.0])


def test_shape_ops():
    check_op(lambda x: x.reshape(4, -1), lambda x: x.reshape(4, -1), [(2, 3, 4)])
    check_op(lambda x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1), [(2, 3, 4)])
    check_op(lambda x: F.transpose(x, 0, 2), lambda x: np.swapaxes(x, 0, 2), [(2, 3, 4)])
    check_op(lambda x: F.flatten(x, 1), lambda x: x.reshape(2, -1), [(2, 3, 4)])
    check_op(lambda x: F.broadcast_to(x, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4)),
             [(3, 1)])
    check_op(lambda x: F.squeeze(x, 1), lambda x: x.squeeze(1), [(2, 1, 4)])
    check_op(lambda x: F.expand_dims(x, 1), lambda x: np.expand_dims(x, 1), [(2, 4)])
    check_op(lambda a, b: F.concat([a, b], 1), lambda a, b: np.concatenate([a, b], 1),
             [(2, 3), (2, 5)])
    check_op(lambda a, b: F.stack([a, b], 1), lambda a, b: np.stack([a, b], 1), [(2, 3), (2, 3)])
    check_op(lambda x: F.split(x, [1, 3], 1)[1], lambda x: x[:, 1:], [(2, 4)])
    check_op(lambda x: F.pad(x, ((1, 0), (2, 1))), lambda x: np.pad(x, ((1, 0), (2, 1))), [(2, 3)])


def test_indexing_with_gradient():
    check_op(lambda x: x[1:, ::2], lambda x: x[1:, ::2], [(3, 4)])
    idx = np.array([0, 2, 0])
    check_op(lambda x: x[ty.tensor(idx)], lambda x: x[idx], [(3, 4)])


@pytest.mark.parametrize("index", [(1, Ellipsis, None, slice(None, None, -1)),
                                   (slice(None), slice(1, 3)), np.int64(2), (0, 1, 2)])
def test_basic_indexing_gradient_is_an_assignment(index):
    # basic indices select each element once: the backward assigns instead of np.add.at,
    # and must give what the scatter-add gives
    from tianyuan.ops.shape import is_basic_index
    assert is_basic_index(index)
    x = ty.tensor(np.arange(60, dtype=np.float32).reshape(3, 4, 5), requires_grad=True)
    y = x[index]
    g = np.random.default_rng(0).standard_normal(y.shape).astype(np.float32)
    (y * ty.tensor(g)).sum().backward()
    want = np.zeros((3, 4, 5), np.float32)
    np.add.at(want, index, g)
    np.testing.assert_array_equal(x.grad.numpy(), want)
    assert not is_basic_index(np.array([0, 0])) and not is_basic_index((True,))


def test_gather_and_where():
    index = np.array([[0, 2], [1, 1], [2, 0]])
    check_op(lambda x: F.gather(x, 1, ty.tensor(index)),
             lambda x: np.take_along_axis(x, index, 1), [(3, 3)])
    cond = np.array([[True, False, True]])
    check_op(lambda a, b: F.where(ty.tensor(cond), a, b), lambda a, b: np.where(cond, a, b),
             [(2, 3), (2, 3)])


def test_gradient_accumulates_and_hooks():
    x = ty.tensor([1.0, 2.0], requires_grad=True)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5, 5])
    seen = []
    y = ty.tensor([1.0], requires_grad=True)
    z = y * 4
    z.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2)
    z.sum().backward()
    assert seen and y.grad.item() == 8.0


def test_no_grad_and_detach():
    x = ty.randn(3, requires_grad=True)
    with ty.no_grad():
        assert not (x * 2).requires_grad
    assert not x.detach().requires_grad
    assert (x * 2).requires_grad


def test_errors_name_op_and_shapes():
    with pytest.raises(ValueError, match=r"add: shapes \(3, 4\) and \(5,\)"):
        ty.zeros(3, 4) + ty.zeros(5)
    with pytest.raises(ValueError, match=r"matmul: inner dimensions differ"):
        ty.zeros(3, 4) @ ty.zeros(3, 4)
    with pytest.raises(ValueError, match=r"reshape: cannot reshape \(3, 4\)"):
        ty.zeros(3, 4).reshape(5, -1)
    with pytest.raises(TypeError, match="only floating-point"):
        ty.zeros(3, dtype="int64", requires_grad=True)
    x = ty.randn(3, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="a second time"):
        y.backward()


def test_seeded_rng():
    ty.manual_seed(3)
    a = ty.randn(4).numpy()
    ty.manual_seed(3)
    np.testing.assert_array_equal(a, ty.randn(4).numpy())


def test_creation_dtypes():
    assert ty.tensor([1.0, 2.0]).dtype == np.float32
    assert ty.tensor([1, 2]).dtype == np.int64
    assert ty.zeros(2, 3).shape == (2, 3)
    assert ty.arange(5).dtype == np.int64
    assert ty.full((2,), 7, dtype="uint8").dtype == np.uint8
    assert ty.ones_like(ty.zeros(2, dtype="float64")).dtype == np.float64
    assert (ty.tensor([1, 2]) * 1.5).dtype == np.float32


def test_a_mask_times_an_integer_counts():
    # an int scalar took the bool tensor's dtype: mask * 3 was the mask, mask / 2 was mask / 1
    mask = ty.tensor(np.array([True, False, True]))
    assert (mask * 3).dtype == np.int64 and (mask * 3).numpy().tolist() == [3, 0, 3]
    assert (2 - mask).numpy().tolist() == [1, 2, 1]
    np.testing.assert_array_equal((mask / 2).numpy(), [0.5, 0.0, 0.5])
    assert (mask * True).dtype == np.bool_
