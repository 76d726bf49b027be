// Winograd F(2x2, 3x3) transforms, float32, compiled with the avx2 flags: the plain-loop
// drivers of winograd_impl.h vectorise over the tiles of a row (16 or 8 lanes).
#include <cstdint>

#include "winograd/winograd.h"
#include "winograd/winograd_impl.h"

namespace tianyuan {

void winograd_weight_avx2(const float* w, int64_t co, int64_t c, float* u) {
    wino_weight(w, co, c, u);
}

void winograd_input_avx2(const float* x, const WinogradGeometry& g, float* v) {
    wino_input(x, g, v);
}

void winograd_output_avx2(const float* m, const WinogradGeometry& g, int64_t co, float* out) {
    wino_output(m, g, co, out);
}

}  // namespace tianyuan
