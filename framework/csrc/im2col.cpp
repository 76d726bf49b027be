// im2col / col2im; see im2col.h for the layout. The drivers live in im2col_impl.h; this file
// compiles them generically (float64, and float32 below AVX2) and dispatches float32 to the
// AVX2 / AVX-512 builds of the same drivers.
#include "cpu.h"
#include "im2col.h"
#include "im2col_impl.h"

namespace tianyuan {

template <typename T>
void im2col(const T* x, const Conv2dGeometry& g, T* cols) {
    i2c(x, g, cols);
}

template <>
void im2col(const float* x, const Conv2dGeometry& g, float* cols) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return im2col_avx512(x, g, cols);
    if (isa >= Isa::avx2) return im2col_avx2(x, g, cols);
    i2c(x, g, cols);
}

template <typename T>
void col2im(const T* cols, const Conv2dGeometry& g, T* x) {
    c2i(cols, g, x);
}

template <>
void col2im(const float* cols, const Conv2dGeometry& g, float* x) {
    const Isa isa = current_isa();
    if (isa >= Isa::avx512) return col2im_avx512(cols, g, x);
    if (isa >= Isa::avx2) return col2im_avx2(cols, g, x);
    c2i(cols, g, x);
}

template void im2col<double>(const double*, const Conv2dGeometry&, double*);
template void col2im<double>(const double*, const Conv2dGeometry&, double*);

}  // namespace tianyuan
