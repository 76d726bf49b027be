"""Optional: F.conv_transpose2d's forward and gradients (input, weight, bias) equal PyTorch's
for strides 1-2, padding, output_padding, dilation and groups (skipped without torch)."""
import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F

torch = pytest.importorskip("torch")

# x shape, C -> OC, kernel, stride, padding, output_padding, dilation, groups
CASES = [
    ((2, 3, 4, 5), 4, 3, 1, 0, 0, 1, 1),
    ((2, 4, 3, 3), 6, 4, 2, 1, 0, 1, 1),          # DCGAN's up
    ((1, 4, 3, 4), 4, 3, 2, 1, 1, 1, 2),          # output_padding, groups
    ((1, 6, 3, 3), 6, (3, 2), (2, 1), (1, 0), (1, 0), 1, 3),
    ((1, 2, 4, 4), 4, 3, 1, 2, 1, 2, 1),          # dilation, output_padding < dilation
    ((2, 4, 2, 2), 4, 2, 2, 0, 0, 1, 4),          # depthwise
]


@pytest.mark.parametrize("shape,oc,k,stride,padding,output_padding,dilation,groups", CASES)
def test_conv_transpose2d_equals_pytorch(shape, oc, k, stride, padding, output_padding,
                                         dilation, groups):
    rng = np.random.default_rng(sum(shape) + oc)
    kh, kw = (k, k) if isinstance(k, int) else k
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], oc // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    args = (stride, padding, output_padding, groups, dilation)
    ours = [ty.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = F.conv_transpose2d(*ours, *args)
    g = rng.standard_normal(y.shape).astype(np.float32)
    y.backward(ty.tensor(g))
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    yt = torch.nn.functional.conv_transpose2d(*theirs, *args)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    for name, a, t in zip(("x", "weight", "bias"), ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4,
                                   err_msg=name)
