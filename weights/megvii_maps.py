"""Megvii-layout ShuffleNets (MegEngine Models, megvii-model/ShuffleNet-Series) -> ours.

Verified against the public sources listed in weights/README.md ("Where the MegEngine
layouts come from"). Megvii's names are `first_conv`, `features.{k}`, `conv_last` and a
bias-free `classifier.0`; ours are torchvision's. A rename is not enough:

* ShuffleNetV2. A Megvii stride-1 unit passes the *even* input channels through and runs
  the odd ones through `branch_main`, then concatenates [even, main] with no shuffle
  after. Ours (torchvision's) passes the first half, runs the second half, concatenates
  and then interleaves (channel_shuffle 2). The two compute the same function with the
  channels in another order, so we carry a permutation `perm` through each stage
  (our channel t holds their channel perm[t]) and permute the weights to match.
  A channel Megvii keeps at index m is passed through by the next units as long as m is
  even (m -> m/2); one we keep at position t as long as t < C/2 (t -> 2t). Where new
  channels appear (a unit's branch outputs) we pair ours with theirs by that "fate"
  (how many units pass it through), which makes every later split line up.
  Megvii's stride-2 unit has `branch_proj` with `in` outputs and `branch_main` with
  `out - in`; ours has two halves, so only widths with out == 2 * in convert
  (x0.5 everywhere; x1.0/1.5/2.0 differ in stage 2's first unit and are refused).
* ShuffleNetV1 (ShuffleNet-Series). Same units as ours, but its channel_shuffle views
  (N, C/g, g) where ours views (N, g, C/g): the inverse permutation. Inside each unit we
  reorder the middle channels (conv1 rows, dw conv, conv3 columns) to absorb it.
  MegEngine Models' own ShuffleNetV1 is another network (see `_MEGENGINE_V1`).

>>> state = load_megengine("snetv2_x0_5_60750_c28db1a2.pkl")
>>> ours = megvii_shufflenet_v2(state, "shufflenet_v2_x0_5")
"""
import re
from collections import OrderedDict

import numpy as np

BN_FIELDS = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
# units per stage in Megvii's `features.{k}` (k = 0..15), as in ours: the papers' [4, 8, 4]
STAGE_REPEATS = (4, 8, 4)
_MEGENGINE_V1 = (
    "MegEngine Models' ShuffleNetV1 (official/vision/classification/ShuffleNetV1/model.py, "
    "official/quantization/models/shufflenet.py) is a different network: each stride-2 unit "
    "adds a 1x1 stride-2 ConvBn projection of the input (`branch_proj`, in -> out channels) "
    "to a main branch of `out` channels (FUSE_ADD_RELU), where ours (the paper's, and "
    "megvii-model/ShuffleNet-Series') concatenates a 3x3 average-pooled input with a main "
    "branch of `out - in` channels. No weight mapping makes one compute the other.")


class LayoutError(KeyError):
    """The file is not in the expected Megvii layout or cannot become ours."""

    def __str__(self):
        return self.args[0] if self.args else ""


def is_megvii_layout(state):
    return any(re.sub(r"^module\.", "", k).startswith("first_conv.") for k in state)


class _Source:
    """Their arrays in torch layout; remembers which keys were used."""

    def __init__(self, state, what):
        self.arrays = OrderedDict((re.sub(r"^module\.", "", k), _torch_layout(k, v))
                                  for k, v in state.items())
        self.used, self.what = set(), what

    def __getitem__(self, key):
        if key not in self.arrays:
            raise LayoutError(f"{self.what}: the file has no {key!r} (Megvii layout expected: "
                              "first_conv, features.{k}, conv_last, classifier.0)")
        self.used.add(key)
        return self.arrays[key]

    def leftovers(self):
        return OrderedDict((k, v) for k, v in self.arrays.items() if k not in self.used)


