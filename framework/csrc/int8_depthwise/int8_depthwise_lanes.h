// What the depthwise kernels with channels in the lanes share (int8_depthwise_lanes_avx2.cpp,
// int8_depthwise_lanes_vnni.cpp): per image and block of 16 channels, the 16 input planes are
// transposed into one position-major plane (16 bytes, the block's channels, per position)
// padded with the zero point, a kernel computes each output position's 16 channels into a
// position-major output plane, and that is transposed back into the NCHW rows. On 7x7 and
// 14x14 maps, and at stride 2, the per-plane kernels spend most of their time on each
// plane's set-up and on lanes left idle by short rows. Channel multiplier 1 only.
// Included only by ISA translation units with AVX2 or more; everything is `static`, so that
// each unit keeps its own copy (no COMDAT the linker could pick for a unit built with other
// flags), and no STL.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

// Bytes readable past the padded input plane: a kernel's loads of 4 or 8 positions at a
// window's last taps (their weights 0 past the kernel's width) reach up to 8 positions past.
constexpr int64_t kLanesSlack = 8 * 16;

static inline int64_t lanes_min(int64_t a, int64_t b) { return a < b ? a : b; }

// Two 16 x 16 byte transposes, one per 128-bit lane: afterwards v[k] holds byte k of every
// former v[i], in order of i.
static inline void transpose16x2(__m256i v[16]) {
    __m256i t[16];
    for (int i = 0; i < 8; ++i) {
        t[i] = _mm256_unpacklo_epi8(v[2 * i], v[2 * i + 1]);      // columns 0-7
        t[i + 8] = _mm256_unpackhi_epi8(v[2 * i], v[2 * i + 1]);  // columns 8-15
    }
    for (int h = 0; h < 2; ++h) {  // u[8h + 4q + i]: columns 8h + 4q .. +3, rows 4i .. 4i+3
        for (int i = 0; i < 4; ++i) {
            v[8 * h + i] = _mm256_unpacklo_epi16(t[8 * h + 2 * i], t[8 * h + 2 * i + 1]);
            v[8 * h + 4 + i] = _mm256_unpackhi_epi16(t[8 * h + 2 * i], t[8 * h + 2 * i + 1]);
        }
    }
    for (int q = 0; q < 4; ++q) {  // t[4q + ...]: columns 4q .. 4q+3 of 8 rows as s64
        t[4 * q + 0] = _mm256_unpacklo_epi32(v[4 * q + 0], v[4 * q + 1]);  // 4q, 4q+1; rows 0-7
        t[4 * q + 1] = _mm256_unpackhi_epi32(v[4 * q + 0], v[4 * q + 1]);  // 4q+2, +3; rows 0-7
        t[4 * q + 2] = _mm256_unpacklo_epi32(v[4 * q + 2], v[4 * q + 3]);  // rows 8-15
        t[4 * q + 3] = _mm256_unpackhi_epi32(v[4 * q + 2], v[4 * q + 3]);
    }
    for (int q = 0; q < 4; ++q) {
        v[4 * q + 0] = _mm256_unpacklo_epi64(t[4 * q + 0], t[4 * q + 2]);
        v[4 * q + 1] = _mm256_unpackhi_epi64(t[4 * q + 0], t[4 * q + 2]);
        v[4 * q + 2] = _mm256_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
        v[4 * q + 3] = _mm256_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
    }
}

// The first n (<= 32) bytes of v at out, without a library call.
static inline void store_upto32(uint8_t* out, __m256i v, int64_t n) {
    if (n >= 32) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
        return;
    }
    __m128i h = _mm256_castsi256_si128(v);
    if (n >= 16) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), h);
        h = _mm256_extracti128_si256(v, 1);
        out += 16;
        n -= 16;
    }
    if (n >= 8) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out), h);
        h = _mm_srli_si128(h, 8);
        out += 8;
        n -= 8;
    }
    uint64_t rest = static_cast<uint64_t>(_mm_cvtsi128_si64(h));
    for (; n > 0; --n, rest >>= 8) *out++ = static_cast<uint8_t>(rest);
}

