"""Observers against hand computation; histogram range searches; a user's observer."""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import quantization as Q
from tianyuan.quantization.observer import Observer, QParams

from qnets import TinyNet


def observe(obs, *batches):
    for b in batches:
        obs(ty.tensor(np.asarray(b, np.float32)))
    return obs.qparams()


def test_minmax_asymmetric_uint8_by_hand():
    p = observe(Q.MinMaxObserver(enabled=True), [-1.0, 0.5], [3.0, 0.0])
    scale = np.float32(4.0 / 255)
    assert p.scale == scale and p.zero_point == 64 and p.dtype == np.uint8


def test_minmax_range_includes_zero():
    p = observe(Q.MinMaxObserver(enabled=True), [2.0, 3.0])
    assert p.scale == np.float32(3.0 / 255) and p.zero_point == 0


def test_per_channel_symmetric_weights_by_hand():
    w = np.array([[1.0, -2.0], [0.5, 0.25], [0.0, 0.0]], np.float32)
    p = observe(Q.make_weight_observer(enabled=True), w)
    np.testing.assert_array_equal(p.scale, np.float32([2 / 127, 0.5 / 127, Q.observer.EPS]))
    assert (p.zero_point == 0).all() and p.axis == 0 and p.dtype == np.int8


def test_reduce_range_weights_by_hand():
    w = np.array([[1.0, -2.0], [0.5, 0.25]], np.float32)
    p = observe(Q.make_weight_observer(enabled=True, reduce_range=True), w)
    np.testing.assert_array_equal(p.scale, np.float32([2 / 63, 0.5 / 63]))
    q = Q.reference.quantize(w, p.scale, 0, np.int8, axis=0)
    assert np.abs(q).max() == 63
    with pytest.raises(ValueError, match="reduce_range needs symmetric=True"):
        Q.MinMaxObserver(reduce_range=True)


def test_int8_symmetric_activations():
    p = observe(Q.MinMaxObserver(dtype="int8", symmetric=True, enabled=True), [-3.0, 1.0])
    assert p.scale == np.float32(3 / 127) and p.zero_point == 0


def test_moving_average_by_hand():
    obs = Q.MovingAverageMinMaxObserver(momentum=0.9, enabled=True)
    observe(obs, [-1.0, 1.0], [-3.0, 5.0])
    lo, hi = obs.range()
    np.testing.assert_allclose([lo, hi], [0.9 * -1 + 0.1 * -3, 0.9 * 1 + 0.1 * 5], rtol=1e-6)


def test_observer_follows_training_mode_unless_forced():
    obs = Q.MinMaxObserver()
    obs.eval()
    obs(ty.tensor([1.0]))
    assert not obs.observed
    obs.train()
    obs(ty.tensor([1.0]))
    assert obs.observed


def test_weight_observer_follows_the_weights_in_eval():
    """After the last optimizer step the weights differ from what training observed: the
    weights' observer (current=True) watches in eval too, so neither QAT eval nor the int8
    model clips them (symmetric weights never reach -128; reduce_range's stay 7-bit)."""
    obs = Q.observer.make_weight_observer()
    obs.eval()
    obs(ty.tensor(np.array([[1.0, -2.0], [0.5, 0.25]], np.float32)))
    obs(ty.tensor(np.array([[1.0, -4.0], [0.5, 0.25]], np.float32)))
    np.testing.assert_allclose(obs.qparams().scale, [4 / 127, 0.5 / 127], rtol=1e-6)
    Q.disable_observer(obs)   # frozen where asked
    obs(ty.tensor(np.ones((2, 2), np.float32) * 8))
    np.testing.assert_allclose(obs.qparams().scale, [4 / 127, 0.5 / 127], rtol=1e-6)
    with pytest.raises(ValueError, match="current=True needs memoryless"):
        Q.MinMaxObserver(current=True)
    for qconfig, grid in ((Q.ema_fakequant_qconfig, 127), (Q.reduce_range_qconfig, 63)):
        ty.manual_seed(0)
        qat = Q.quantize_qat(TinyNet(), qconfig)
        x = ty.randn(8, 3, 16, 16)
        opt = ty.optim.SGD(qat.parameters(), lr=0.5)
        for _ in range(2):   # large steps: the weights outgrow what the forward saw
            opt.zero_grad()
            (qat(x) ** 2).mean().backward()
            opt.step()
        int8 = Q.quantize(qat)
        for name in ("conv1", "conv2", "branch_a", "fc"):
            w = getattr(int8, name).weight.data
            assert -grid <= w.min() and w.max() <= grid, (name, w.min(), w.max())


