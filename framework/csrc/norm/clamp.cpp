// Clamp (clamp.h): the generic build of the drivers and the family's dispatch table, whose
// fill function is its one ISA decision (runtime/dispatch.h).
#include "norm/clamp.h"

#include "norm/clamp_impl.h"
#include "runtime/cpu.h"
#include "runtime/dispatch.h"

namespace tianyuan {
namespace {

struct ClampKernels {
    void (*forward)(const float*, int64_t, float, float, float*);
    void (*backward)(const float*, const float*, int64_t, float, float, float*);
    void (*add)(const float*, const float*, int64_t, float, float, float*);
    void (*masked_grad)(const float*, const uint8_t*, int64_t, float*);
    void (*min_max)(const float*, int64_t, float*, float*);
    void (*min_max_rows)(const float*, int64_t, int64_t, float*, float*);
};

void fill_clamp(ClampKernels& k, Isa isa) {
    if (isa >= Isa::avx512) {
        k = {clamp_forward_avx512, clamp_backward_avx512, add_clamp_avx512, masked_grad_avx512,
             min_max_avx512, min_max_rows_avx512};
    } else if (isa >= Isa::avx2) {
        k = {clamp_forward_avx2, clamp_backward_avx2, add_clamp_avx2, masked_grad_avx2,
             min_max_avx2, min_max_rows_avx2};
    } else {
        k = {clamp_run, clamp_backward_run, add_clamp_run, masked_grad_run, min_max_run,
             min_max_rows_run};
    }
}

Dispatch<ClampKernels> kernels(fill_clamp);

}  // namespace

void clamp_forward(const float* x, int64_t n, float lo, float hi, float* y) {
    kernels().forward(x, n, lo, hi, y);
}

void clamp_backward(const float* g, const float* y, int64_t n, float lo, float hi, float* gx) {
    kernels().backward(g, y, n, lo, hi, gx);
}

void add_clamp(const float* a, const float* b, int64_t n, float lo, float hi, float* y) {
    kernels().add(a, b, n, lo, hi, y);
}

void masked_grad(const float* g, const uint8_t* mask, int64_t n, float* gx) {
    kernels().masked_grad(g, mask, n, gx);
}

void min_max(const float* x, int64_t n, float* lo, float* hi) {
    kernels().min_max(x, n, lo, hi);
}

void min_max_rows(const float* x, int64_t rows, int64_t cols, float* lo, float* hi) {
    kernels().min_max_rows(x, rows, cols, lo, hi);
}

}  // namespace tianyuan
