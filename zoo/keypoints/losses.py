"""Heatmap losses of the top-down pose models: compositions of the core's ops, no backward of
their own.

- `joints_mse_loss`: SimpleBaseline's JointsMSELoss (Xiao et al. 2018, its reference code):
  0.5 * mean over (batch, joint, pixel) of (w * (pred - target))^2, a joint's weight w from
  its visibility (0: not labelled, so not learnt).
- `ohkm_loss`: online hard keypoint mining (Chen et al., CPN 2018; MSPN's last scale): per
  sample the `topk` joints of largest weighted per-joint MSE, averaged.
- `coarse_to_fine_targets`: MSPN's per-scale Gaussian kernels (Li et al. 2019, sec. 3.3:
  larger kernels for the coarser scales) re-rendered at the peaks of the data's target.
- `mspn_loss`: per stage, the three coarse scales' MSE / 4 and OHKM on the finest (the
  official MSPN's `_calculate_loss`), summed over the stages; the data may render the
  kernels itself ((N, S, K, h, w) targets).

>>> import tianyuan as ty
>>> pred, target = ty.zeros(2, 17, 16, 12), ty.ones(2, 17, 16, 12)
>>> float(joints_mse_loss(pred, target, ty.ones(2, 17)).numpy())
0.5
"""
import numpy as np

import tianyuan.functional as F
from tianyuan.autograd import no_grad
from tianyuan.tensor import Tensor, as_tensor


def _weights(target_weight, pred, op):
    """(N, K) joint weights as (N, K, 1, 1), checked against pred (N, K, h, w)."""
    weight = as_tensor(target_weight)
    n, k = pred.shape[:2]
    if tuple(weight.shape) not in ((n, k), (n, k, 1)):
        raise ValueError(f"{op}: target_weight must be (N, K) = ({n}, {k}) for heatmaps "
                         f"{tuple(pred.shape)}, got {tuple(weight.shape)}")
    return F.reshape(weight.astype(pred.dtype), n, k, 1, 1)


def _check(pred, target, op):
    if pred.ndim != 4 or tuple(pred.shape) != tuple(target.shape):
        raise ValueError(f"{op}: heatmaps and targets must both be (N, K, h, w), got "
                         f"{tuple(pred.shape)} and {tuple(target.shape)} (a model with "
                         "another joint count or heatmap size than the data?)")


def per_joint_mse(pred, target, target_weight, op="per_joint_mse"):
    """(N, K): the mean over pixels of (w * (pred - target))^2."""
    pred, target = as_tensor(pred), as_tensor(target)
    _check(pred, target, op)
    diff = (pred - target) * _weights(target_weight, pred, op)
    return F.mean(diff * diff, axis=(2, 3))


def joints_mse_loss(pred, target, target_weight):
    """SimpleBaseline's loss: 0.5 * the mean of (w * (pred - target))^2 (a scalar)."""
    return F.mean(per_joint_mse(pred, target, target_weight, "joints_mse_loss")) * 0.5


def ohkm_loss(pred, target, target_weight, topk=8):
    """Per sample, the mean of its `topk` largest per-joint losses (0.5 * weighted MSE, as
    joints_mse_loss); then the mean over the batch. The choice of joints is not
    differentiated (a 0/1 mask), the chosen joints' losses are."""
    loss = per_joint_mse(pred, target, target_weight, "ohkm_loss") * 0.5     # (N, K)
    k = loss.shape[1]
    if not 1 <= int(topk) <= k:
        raise ValueError(f"ohkm_loss: topk must be 1..{k} (the joints), got {topk}")
    values = loss.numpy()
    order = np.argsort(-values, axis=1, kind="stable")[:, :int(topk)]
    mask = np.zeros_like(values)
    np.put_along_axis(mask, order, 1.0, axis=1)
    return F.mean(F.sum(loss * Tensor(mask), axis=1)) * (1.0 / int(topk))


def coarse_to_fine_targets(target, target_weight, sigmas):
    """[(N, K, h, w)] per sigma: a Gaussian of that sigma, with the target's peak value, at
    each joint's peak in `target` (joints of weight 0, or with an empty map, stay 0).
    The data renders one kernel; MSPN supervises its coarser scales with wider ones."""
    target = np.asarray(target.numpy() if isinstance(target, Tensor) else target, np.float32)
    weight = np.asarray(target_weight.numpy() if isinstance(target_weight, Tensor)
                        else target_weight, np.float32).reshape(target.shape[:2])
    n, k, h, w = target.shape
    flat = target.reshape(n, k, h * w)
    peak = flat.max(axis=2)                                   # (N, K)
    index = flat.argmax(axis=2)
    ys, xs = (index // w).astype(np.float32), (index % w).astype(np.float32)
    keep = (peak > 0) & (weight > 0)
    grid_y = np.arange(h, dtype=np.float32)[:, None]
    grid_x = np.arange(w, dtype=np.float32)[None, :]
    dist = ((grid_x - xs[..., None, None]) ** 2 +
            (grid_y - ys[..., None, None]) ** 2)              # (N, K, h, w)
    scale = (peak * keep)[..., None, None]
    return [np.exp(-dist / (2.0 * float(s) ** 2)).astype(np.float32) * scale for s in sigmas]


def scale_targets(target, target_weight, sigmas, num_stages):
    """Per stage, the four scales' targets (coarse to fine). `target` (N, K, h, w): the
    `sigmas` rendered at its peaks (None: the target itself at every scale); (N, S, K, h, w)
    (the data rendered S kernels): S = 4 one per scale; S = 5 the official MSPN's
    coarse-to-fine, the last stage taking kernels 1-4 and the others 0-3."""
    if np.ndim(target) == 5:
        array = target.numpy() if isinstance(target, Tensor) else np.asarray(target)
        if array.shape[1] not in (4, 5):
            raise ValueError(f"mspn_loss: a (N, S, K, h, w) target needs S = 4 or 5 kernels, "
                             f"got {array.shape}")
        maps = [array[:, s] for s in range(array.shape[1])]
        last = maps[-4:]
        return [maps[:4]] * (num_stages - 1) + [last]
    with no_grad():
        maps = coarse_to_fine_targets(target, target_weight, sigmas) if sigmas else [target] * 4
    if len(maps) != 4:
        raise ValueError(f"mspn_loss: give four sigmas (one per scale), got {sigmas!r}")
    return [maps] * num_stages


def mspn_loss(stage_outputs, target, target_weight, sigmas=None, topk=8):
    """{"loss_coarse", "loss_ohkm"} of MSPN's outputs: `stage_outputs` a list per stage of
    four (N, K, h, w) heatmaps, coarse to fine, each at the target's size; the targets per
    stage and scale as `scale_targets` gives them."""
    per_stage = scale_targets(target, target_weight, sigmas, len(stage_outputs))
    coarse, hard = 0.0, 0.0
    for outputs, targets in zip(stage_outputs, per_stage):
        if len(outputs) != 4:
            raise ValueError(f"mspn_loss: each stage gives four heatmaps, got {len(outputs)}")
        for j in range(3):
            coarse = coarse + joints_mse_loss(outputs[j], targets[j], target_weight) * 0.25
        hard = hard + ohkm_loss(outputs[3], targets[3], target_weight, topk)
    return {"loss_coarse": coarse, "loss_ohkm": hard}