def test_histogram_percentile_matches_numpy():
    x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)
    obs = Q.HistogramObserver(method="percentile", percentile=99.9, enabled=True)
    observe(obs, x[:50_000], x[50_000:])
    lo, hi = obs.range()
    width = (x.max() - x.min()) / 2048 * 2
    assert abs(hi - np.percentile(x, 99.9)) < width
    assert abs(lo - np.percentile(x, 0.1)) < width


@pytest.mark.skipif(int(np.__version__.split(".")[0]) < 2, reason="numpy 2's promotion")
def test_native_histogram_counts_as_numpy_does():
    # the calibration observer's histogram in one native pass: numpy.histogram's counts for
    # float32 data and Python-float bounds, values on the edges, past the range and NaN
    from helpers import each_isa
    from tianyuan import _C
    rng = np.random.default_rng(4)
    cases = []
    for k in range(12):
        x = (rng.standard_normal(int(rng.integers(1, 200_000))) * (k + 0.3)).astype(np.float32)
        lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
        if k % 3 == 1:  # values past the range, NaN
            lo, hi = lo / 2, hi * 0.7
            x[:3] = [np.nan, np.inf, -np.inf]
        if k % 3 == 2:  # every edge itself
            edges = np.linspace(lo, hi, 2049).astype(np.float32)
            x[:min(x.size, 2049)] = edges[:min(x.size, 2049)]
        cases.append((x, lo, hi))
    cases.append((np.zeros(10, np.float32), 0.0, 1e-8))  # the observer's empty range
    for _ in each_isa():
        for x, lo, hi in cases:
            np.testing.assert_array_equal(_C.histogram(x, 2048, lo, hi),
                                          np.histogram(x, 2048, (lo, hi))[0])
    with pytest.raises(ValueError, match=r"finite lo < hi, got 4 bins over \[1.0"):
        _C.histogram(np.zeros(3, np.float32), 4, 1.0, 1.0)
    with pytest.raises(ValueError, match="too many bins"):
        _C.histogram(np.zeros(3, np.float32), 2048, 1.0, 1.0 + 1e-9)
    with pytest.raises(ValueError, match="x must be float32"):
        _C.histogram(np.zeros(3), 4, 0.0, 1.0)
    obs = Q.HistogramObserver(enabled=True)
    with pytest.raises(ValueError, match=r"HistogramObserver: the data's range \[nan"):
        observe(obs, np.array([1.0, np.nan], np.float32))


def test_histogram_l2_clips_a_heavy_tail_not_the_bulk():
    rng = np.random.default_rng(1)
    x = np.abs(rng.laplace(size=100_000)).astype(np.float32)     # max ~ 13, 99.9% ~ 6.9
    obs = Q.HistogramObserver(method="l2", enabled=True)
    observe(obs, x)
    lo, hi = obs.range()
    assert lo == 0 and np.percentile(x, 99.9) < hi < 0.9 * x.max()   # 8-bit optimum ~ 10
    uniform = Q.HistogramObserver(method="l2", enabled=True)
    observe(uniform, rng.uniform(0, 1, 50_000))
    assert uniform.range()[1] > 0.95


def test_histogram_kl_threshold():
    x = np.abs(np.random.default_rng(2).standard_normal(200_000)).astype(np.float32)
    obs = Q.HistogramObserver(method="kl", enabled=True)
    observe(obs, x)
    lo, hi = obs.range()
    assert lo == 0 and 2.0 < hi <= x.max()


class FixedObserver(Observer):
    """A user's observer: always the range [-1, 1]."""

    def observe(self, x):
        self._set_range(-1.0, 1.0)


