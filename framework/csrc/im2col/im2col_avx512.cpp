// im2col / col2im drivers (im2col_impl.h), float32, compiled with the avx512 flags.
#include <cstdint>

#include "im2col/im2col.h"
#include "im2col/im2col_impl.h"

namespace tianyuan {

void im2col_avx512(const float* x, const Conv2dGeometry& g, float* cols) { i2c(x, g, cols); }

void col2im_avx512(const float* cols, const Conv2dGeometry& g, float* x) { c2i(cols, g, x); }

}  // namespace tianyuan