def _torch_layout(key, value):
    """MegEngine stores grouped conv weights as (G, O/G, I/G, kh, kw) and BN statistics as
    (1, C, 1, 1); give them torch's (O, I/G, kh, kw) and (C,)."""
    if not isinstance(value, np.ndarray):
        return value
    if value.ndim == 5:
        return value.reshape((-1,) + value.shape[2:])
    stat = key.endswith(("running_mean", "running_var"))
    conv_bias = key.endswith("bias") and value.ndim == 4 and value.shape[0] == 1
    return value.reshape(-1) if stat or conv_bias else value


def _conv(src, out, theirs, ours, rows=None, cols=None):
    weight = src[f"{theirs}.weight"]
    if rows is not None:
        weight = weight[np.asarray(rows)]
    if cols is not None:
        weight = weight[:, np.asarray(cols)]
    out[f"{ours}.weight"] = np.ascontiguousarray(weight)


def _bn(src, out, theirs, ours, index=None):
    for field in BN_FIELDS:
        key = f"{theirs}.{field}"
        if field == "num_batches_tracked" and key not in src.arrays:
            continue   # MegEngine has none; convert_state_dict fills 0
        value = src[key]
        if field in ("weight", "bias"):
            value = value.reshape(-1)   # some MegEngine versions keep (1, C, 1, 1) here too
        out[f"{ours}.{field}"] = value if index is None or field == "num_batches_tracked" \
            else np.ascontiguousarray(value[np.asarray(index)])


def _head(src, out):
    """Megvii's bias-free `classifier.0` -> our `fc` with a zero bias."""
    weight = src["classifier.0.weight"]
    out["fc.weight"] = weight
    out["fc.bias"] = np.zeros(weight.shape[0], weight.dtype)


def _finish(src, out):
    for key, value in src.leftovers().items():
        out[key] = value   # left for check_against_spec to list as unmapped
    return out


# ---- ShuffleNetV2 -------------------------------------------------------------------


def _their_fate(m, rounds):
    """How many of the next `rounds` Megvii stride-1 units pass their channel m through."""
    fate = 0
    while fate < rounds and m % 2 == 0:
        m, fate = m // 2, fate + 1
    return fate


def _our_fate(t, channels, rounds):
    fate = 0
    while fate < rounds and t < channels // 2:
        t, fate = t * 2, fate + 1
    return fate


def _pair_by_fate(positions, indices, channels, rounds):
    """{our position: their index}, pairing new channels that share a fate."""
    ours = sorted(positions, key=lambda t: _our_fate(t, channels, rounds))
    theirs = sorted(indices, key=lambda m: _their_fate(m, rounds))
    if [_our_fate(t, channels, rounds) for t in ours] != [_their_fate(m, rounds)
                                                           for m in theirs]:
        raise LayoutError(f"megvii shufflenet_v2: cannot align {channels} channels "
                          "(their split pattern has no counterpart in ours)")
    return dict(zip(ours, theirs))


def _v2_width(src, unit):
    """A stage's width from its first (stride-2) unit: Megvii's branch_proj keeps the unit's
    input channels and branch_main makes the rest."""
    return (src[f"{unit}.branch_proj.2.weight"].shape[0]
            + src[f"{unit}.branch_main.5.weight"].shape[0])


def _v2_stride2(src, out, theirs, ours, perm, width, rounds):
    """Stride-2 unit; `perm` maps our input channels to theirs. Returns the output perm."""
    half = width // 2
    proj_out = src[f"{theirs}.branch_proj.2.weight"].shape[0]
    main_out = src[f"{theirs}.branch_main.5.weight"].shape[0]
    if (proj_out, main_out) != (half, half):
        raise LayoutError(
            f"megvii shufflenet_v2: {theirs} (first unit of {ours.split('.')[0]}) has "
            f"branch_proj with {proj_out} outputs and branch_main with {main_out} (Megvii "
            f"gives branch_proj the unit's {proj_out} input channels and branch_main the "
            f"other {width} - {proj_out}); ours, torchvision's layout, has two branches of "
            f"{half}. The networks differ, so these weights cannot be converted (among "
            "MegEngine's ShuffleNetV2 sizes only x0.5 has in == out / 2 in every first unit).")
    match = _pair_by_fate(range(0, width, 2), range(half), width, rounds)
    match.update(_pair_by_fate(range(1, width, 2), range(half, width), width, rounds))
    r1 = [match[2 * i] for i in range(half)]           # branch1 output i sits at 2i
    r2 = [match[2 * i + 1] - half for i in range(half)]  # branch2 output i sits at 2i+1
    _conv(src, out, f"{theirs}.branch_proj.0", f"{ours}.branch1.0", rows=perm)  # depthwise
    _bn(src, out, f"{theirs}.branch_proj.1", f"{ours}.branch1.1", perm)
    _conv(src, out, f"{theirs}.branch_proj.2", f"{ours}.branch1.2", rows=r1, cols=perm)
    _bn(src, out, f"{theirs}.branch_proj.3", f"{ours}.branch1.3", r1)
    _conv(src, out, f"{theirs}.branch_main.0", f"{ours}.branch2.0", cols=perm)
    _v2_main_tail(src, out, theirs, ours, r2)
    return np.array([match[t] for t in range(width)])


