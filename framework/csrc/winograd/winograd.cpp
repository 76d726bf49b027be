// Winograd F(2x2, 3x3) transforms; see winograd.h. The drivers live in winograd_impl.h;
// this file compiles them generically (float64, and float32 below AVX2) and dispatches
// float32 to the AVX2 / AVX-512 builds of the same drivers.
#include "winograd/winograd.h"

#include "runtime/cpu.h"
#include "winograd/winograd_impl.h"

namespace tianyuan {

template <typename T>
void winograd_weight_transform(const T* w, int64_t co, int64_t c, T* u) {
    wino_weight(w, co, c, u);
}

template <>
void winograd_weight_transform(const float* w, int64_t co, int64_t c, float* u) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return winograd_weight_avx512(w, co, c, u);
    if (isa >= Isa::avx2) return winograd_weight_avx2(w, co, c, u);
    wino_weight(w, co, c, u);
}

template <typename T>
void winograd_input_transform(const T* x, const WinogradGeometry& g, T* v) {
    wino_input(x, g, v);
}

template <>
void winograd_input_transform(const float* x, const WinogradGeometry& g, float* v) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return winograd_input_avx512(x, g, v);
    if (isa >= Isa::avx2) return winograd_input_avx2(x, g, v);
    wino_input(x, g, v);
}

template <typename T>
void winograd_output_transform(const T* m, const WinogradGeometry& g, int64_t co, T* out) {
    wino_output(m, g, co, out);
}

template <>
void winograd_output_transform(const float* m, const WinogradGeometry& g, int64_t co,
                               float* out) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return winograd_output_avx512(m, g, co, out);
    if (isa >= Isa::avx2) return winograd_output_avx2(m, g, co, out);
    wino_output(m, g, co, out);
}

template void winograd_weight_transform<double>(const double*, int64_t, int64_t, double*);
template void winograd_input_transform<double>(const double*, const WinogradGeometry&, double*);
template void winograd_output_transform<double>(const double*, const WinogradGeometry&, int64_t,
                                                double*);

}  // namespace tianyuan
