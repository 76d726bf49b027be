// Uniform-bin histogram of float32 values for the calibration observer
// (quantization/histogram.py), counted as numpy.histogram(x, bins, (lo, hi)) counts a float32
// array with Python-float bounds under numpy 2's promotion rules: the bounds compared with and
// subtracted from x as float32, the bin position (x - lo) / (hi - lo) * bins in double, then
// corrected against the edges, float32 values of a float64 linspace; the last bin includes hi.
// Values outside [lo, hi], and NaN, are not counted. One pass in parallel blocks, each thread
// counting into its own row.
#pragma once

#include <cstdint>

namespace tianyuan {

// counts (bins,) += the histogram of x (n,); lo < hi finite, bins >= 1, and the float32 edges
// strictly increasing (checked: std::invalid_argument, numpy's "too many bins").
void histogram_f32(const float* x, int64_t n, int64_t bins, double lo, double hi,
                   int64_t* counts);

}  // namespace tianyuan
