// Channels-last int8 activations outside the convolution (int8_ops.h): the transpose into
// channels-last, max and global average pooling on it. A model carries channels-last from its
// first conv to its DequantStub, so the transpose runs once, on the input image (3 channels:
// int8_channels_last_vbmi.cpp where the CPU has VBMI); the pools loop over a pixel's C
// contiguous bytes (max pooling's AVX-512 twin: int8_channels_last_avx512.cpp; global average
// pooling's loop, shared with it: int8_channels_last_pool.h). The kernels come from the
// family's table (int8_eltwise.h).
#include <omp.h>

#include <cstring>
#include <vector>

#include "int8_eltwise/int8_channels_last_pool.h"
#include "int8_eltwise/int8_eltwise.h"

namespace tianyuan {
namespace int8 {

void to_channels_last(const uint8_t* x, int64_t n, int64_t c, int64_t h, int64_t w,
                      const Border& pad, uint8_t* out) {
    const int64_t ph = pad.pt + h + pad.pb, pw = pad.pl + w + pad.pr;
    const auto interleave3 = eltwise_kernels().channels_last3;
    // runs of pixels contiguous in x and in out: an image's rows, or each row where the border
    // has columns; long runs in pieces of 4096 pixels (a thread's share of a small batch)
    const bool rows = pad.pl || pad.pr;
    const int64_t run = rows ? w : h * w, runs = rows ? h : 1;
    constexpr int64_t kPiece = 4096;
    const int64_t pieces = (run + kPiece - 1) / kPiece;
    const auto fill = [&pad](uint8_t* o, int64_t bytes) {  // most a row's few border bytes
        for (int64_t k = 0; k < bytes; ++k) o[k] = pad.fill;
    };
#pragma omp parallel for schedule(static) if (n * c * h * w > (1 << 16))
    for (int64_t i = 0; i < n * runs * pieces; ++i) {
        const int64_t img = i / (runs * pieces), r = i / pieces % runs, p0 = i % pieces * kPiece;
        const int64_t len = run - p0 < kPiece ? run - p0 : kPiece;
        const uint8_t* src = x + img * c * h * w + r * run + p0;
        uint8_t* row = out + ((img * ph + pad.pt + r) * pw + pad.pl) * c;  // a run's first pixel
        uint8_t* dst = row + p0 * c;
        if (c == 3) {
            interleave3(src, h * w, len, dst);  // the input image (bench/RESULTS.md, int8 layout)
        } else {
            for (int64_t ch = 0; ch < c; ++ch) {
                const uint8_t* plane = src + ch * h * w;
                for (int64_t p = 0; p < len; ++p) dst[p * c + ch] = plane[p];
            }
        }
        // the border beside the run, and the image's rows above and below with its ends
        if (p0 == 0) fill(row - pad.pl * c, pad.pl * c);
        if (p0 + len == run) fill(row + run * c, pad.pr * c);
        if (r == 0 && p0 == 0) fill(out + img * ph * pw * c, pad.pt * pw * c);
        if (r == runs - 1 && p0 + len == run) {
            fill(out + (img * ph + pad.pt + h) * pw * c, pad.pb * pw * c);
        }
    }
}

namespace {
template <class T>
void max_pool_nhwc(const T* x, const PoolGeom& g, int64_t c, T lowest, T* out) {
#pragma omp parallel for schedule(static) if (g.planes * g.oh * g.ow * c > (1 << 16))
    for (int64_t r = 0; r < g.planes * g.oh; ++r) {
        const int64_t n = r / g.oh, oy = r % g.oh;
        for (int64_t ox = 0; ox < g.ow; ++ox) {
            T* o = out + (r * g.ow + ox) * c;
            for (int64_t ch = 0; ch < c; ++ch) o[ch] = lowest;
            const WindowSpan rows = window_span(oy * g.sh - g.pt, g.kh, g.h);
            const WindowSpan cols = window_span(ox * g.sw - g.pl, g.kw, g.w);
            for (int64_t iy = rows.lo; iy < rows.hi; ++iy) {
                for (int64_t ix = cols.lo; ix < cols.hi; ++ix) {
                    const T* p = x + ((n * g.h + iy) * g.w + ix) * c;
                    for (int64_t ch = 0; ch < c; ++ch) o[ch] = p[ch] > o[ch] ? p[ch] : o[ch];
                }
            }
        }
    }
}

}  // namespace

void channels_last3_generic(const uint8_t* x, int64_t plane, int64_t len, uint8_t* out) {
    for (int64_t ch = 0; ch < 3; ++ch) {
        for (int64_t p = 0; p < len; ++p) out[p * 3 + ch] = x[ch * plane + p];
    }
}

void max_pool_nhwc_generic(const QIn& x, const PoolGeom& g, int64_t c, uint8_t* out) {
    if (x.is_signed) {
        max_pool_nhwc(reinterpret_cast<const int8_t*>(x.data), g, c, int8_t{-128},
                      reinterpret_cast<int8_t*>(out));
    } else {
        max_pool_nhwc(x.data, g, c, uint8_t{0}, out);
    }
}

void avg_pool_global_nhwc_generic(const QIn& x, int64_t n, int64_t hw, int64_t c,
                                  int32_t* sums, uint8_t* out) {
    avg_global_nhwc_any(x, n, hw, c, sums, out);
}

void max_pool2d_nhwc(const QIn& x, const PoolGeom& g, int64_t c, uint8_t* out) {
    eltwise_kernels().max_pool_nhwc(x, g, c, out);
}

void avg_pool_global_nhwc(const QIn& x, int64_t n, int64_t hw, int64_t c, uint8_t* out) {
    std::vector<int32_t> sums(n * c);
    eltwise_kernels().avg_pool_global_nhwc(x, n, hw, c, sums.data(), out);
}

}  // namespace int8
}  // namespace tianyuan
