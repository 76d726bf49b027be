// im2col / col2im; see im2col.h for the layout. The drivers live in im2col_impl.h; this file
// compiles them generically (float64, and float32 below AVX2) and dispatches float32 to the
// AVX2 / AVX-512 builds of the same drivers.
#include "im2col/im2col.h"
#include "im2col/im2col_impl.h"
#include "runtime/cpu.h"
#include "runtime/dispatch.h"

namespace tianyuan {
namespace {

// float32's im2col / col2im for the ISA in use (the family's one ISA decision)
struct Im2colKernels {
    void (*im2col)(const float*, const Conv2dGeometry&, float*);
    void (*col2im)(const float*, const Conv2dGeometry&, float*);
};

void fill_im2col(Im2colKernels& k, Isa isa) {
    if (isa >= Isa::avx512) {
        k = {im2col_avx512, col2im_avx512};
    } else if (isa >= Isa::avx2) {
        k = {im2col_avx2, col2im_avx2};
    } else {
        k = {i2c<float>, c2i<float>};
    }
}

Dispatch<Im2colKernels> kernels(fill_im2col);

}  // namespace

template <typename T>
void im2col(const T* x, const Conv2dGeometry& g, T* cols) {
    i2c(x, g, cols);
}

template <>
void im2col(const float* x, const Conv2dGeometry& g, float* cols) {
    kernels().im2col(x, g, cols);
}

template <typename T>
void col2im(const T* cols, const Conv2dGeometry& g, T* x) {
    c2i(cols, g, x);
}

template <>
void col2im(const float* cols, const Conv2dGeometry& g, float* x) {
    kernels().col2im(cols, g, x);
}

// 1x1 taps: a plain transpose out (C, Co) of w (Co, C), in 32 x 32 tiles (each row of out
// written contiguously from a tile of w in L1), the tiles in parallel. The general loop below
// wrote a row of 16 channels at a stride of Co per value.
template <typename T>
void transpose_tiles(const T* w, int64_t co, int64_t c, T* out) {
    constexpr int64_t kTile = 32;
    const int64_t ot = (co + kTile - 1) / kTile, ct = (c + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (co * c > (1 << 16))
    for (int64_t t = 0; t < ot * ct; ++t) {
        const int64_t o0 = t / ct * kTile, c0 = t % ct * kTile;
        const int64_t o1 = o0 + kTile < co ? o0 + kTile : co, c1 = c0 + kTile < c ? c0 + kTile : c;
        for (int64_t ci = c0; ci < c1; ++ci)
            for (int64_t o = o0; o < o1; ++o) out[ci * co + o] = w[o * c + ci];
    }
}

template <typename T>
void flip_kernel(const T* w, int64_t co, int64_t c, int64_t kh, int64_t kw, T* out) {
    if (kh * kw == 1) return transpose_tiles(w, co, c, out);
    const int64_t taps = kh * kw, block = 16;  // w's rows are read 16 channels at a time
#pragma omp parallel for schedule(static) if (co * c * taps > (1 << 16))
    for (int64_t c0 = 0; c0 < c; c0 += block) {
        const int64_t c1 = c0 + block < c ? c0 + block : c;
        for (int64_t o = 0; o < co; ++o)
            for (int64_t ci = c0; ci < c1; ++ci) {
                const T* src = w + (o * c + ci) * taps;
                T* dst = out + (ci * co + o) * taps;
                for (int64_t t = 0; t < taps; ++t) dst[t] = src[taps - 1 - t];
            }
    }
}

template void flip_kernel<float>(const float*, int64_t, int64_t, int64_t, int64_t, float*);
template void flip_kernel<double>(const double*, int64_t, int64_t, int64_t, int64_t, double*);
template void im2col<double>(const double*, const Conv2dGeometry&, double*);
template void col2im<double>(const double*, const Conv2dGeometry&, double*);

}  // namespace tianyuan