def _v2_main_tail(src, out, theirs, ours, rows):
    """branch_main.{1,3,4} keep their order (internal channels); .5/.6 rows by `rows`."""
    _bn(src, out, f"{theirs}.branch_main.1", f"{ours}.branch2.1")
    _conv(src, out, f"{theirs}.branch_main.3", f"{ours}.branch2.3")
    _bn(src, out, f"{theirs}.branch_main.4", f"{ours}.branch2.4")
    _conv(src, out, f"{theirs}.branch_main.5", f"{ours}.branch2.5", rows=rows)
    _bn(src, out, f"{theirs}.branch_main.6", f"{ours}.branch2.6", rows)


def _v2_stride1(src, out, theirs, ours, perm, rounds_after):
    """Stride-1 unit: their even channels pass, their odd ones feed branch_main."""
    width, half = len(perm), len(perm) // 2
    if np.any(perm[:half] % 2) or not np.all(perm[half:] % 2):
        raise LayoutError(f"megvii shufflenet_v2: {ours}: channel split does not line up "
                          "(internal error)")
    _conv(src, out, f"{theirs}.branch_main.0", f"{ours}.branch2.0", cols=(perm[half:] - 1) // 2)
    match = {2 * i: perm[i] // 2 for i in range(half)}   # their x_proj[j] = x[2j] -> out j
    match.update(_pair_by_fate(range(1, width, 2), range(half, width), width, rounds_after))
    _v2_main_tail(src, out, theirs, ours, [match[2 * i + 1] - half for i in range(half)])
    return np.array([match[t] for t in range(width)])


def megvii_shufflenet_v2(state, arch):
    """Megvii ShuffleNetV2 (MegEngine `.pkl` or ShuffleNet-Series `.pth`) -> our names,
    with the channel permutations that make our model compute their function."""
    src, out = _Source(state, f"megvii -> {arch}"), OrderedDict()
    _conv(src, out, "first_conv.0", "conv1.0")
    _bn(src, out, "first_conv.1", "conv1.1")
    perm, unit = np.arange(src["first_conv.0.weight"].shape[0]), 0
    for stage, n in enumerate(STAGE_REPEATS, start=2):
        width = _v2_width(src, f"features.{unit}")
        perm = _v2_stride2(src, out, f"features.{unit}", f"stage{stage}.0", perm, width, n - 1)
        for i in range(1, n):
            perm = _v2_stride1(src, out, f"features.{unit + i}", f"stage{stage}.{i}", perm,
                               n - 1 - i)
        unit += n
    _conv(src, out, "conv_last.0", "conv5.0", cols=perm)
    _bn(src, out, "conv_last.1", "conv5.1")
    _head(src, out)
    return _finish(src, out)


# ---- ShuffleNetV1 -------------------------------------------------------------------


def _v1_orders(mid, groups, first_unit):
    """(pi, their_c, their_pos): pi[q] is their conv1 output for our conv1 output q;
    at our post-shuffle position p sits their conv1 output their_c[p], which their
    shuffle puts at position their_pos[p]. Both conv3s read the channel in the same group."""
    size = mid // groups
    # ours: position p = j*g + gi holds conv1 output gi*size + j (view (g, size), transpose)
    ours_src = np.array([(p % groups) * size + p // groups for p in range(mid)])
    ours_at = np.argsort(ours_src)                      # conv1 output q -> position
    # theirs: conv1 output c = j*g + gi goes to position gi*size + j (view (size, g))
    shuffled = np.array([(c % groups) * size + c // groups for c in range(mid)])
    buckets = {}
    for c in range(mid):   # their outputs by (conv1 group, conv3 group)
        buckets.setdefault((0 if first_unit else c // size, shuffled[c] // size), []).append(c)
    pi = np.empty(mid, np.int64)
    for q in range(mid):
        key = (0 if first_unit else q // size, ours_at[q] // size)
        if not buckets.get(key):
            raise LayoutError(_v1_mismatch(mid, groups))
        pi[q] = buckets[key].pop(0)
    their_c = pi[ours_src]
    return pi, their_c, shuffled[their_c]


def _v1_mismatch(mid, groups):
    return (f"megvii shufflenet_v1: Megvii's channel_shuffle views the {mid} middle channels "
            f"as ({mid // groups}, {groups}) before transposing, ours (the paper's) as "
            f"({groups}, {mid // groups}): the inverse permutation. With {groups} groups of "
            f"{mid // groups} the two wire different numbers of channels from each conv1 group "
            "into each conv3 group, so no reordering of the weights that keeps the groups in "
            "place makes our network compute theirs (Megvii's g3 models and g8 x2.0 convert).")


def _v1_unit(src, out, theirs, ours, groups, first_unit):
    mid = src[f"{theirs}.branch_main_1.0.weight"].shape[0]
    pi = their_c = their_pos = None
    if groups > 1:   # both skip the shuffle when g == 1
        pi, their_c, their_pos = _v1_orders(mid, groups, first_unit)
    _conv(src, out, f"{theirs}.branch_main_1.0", f"{ours}.conv1", rows=pi)
    _bn(src, out, f"{theirs}.branch_main_1.1", f"{ours}.bn1", pi)
    # their dw conv and BN run before their shuffle (on conv1's order), ours after it
    _conv(src, out, f"{theirs}.branch_main_1.3", f"{ours}.conv2", rows=their_c)
    _bn(src, out, f"{theirs}.branch_main_1.4", f"{ours}.bn2", their_c)
    weight = src[f"{theirs}.branch_main_2.0.weight"]   # (out, mid/g, 1, 1), grouped
    if their_pos is not None:
        size, rows = mid // groups, weight.shape[0] // groups
        weight = weight.copy()
        for k in range(groups):
            cols = their_pos[k * size:(k + 1) * size] - k * size
            weight[k * rows:(k + 1) * rows] = weight[k * rows:(k + 1) * rows][:, cols]
    out[f"{ours}.conv3.weight"] = weight
    _bn(src, out, f"{theirs}.branch_main_2.1", f"{ours}.bn3")


def megvii_shufflenet_v1(state, arch):
    """megvii-model/ShuffleNet-Series ShuffleNetV1 -> our names (fc bias 0)."""
    if any(".branch_proj." in k or k.endswith(".conv.weight") for k in state):
        raise LayoutError(f"megvii -> {arch}: {_MEGENGINE_V1}")
    src, out = _Source(state, f"megvii -> {arch}"), OrderedDict()
    # the groups: the first unit's grouped 1x1 (mid -> out) reads mid / groups channels
    mid = src["features.0.branch_main_1.0.weight"].shape[0]
    groups = mid // src["features.0.branch_main_2.0.weight"].shape[1]
    _conv(src, out, "first_conv.0", "conv1.0")
    _bn(src, out, "first_conv.1", "conv1.1")
    unit = 0
    for stage, n in enumerate(STAGE_REPEATS, start=2):
        for i in range(n):
            _v1_unit(src, out, f"features.{unit}", f"stage{stage}.{i}", groups,
                     first_unit=unit == 0)
            unit += 1
    _head(src, out)
    return _finish(src, out)
