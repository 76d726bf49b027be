"""HistogramObserver: a running histogram, and a search for the clipping range.

Methods (per tensor only; activations are per tensor):

- ``"l2"`` (default): the range that minimises the expected squared quantization error,
  ``sum_bins count * (step**2 / 12 inside, distance to the clip edge**2 outside)``, over a
  grid of candidate ranges cut at tail masses 0 .. 10 % on either side (the criterion of
  PyTorch's and MegEngine's HistogramObserver; the grid search is ours);
- ``"percentile"``: the `percentile` and 100 - `percentile` points of the data;
- ``"kl"``: TensorRT's entropy calibration on |x|: the threshold T whose quantized
  histogram (``levels`` bins over [0, T], outliers folded into the last bin) is closest
  in KL divergence to the reference one.

The histogram has `bins` equal bins over [min(x, 0), max(x, 0)]; when a batch widens
the range, the old counts are re-binned (each old bin spread over 4 points).
"""
import numpy as np

from .. import _C
from ..tensor import Tensor
from .observer import Observer
from .reference import qrange

_TAILS = np.concatenate([[0.0], np.logspace(-6, -1, 21)])


class HistogramObserver(Observer):
    def __init__(self, bins=2048, method="l2", percentile=99.99, **kwargs):
        super().__init__(**kwargs)
        if method not in ("l2", "percentile", "kl"):
            raise ValueError(f"HistogramObserver: method must be 'l2', 'percentile' or 'kl', "
                             f"got {method!r}")
        if self.ch_axis is not None:
            raise ValueError("HistogramObserver: per-tensor only (ch_axis must be None)")
        self.bins, self.method, self.percentile = int(bins), method, float(percentile)
        self.register_buffer("histogram", None)
        self._cached = None

    def observe(self, x):
        native = x.dtype == np.float32 and x.size > 0
        x_lo, x_hi = _C.min_max(x) if native else (x.min(), x.max())
        lo, hi = min(float(x_lo), 0.0), max(float(x_hi), 0.0)
        if self.observed:
            lo, hi = min(lo, float(self.min_val.data)), max(hi, float(self.max_val.data))
            counts = self._rebin(lo, hi)
        else:
            counts = np.zeros(self.bins)
        hi = hi if hi > lo else lo + 1e-8
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"HistogramObserver: the data's range [{lo}, {hi}] is not finite")
        # numpy.histogram's counts (numpy 2), in one parallel pass (bench/RESULTS.md,
        # training: `_C.histogram`)
        counts += _C.histogram(x, self.bins, lo, hi) if native else \
            np.histogram(x, self.bins, (lo, hi))[0]
        self.histogram = Tensor(counts)
        self._set_range(lo, hi)
        self._cached = None

    def _rebin(self, lo, hi):
        """The stored counts, re-binned onto [lo, hi] (unchanged if the range is)."""
        old_lo, old_hi = float(self.min_val.data), float(self.max_val.data)
        counts = self.histogram.data
        if (lo, hi) == (old_lo, old_hi):
            return counts.copy()
        width = (old_hi - old_lo) / self.bins
        points = old_lo + (np.arange(self.bins)[:, None] + (np.arange(4) + 0.5) / 4) * width
        weights = np.repeat(counts[:, None] / 4, 4, axis=1)
        return np.histogram(points.ravel(), self.bins, (lo, hi), weights=weights.ravel())[0]

    def range(self):
        if self._cached is None:
            lo, hi = super().range()
            search = {"l2": self._l2, "percentile": self._percentile, "kl": self._kl}
            found = search[self.method](float(lo), float(hi), self.histogram.data)
            self._cached = tuple(np.float32(v) for v in found)
        return self._cached

    def _edges(self, lo, hi):
        return np.linspace(lo, hi, self.bins + 1)

    def _quantiles(self, lo, hi, counts, masses):
        """Points below which `masses` (fractions) of the data lie, linear inside bins."""
        cdf = np.concatenate([[0.0], np.cumsum(counts)]) / max(counts.sum(), 1e-12)
        return np.interp(masses, cdf, self._edges(lo, hi))

    def _percentile(self, lo, hi, counts):
        p = self.percentile / 100.0
        a, b = self._quantiles(lo, hi, counts, [1.0 - p, p])
        return min(a, 0.0), max(b, 0.0)

    def _l2(self, lo, hi, counts):
        qmin, qmax = qrange(self.dtype)
        lows = self._quantiles(lo, hi, counts, _TAILS) if lo < 0 else np.zeros(1)
        highs = self._quantiles(lo, hi, counts, 1.0 - _TAILS)
        a = np.minimum(lows[:, None], 0.0).ravel().repeat(len(highs)).reshape(-1, 1)
        b = np.tile(np.maximum(highs, 0.0), len(lows)).reshape(-1, 1)
        if self.symmetric:
            b = np.maximum(-a, b)
            a = np.where(lo < 0, -b, 0.0)
            step = b / 127.0
        else:
            step = (b - a) / (qmax - qmin)
        edges = self._edges(lo, hi)
        centers = (edges[:-1] + edges[1:]) / 2                         # (bins,)
        err = np.where(centers < a, (centers - a) ** 2,
                       np.where(centers > b, (centers - b) ** 2, step ** 2 / 12))
        best = int(np.argmin(err @ counts))                           # (candidates,)
        return float(a[best, 0]), float(b[best, 0])

    def _kl(self, lo, hi, counts):
        qmin, qmax = qrange(self.dtype)
        levels = (qmax - qmin + 1) if lo >= 0 else 128
        edges = self._edges(lo, hi)
        centers = np.abs((edges[:-1] + edges[1:]) / 2)
        top = max(-lo, hi)
        mag = np.histogram(centers, self.bins, (0.0, top), weights=counts)[0]
        threshold = entropy_threshold(mag, levels) * top / self.bins
        return max(lo, -threshold), min(hi, threshold)


def entropy_threshold(hist, levels, stride=8):
    """Bin index T (levels <= T <= len(hist)) minimising KL(P_T || Q_T) (TensorRT's method).

    P_T: hist[:T] with the tail mass added to bin T-1; Q_T: hist[:T] (no tail) merged into
    `levels` groups, each group's mass spread evenly over its non-empty bins.
    """
    n = len(hist)
    if n <= levels or hist.sum() == 0:
        return n
    best, best_kl = n, np.inf
    for t in list(range(levels, n, stride)) + [n]:
        body = hist[:t].astype(np.float64)
        p = body.copy()
        p[-1] += hist[t:].sum()                  # the reference keeps the clipped mass ...
        groups = np.minimum(np.arange(t) * levels // t, levels - 1)
        nonzero = p > 0
        mass = np.bincount(groups, body, levels)  # ... the candidate does not
        count = np.bincount(groups, nonzero, levels)
        q = np.where(nonzero, mass[groups] / np.maximum(count[groups], 1), 0.0)
        p, q = p / p.sum(), q / q.sum()
        kl = float(np.sum(p[nonzero] * np.log(p[nonzero] / np.maximum(q[nonzero], 1e-12))))
        if kl < best_kl:
            best, best_kl = t, kl
    return best
