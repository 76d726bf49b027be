import numpy as np

import tianyuan as ty
from tianyuan import nn


def test_quant_points_are_plain_ops_in_float():
    a = ty.tensor(np.array([[-1.0, 2.0]], np.float32))
    b = ty.tensor(np.array([[0.5, -3.0]], np.float32))
    np.testing.assert_array_equal(nn.QuantStub()(a).numpy(), a.numpy())
    np.testing.assert_array_equal(nn.DequantStub()(a).numpy(), a.numpy())
    np.testing.assert_array_equal(nn.Add()(a, b).numpy(), [[-0.5, -1.0]])
    np.testing.assert_array_equal(nn.AddReLU()(a, b).numpy(), [[0.0, 0.0]])
    np.testing.assert_array_equal(nn.Concat(axis=1)([a, b]).numpy(), [[-1.0, 2.0, 0.5, -3.0]])


def test_quant_points_hold_no_state():
    model = nn.Sequential(nn.QuantStub(), nn.DequantStub())
    assert model.state_dict() == {}
