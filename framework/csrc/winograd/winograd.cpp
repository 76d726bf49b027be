// Winograd F(2x2, 3x3) transforms; see winograd.h. The drivers live in winograd_impl.h;
// this file compiles them generically (float64, and float32 below AVX2) and dispatches
// float32 to the AVX2 / AVX-512 builds of the same drivers.
#include "winograd/winograd.h"

#include "runtime/cpu.h"
#include "runtime/dispatch.h"
#include "winograd/winograd_impl.h"

namespace tianyuan {
namespace {

// float32's transforms for the ISA in use (the family's one ISA decision)
struct WinogradKernels {
    void (*weight)(const float*, int64_t, int64_t, float*);
    void (*input)(const float*, const WinogradGeometry&, float*);
    void (*output)(const float*, const WinogradGeometry&, int64_t, float*);
};

void fill_winograd(WinogradKernels& k, Isa isa) {
    if (isa >= Isa::avx512) {
        k = {winograd_weight_avx512, winograd_input_avx512, winograd_output_avx512};
    } else if (isa >= Isa::avx2) {
        k = {winograd_weight_avx2, winograd_input_avx2, winograd_output_avx2};
    } else {
        k = {wino_weight<float>, wino_input<float>, wino_output<float>};
    }
}

Dispatch<WinogradKernels> kernels(fill_winograd);

}  // namespace

template <typename T>
void winograd_weight_transform(const T* w, int64_t co, int64_t c, T* u) {
    wino_weight(w, co, c, u);
}

template <>
void winograd_weight_transform(const float* w, int64_t co, int64_t c, float* u) {
    kernels().weight(w, co, c, u);
}

template <typename T>
void winograd_input_transform(const T* x, const WinogradGeometry& g, T* v) {
    wino_input(x, g, v);
}

template <>
void winograd_input_transform(const float* x, const WinogradGeometry& g, float* v) {
    kernels().input(x, g, v);
}

template <typename T>
void winograd_output_transform(const T* m, const WinogradGeometry& g, int64_t co, T* out) {
    wino_output(m, g, co, out);
}

template <>
void winograd_output_transform(const float* m, const WinogradGeometry& g, int64_t co,
                               float* out) {
    kernels().output(m, g, co, out);
}

template void winograd_weight_transform<double>(const double*, int64_t, int64_t, double*);
template void winograd_input_transform<double>(const double*, const WinogradGeometry&, double*);
template void winograd_output_transform<double>(const double*, const WinogradGeometry&, int64_t,
                                                double*);

}  // namespace tianyuan
