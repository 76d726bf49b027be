// Clamp (clamp.h): the generic build of the drivers and the ISA dispatch.
#include "norm/clamp.h"

#include "norm/clamp_impl.h"
#include "runtime/cpu.h"

namespace tianyuan {

void clamp_forward(const float* x, int64_t n, float lo, float hi, float* y) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return clamp_forward_avx512(x, n, lo, hi, y);
    if (isa >= Isa::avx2) return clamp_forward_avx2(x, n, lo, hi, y);
    clamp_run(x, n, lo, hi, y);
}

void clamp_backward(const float* g, const float* y, int64_t n, float lo, float hi, float* gx) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return clamp_backward_avx512(g, y, n, lo, hi, gx);
    if (isa >= Isa::avx2) return clamp_backward_avx2(g, y, n, lo, hi, gx);
    clamp_backward_run(g, y, n, lo, hi, gx);
}

void add_clamp(const float* a, const float* b, int64_t n, float lo, float hi, float* y) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return add_clamp_avx512(a, b, n, lo, hi, y);
    if (isa >= Isa::avx2) return add_clamp_avx2(a, b, n, lo, hi, y);
    add_clamp_run(a, b, n, lo, hi, y);
}

void masked_grad(const float* g, const uint8_t* mask, int64_t n, float* gx) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return masked_grad_avx512(g, mask, n, gx);
    if (isa >= Isa::avx2) return masked_grad_avx2(g, mask, n, gx);
    masked_grad_run(g, mask, n, gx);
}

void min_max(const float* x, int64_t n, float* lo, float* hi) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return min_max_avx512(x, n, lo, hi);
    if (isa >= Isa::avx2) return min_max_avx2(x, n, lo, hi);
    min_max_run(x, n, lo, hi);
}

void min_max_rows(const float* x, int64_t rows, int64_t cols, float* lo, float* hi) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return min_max_rows_avx512(x, rows, cols, lo, hi);
    if (isa >= Isa::avx2) return min_max_rows_avx2(x, rows, cols, lo, hi);
    min_max_rows_run(x, rows, cols, lo, hi);
}

}  // namespace tianyuan
