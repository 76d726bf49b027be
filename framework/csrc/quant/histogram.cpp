// Histogram kernel (histogram.h): the edges, the threads' rows, and the runs (histogram_scalar,
// or histogram_avx2.cpp's, chosen once into the family's table: fill_histogram). Built generically only: the edges must be numpy's linspace,
// i * step + lo rounded twice, which an FMA unit would contract into one rounding.
#include "quant/histogram.h"

#include <omp.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu.h"
#include "runtime/dispatch.h"

#ifdef __FMA__
#error "histogram.cpp is built without FMA: numpy's linspace rounds i * step and + lo apart"
#endif

namespace tianyuan {
namespace {

struct HistogramKernels {
    void (*run)(const float* x, int64_t begin, int64_t end, const HistRun& h, int64_t* row);
};

void fill_histogram(HistogramKernels& k, Isa isa) {
    k.run = isa >= Isa::avx2 ? histogram_run_avx2 : histogram_scalar;
}

Dispatch<HistogramKernels> kernels(fill_histogram);

}  // namespace

void histogram_f32(const float* x, int64_t n, int64_t bins, double lo, double hi,
                   int64_t* counts) {
    if (!(bins >= 1) || !std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi))
        throw std::invalid_argument("histogram: needs bins >= 1 and finite lo < hi, got " +
                                    std::to_string(bins) + " bins over [" + std::to_string(lo) +
                                    ", " + std::to_string(hi) + "]");
    // numpy.linspace(lo, hi, bins + 1) in float64, the last edge hi, then float32
    std::vector<float> edges(static_cast<size_t>(bins + 1));
    const double step = (hi - lo) / static_cast<double>(bins);
    for (int64_t i = 0; i < bins; ++i) {
        const double at = static_cast<double>(i) * step;
        edges[i] = static_cast<float>(at + lo);
    }
    edges[bins] = static_cast<float>(hi);
    for (int64_t i = 0; i < bins; ++i)
        if (!(edges[i] < edges[i + 1]))
            throw std::invalid_argument("histogram: too many bins (" + std::to_string(bins) +
                                        ") for the range [" + std::to_string(lo) + ", " +
                                        std::to_string(hi) + "] in float32");
    // numpy's bin position, (v - first) / (hi - lo) * bins in double, is within a ten-thousandth
    // of a bin of the exact one, and so is this float product: each is then moved to the bin
    // whose float32 edges hold v (numpy's corrections), the same bin
    const HistRun h{edges.data(), bins, static_cast<float>(lo), static_cast<float>(hi),
                    static_cast<float>(static_cast<double>(bins) / (hi - lo))};
    const auto run = kernels().run;
    constexpr int64_t kBlock = 1 << 16;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    const int threads = blocks > 1 ? omp_get_max_threads() : 1;
    std::vector<int64_t> rows(static_cast<size_t>(threads * bins), 0);
#pragma omp parallel num_threads(threads)
    {
        int64_t* row = rows.data() + static_cast<int64_t>(omp_get_thread_num()) * bins;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < blocks; ++b)
            run(x, b * kBlock, (b + 1) * kBlock < n ? (b + 1) * kBlock : n, h, row);
    }
    for (int64_t t = 0; t < threads; ++t)
        for (int64_t k = 0; k < bins; ++k) counts[k] += rows[static_cast<size_t>(t * bins + k)];
}

}  // namespace tianyuan
