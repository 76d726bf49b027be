// Pooling; see pool.h. The drivers live in pool_impl.h; this file compiles them generically
// (float64, and float32 below AVX2), dispatches float32 to the AVX2 / AVX-512 builds through
// the family's table (one fill function, runtime/dispatch.h), and computes the mean windows
// per axis.
#include <type_traits>
#include <vector>

#include "pool/pool.h"
#include "pool/pool_impl.h"
#include "runtime/cpu.h"
#include "runtime/dispatch.h"

namespace tianyuan {
namespace {

// float32's kernels for the ISA in use
struct PoolKernels {
    void (*mean_forward)(const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                         const PoolSpan*, const PoolSpan*, float*);
    void (*mean_backward)(const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                          const PoolSpan*, const PoolSpan*, float*);
    void (*max_forward)(const float*, const Pool2dGeometry&, float*, int32_t*);
    int64_t (*max_backward)(const float*, const int32_t*, const Pool2dGeometry&, float*);
    void (*max_values)(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, const PoolTaps*, const PoolTaps*, float*);
};

void fill_pool(PoolKernels& k, Isa isa) {
    if (isa >= Isa::avx512) {
        k = {pool_mean_forward_avx512, pool_mean_backward_avx512, pool_max_forward_avx512,
             pool_max_backward_avx512, pool_max_values_avx512};
    } else if (isa >= Isa::avx2) {
        k = {pool_mean_forward_avx2, pool_mean_backward_avx2, pool_max_forward_avx2,
             pool_max_backward_avx2, pool_max_values_avx2};
    } else {
        k = {mean_forward<float>, mean_backward<float>, max_forward<float>,
             max_backward<float>, max_values<float>};
    }
}

Dispatch<PoolKernels> kernels(fill_pool);

struct Windows {
    std::vector<PoolSpan> rows, cols;
};

Windows avg_windows(const Pool2dGeometry& g, bool include) {
    Windows win;
    for (int64_t o = 0; o < g.out_h; ++o)
        win.rows.push_back(avg_span(o, g.kh, g.sh, g.ph, g.h, include));
    for (int64_t o = 0; o < g.out_w; ++o)
        win.cols.push_back(avg_span(o, g.kw, g.sw, g.pw, g.w, include));
    return win;
}

Windows adaptive_windows(const Pool2dGeometry& g) {
    Windows win;
    for (int64_t o = 0; o < g.out_h; ++o) win.rows.push_back(adaptive_span(o, g.out_h, g.h));
    for (int64_t o = 0; o < g.out_w; ++o) win.cols.push_back(adaptive_span(o, g.out_w, g.w));
    return win;
}

// Per output index along one axis: the window's in-image taps.
std::vector<PoolTaps> max_taps(int64_t out, int64_t k, int64_t s, int64_t p, int64_t d,
                               int64_t size) {
    std::vector<PoolTaps> t;
    for (int64_t o = 0; o < out; ++o) {
        int64_t lo, hi;
        taps(o * s - p, d, k, size, &lo, &hi);
        t.push_back({o * s - p + lo * d, hi - lo, d});
    }
    return t;
}

template <typename T>
void mean_forward_isa(const T* x, const Pool2dGeometry& g, const Windows& win, T* out) {
    mean_forward(x, g.n * g.c, g.h, g.w, g.out_h, g.out_w, win.rows.data(), win.cols.data(),
                 out);
}

void mean_forward_isa(const float* x, const Pool2dGeometry& g, const Windows& win, float* out) {
    kernels().mean_forward(x, g.n * g.c, g.h, g.w, g.out_h, g.out_w, win.rows.data(),
                           win.cols.data(), out);
}

template <typename T>
void mean_backward_isa(const T* grad, const Pool2dGeometry& g, const Windows& win, T* gx) {
    mean_backward(grad, g.n * g.c, g.h, g.w, g.out_h, g.out_w, win.rows.data(),
                  win.cols.data(), gx);
}

void mean_backward_isa(const float* grad, const Pool2dGeometry& g, const Windows& win,
                       float* gx) {
    kernels().mean_backward(grad, g.n * g.c, g.h, g.w, g.out_h, g.out_w, win.rows.data(),
                            win.cols.data(), gx);
}

}  // namespace

template <typename T>
void max_pool2d_forward(const T* x, const Pool2dGeometry& g, T* out, int32_t* argmax) {
    max_forward(x, g, out, argmax);
}

template <>
void max_pool2d_forward(const float* x, const Pool2dGeometry& g, float* out, int32_t* argmax) {
    kernels().max_forward(x, g, out, argmax);
}

template <typename T>
int64_t max_pool2d_backward(const T* grad, const int32_t* argmax, const Pool2dGeometry& g,
                            T* gx) {
    return max_backward(grad, argmax, g, gx);
}

template <>
int64_t max_pool2d_backward(const float* grad, const int32_t* argmax, const Pool2dGeometry& g,
                            float* gx) {
    return kernels().max_backward(grad, argmax, g, gx);
}

template <typename T>
void max_pool2d_values(const T* x, const Pool2dGeometry& g, T* out) {
    const std::vector<PoolTaps> rows = max_taps(g.out_h, g.kh, g.sh, g.ph, g.dh, g.h);
    const std::vector<PoolTaps> cols = max_taps(g.out_w, g.kw, g.sw, g.pw, g.dw, g.w);
    auto fn = max_values<T>;
    if constexpr (std::is_same_v<T, float>) fn = kernels().max_values;
    fn(x, g.n * g.c, g.h, g.w, g.out_h, g.out_w, g.kw, g.sw, rows.data(), cols.data(), out);
}

template <typename T>
void avg_pool2d_forward(const T* x, const Pool2dGeometry& g, bool count_include_pad, T* out) {
    mean_forward_isa(x, g, avg_windows(g, count_include_pad), out);
}

template <typename T>
void avg_pool2d_backward(const T* grad, const Pool2dGeometry& g, bool count_include_pad, T* gx) {
    mean_backward_isa(grad, g, avg_windows(g, count_include_pad), gx);
}

template <typename T>
void adaptive_avg_pool2d_forward(const T* x, const Pool2dGeometry& g, T* out) {
    mean_forward_isa(x, g, adaptive_windows(g), out);
}

template <typename T>
void adaptive_avg_pool2d_backward(const T* grad, const Pool2dGeometry& g, T* gx) {
    mean_backward_isa(grad, g, adaptive_windows(g), gx);
}

template void max_pool2d_values<float>(const float*, const Pool2dGeometry&, float*);
template void max_pool2d_values<double>(const double*, const Pool2dGeometry&, double*);
template void max_pool2d_forward<double>(const double*, const Pool2dGeometry&, double*, int32_t*);
template int64_t max_pool2d_backward<double>(const double*, const int32_t*,
                                             const Pool2dGeometry&, double*);
#define TY_MEAN(T)                                                                           \
    template void avg_pool2d_forward<T>(const T*, const Pool2dGeometry&, bool, T*);          \
    template void avg_pool2d_backward<T>(const T*, const Pool2dGeometry&, bool, T*);         \
    template void adaptive_avg_pool2d_forward<T>(const T*, const Pool2dGeometry&, T*);       \
    template void adaptive_avg_pool2d_backward<T>(const T*, const Pool2dGeometry&, T*);
TY_MEAN(float)
TY_MEAN(double)
#undef TY_MEAN

}  // namespace tianyuan