// 16 planes of hw bytes (x + rows[i], flipped by fv) into the position-major plane xt: input
// position q at byte at[q], its 16 channels in order. Reads stop at x's byte `size`.
static void to_lanes(const uint8_t* x, const int64_t* rows, int64_t size, int64_t hw,
              const int64_t* at, __m256i fv, uint8_t* xt) {
    for (int64_t q = 0; q < hw; q += 32) {
        __m256i v[16];
        for (int i = 0; i < 16; ++i) {
            const int64_t from = rows[i] + q;
            if (from + 32 <= size) {
                v[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + from));
            } else {  // the tensor's last bytes: no read past them
                alignas(32) uint8_t tmp[32] = {};
                std::memcpy(tmp, x + from, static_cast<size_t>(size - from));
                v[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
            }
            v[i] = _mm256_xor_si256(v[i], fv);
        }
        transpose16x2(v);  // v[k]: positions q + k (low lane) and q + 16 + k (high lane)
        const int64_t m = lanes_min(32, hw - q);
        for (int k = 0; k < 16 && k < m; ++k) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(xt + at[q + k]),
                             _mm256_castsi256_si128(v[k]));
        }
        for (int k = 0; k + 16 < m; ++k) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(xt + at[q + 16 + k]),
                             _mm256_extracti128_si256(v[k], 1));
        }
    }
}

// The position-major outputs ot (p, 16), readable 32 positions past p, into the first nc
// of 16 NCHW rows of p bytes from out.
static void from_lanes(const uint8_t* ot, int64_t p, int nc, uint8_t* out) {
    for (int64_t o = 0; o < p; o += 32) {
        __m256i v[16];
        for (int i = 0; i < 16; ++i) {
            const auto* row = reinterpret_cast<const __m128i*>(ot + (o + i) * 16);
            v[i] = _mm256_loadu2_m128i(row + 16, row);
        }
        transpose16x2(v);  // v[k]: channel k's positions o .. o + 31
        for (int k = 0; k < nc; ++k) store_upto32(out + k * p + o, v[k], p - o);
    }
}

// Runs the depthwise convolution with every (image, block of 16 channels) pair as a task
// (tasks go image-minor). Block: a kernel's state for one block of channels, copied per
// thread from `proto`; make(c0, nc) sets it up for channels [c0, c0 + nc), once for the
// images of a block that a thread runs in a row (made per task, the constants had been most
// of a 7x7 map's set-up: MobileNetV2's 960 channels at batch 16); run(xt, wp, ot) computes the
// block's outputs from the padded position-major plane xt (row length wp) into ot (p, 16).
// at: input position q's byte in xt.
template <class Block>
static void lanes_conv(const QIn& x, const ConvGeom& g, const int64_t* at, const Block& proto,
                       uint8_t* out) {
    const int64_t hw = g.h * g.w, p = g.oh * g.ow, taps = g.kh * g.kw;
    const int64_t wp = g.w + g.pl + g.pr, hp = g.h + g.pt + g.pb;
    const int64_t blocks = (g.c + 15) / 16;
    const int32_t z = zero_of(x);
    const int64_t xt_bytes = (hp * wp * 16 + kLanesSlack + 63) / 64 * 64;
    const int64_t ot_bytes = (p + 32) * 16, size = g.n * g.c * hw;
    const __m256i fv = _mm256_set1_epi8(static_cast<char>(flip_of(x)));
#pragma omp parallel if (g.n * g.c * p * taps > (1 << 15))
    {
        uint8_t* xt = thread_space(Space::depthwise, xt_bytes + ot_bytes);
        uint8_t* ot = xt + xt_bytes;
        std::memset(xt, z, static_cast<size_t>(hp * wp * 16));  // the border, kept by all
        Block block = proto;
        int64_t made = -1;  // the block of channels it is for
#pragma omp for schedule(static)
        for (int64_t task = 0; task < g.n * blocks; ++task) {
            const int64_t n = task % g.n, c0 = task / g.n * 16;
            const int nc = static_cast<int>(lanes_min(16, g.c - c0));
            int64_t rows[16];  // a part-filled block repeats its last plane
            for (int i = 0; i < 16; ++i) rows[i] = (n * g.c + c0 + lanes_min(i, nc - 1)) * hw;
            to_lanes(x.data, rows, size, hw, at, fv, xt);
            if (made != c0) {
                block.make(c0, nc);
                made = c0;
            }
            block.run(xt, wp, ot);
            from_lanes(ot, p, nc, out + (n * g.c + c0) * p);
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