def test_registered_custom_observer_drives_quantize_qat():
    Q.register_observer("fixed_test", FixedObserver, override=True)
    with pytest.raises(KeyError):
        Q.register_observer("fixed_test", FixedObserver)
    qc = Q.QConfig("weight_minmax", "fixed_test", "ste", "ste")
    qat = Q.quantize_qat(TinyNet(), qc)
    Q.calibrate(qat, [np.zeros((2, 3, 16, 16), np.float32)])
    p = qat.conv1.act_qparams()
    assert isinstance(qat.conv1.act_observer, FixedObserver)
    assert p.scale == np.float32(2 / 255) and p.zero_point == 128
    int8 = Q.quantize(qat)
    assert int8.conv1.out_scale == p.scale


def test_qconfig_rejects_instances_and_unknown_names():
    with pytest.raises(TypeError):
        Q.QConfig(Q.MinMaxObserver(), "ema", "ste", "ste").make_weight_observer()
    with pytest.raises(KeyError):
        Q.QConfig("nope", "ema", "ste", "ste").make_weight_observer()
    assert isinstance(QParams(1, 0, np.uint8, None), tuple)


def test_native_min_max_is_numpys_on_every_isa():
    # the per-tensor observers' statistics: one parallel pass (blocks of 16384 values); NaN
    # anywhere, including a block's first value, gives NaN as numpy's min / max
    from helpers import each_isa
    from tianyuan import _C
    rng = np.random.default_rng(3)
    x = rng.standard_normal(70_001).astype(np.float32)
    x[[5, 40_000]] = [np.inf, -np.inf]
    with_nan = x.copy()
    with_nan[16_384] = np.nan
    for isa in each_isa():
        assert _C.min_max(x) == (x.min(), x.max()), isa
        assert _C.min_max(x[:7]) == (x[:7].min(), x[:7].max()), isa
        assert all(np.isnan(_C.min_max(with_nan))), isa
    with pytest.raises(ValueError, match="non-empty float32"):
        _C.min_max(np.zeros(0, np.float32))
    # the weight observers' per-channel extremes: each row's, rows of 1 to 18,000 values
    for rows, cols in ((1, 1), (7, 9), (33, 576), (4, 18_000)):
        w = rng.standard_normal((rows, cols)).astype(np.float32)
        w[rows // 2, cols // 2] = np.nan
        for isa in each_isa():
            lo, hi = _C.min_max_rows(w)
            np.testing.assert_array_equal(lo, w.min(axis=1), err_msg=isa)
            np.testing.assert_array_equal(hi, w.max(axis=1), err_msg=isa)
    with pytest.raises(ValueError, match=r"non-empty 2-D float32 array, got float32 of shape "
                                         r"\(3\)"):
        _C.min_max_rows(np.zeros(3, np.float32))
    obs = Q.MinMaxObserver(ch_axis=0, dtype="int8", symmetric=True, enabled=True)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    observe(obs, w)
    np.testing.assert_array_equal(obs.min_val.numpy(), w.min(axis=(1, 2, 3)))
    np.testing.assert_array_equal(obs.max_val.numpy(), w.max(axis=(1, 2, 3)))


def test_observes_range_only_where_observe_is_the_range_of_its_data():
    # an op that knows its output's min and max may call observe_range in place of
    # observe(x): only where the class defining observe() defines observe_range() beside it
    class OwnObserve(Q.MinMaxObserver):
        def observe(self, x):
            self._set_range(-1.0, 1.0)

    class OwnForward(Q.MovingAverageMinMaxObserver):
        def forward(self, x):
            return x

    assert Q.MinMaxObserver().observes_range()
    assert Q.MovingAverageMinMaxObserver().observes_range()
    assert not Q.MinMaxObserver(ch_axis=0, dtype="int8", symmetric=True).observes_range()
    assert not Q.HistogramObserver().observes_range()
    assert not FixedObserver().observes_range()
    assert not OwnObserve().observes_range() and not OwnForward().observes_range()
    x = np.random.default_rng(9).standard_normal((3, 40)).astype(np.float32)
    for kind in (Q.MinMaxObserver, Q.MovingAverageMinMaxObserver):
        by_data, by_range = kind(), kind()
        for batch in (x, x * 3 + 1):
            by_data(ty.tensor(batch))
            by_range.observe_range(batch.min(), batch.max())
        assert by_data.qparams() == by_range.qparams()
        assert by_data.min_val.numpy() == by_range.min_val.numpy()
