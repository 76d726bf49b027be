// Uniform-bin histogram of float32 values for the calibration observer
// (quantization/histogram.py), counted as numpy.histogram(x, bins, (lo, hi)) counts a float32
// array with Python-float bounds under numpy 2's promotion rules: the bounds compared with and
// subtracted from x as float32, the bin position (x - lo) / (hi - lo) * bins in double, then
// corrected against the edges, float32 values of a float64 linspace; the last bin includes hi.
// Values outside [lo, hi], and NaN, are not counted. One pass in parallel blocks, each thread
// counting into its own row; on AVX2 hosts 8 values at a time (histogram_avx2.cpp).
#pragma once

#include <cstdint>

namespace tianyuan {

// counts (bins,) += the histogram of x (n,); lo < hi finite, bins >= 1, and the float32 edges
// strictly increasing (checked: std::invalid_argument, numpy's "too many bins").
void histogram_f32(const float* x, int64_t n, int64_t bins, double lo, double hi,
                   int64_t* counts);

// One run of histogram_f32's counting: x[begin, end) into row (bins,), with the bounds as
// float32, the float32 edges (bins + 1) and per = bins / (hi - lo) as float. The bin: the
// float product (x - first) * per, then numpy's two corrections against the edges.
struct HistRun {
    const float* edges;
    int64_t bins;
    float first, last, per;
};
void histogram_run_avx2(const float* x, int64_t begin, int64_t end, const HistRun& h,
                        int64_t* row);

namespace {  // each unit's own copy, built with its flags

// The run one value at a time: the generic run, and the AVX2 run's tail.
inline void histogram_scalar(const float* x, int64_t begin, int64_t end, const HistRun& h,
                             int64_t* row) {
    const float* e = h.edges;
    const int64_t last_bin = h.bins - 1;
    for (int64_t i = begin; i < end; ++i) {
        const float v = x[i];
        if (!(v >= h.first && v <= h.last)) continue;  // NaN too
        int64_t k = static_cast<int64_t>((v - h.first) * h.per);
        k = k < last_bin ? k : last_bin;
        // numpy's corrections (after a decrement the increment's test is v >= e[old k],
        // false); e[bins] exists
        k -= v < e[k];
        k += (k != last_bin) & (v >= e[k + 1]);
        ++row[k];
    }
}

}  // namespace

}  // namespace tianyuan
