// Clamp drivers (clamp_impl.h), compiled with the avx2 flags.
#include <cstdint>

#include "clamp.h"
#include "clamp_impl.h"

namespace tianyuan {

void clamp_forward_avx2(const float* x, int64_t n, float lo, float hi, float* y) {
    clamp_run(x, n, lo, hi, y);
}

void clamp_backward_avx2(const float* g, const float* y, int64_t n, float lo, float hi,
                         float* gx) {
    clamp_backward_run(g, y, n, lo, hi, gx);
}

}  // namespace tianyuan
