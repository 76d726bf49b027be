// AVX-VNNI depthwise int8 convolution of one channel plane (column dilation 1, column stride
// 1 or 2, kernels up to 8x8): the VNNI kernel's scheme (int8_depthwise_vnni.cpp) on ymm, for
// CPUs with the VEX-encoded vpdpbusd but no AVX-512. vpdpbusd multiplies 4 adjacent bytes of
// one kernel row by 4 taps and sums them into each s32 lane, so no input is widened (the AVX2
// kernel widens every input to int16 and needs one vpmaddwd per tap pair): a 32-byte load at
// row + s holds in lane t the bytes row[s + 4t .. s + 4t + 3], the window row of output
// 4t + s at column stride 1 (loads at s = 0..3: 4 accumulators, 32 outputs) and of output
// 2t + s / 2 at stride 2 (s = 0, 2: 16 outputs). Kernels wider than 4 add a second tap word
// per row (taps 4..7, loads at + 4). Each accumulator is requantized exactly as
// reference.requantize (int8_requant_avx2.h) and the phases are put back in order with shifts
// and ors. The plane comes padded with the zero point (and sign-flipped for s8) from
// depthwise_simd (int8_depthwise.cpp), readable kPadSlack bytes past its end; the zero-point
// term z * sum(w) is in the bias already.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"
#include "int8_gemm/int8_requant_avx2.h"

namespace tianyuan {
namespace int8 {
namespace {

constexpr int64_t kMaxTap = 8;  // kernel rows and columns this kernel takes

// Per kernel row i and tap word d (taps 4d .. 4d + 3 of the row, zeros past kw) one
// broadcast s32: the s8 operand of vpdpbusd.
struct TapWords {
    __m256i v[2 * kMaxTap];
};

inline __m256i load(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The window sums of one step: S = 1: a[s] lane t = output 4t + s of the 32 outputs at p;
// S = 2: a[0], a[1] lane t = outputs 2t, 2t + 1 of the 16 at p (input offsets 2 apart).
// KH = 0: kh from the caller. dy = row step of the kernel (dh * wp).
template <int KH, int ND, int S>
inline void window(const uint8_t* p, int64_t dy, int64_t kh, const TapWords& t, __m256i* a) {
    const int64_t rows = KH ? KH : kh;
#pragma GCC unroll 8
    for (int64_t i = 0; i < rows; ++i) {
        const uint8_t* row = p + i * dy;
#pragma GCC unroll 2
        for (int d = 0; d < ND; ++d) {
            const __m256i wv = t.v[i * ND + d];
            const uint8_t* q = row + 4 * d;
            a[0] = _mm256_dpbusd_avx_epi32(a[0], load(q), wv);
            a[1] = _mm256_dpbusd_avx_epi32(a[1], load(q + S), wv);
            if (S == 1) {
                a[2] = _mm256_dpbusd_avx_epi32(a[2], load(q + 2), wv);
                a[3] = _mm256_dpbusd_avx_epi32(a[3], load(q + 3), wv);
            }
        }
    }
}

// One step: the 32 / S outputs in order in the low 32 / S bytes of the result. Always inline:
// GCC 12 had kept step<5, 2, 1> (5x5, stride 1) out of line, a call per 32 outputs.
template <int KH, int ND, int S>
inline __attribute__((always_inline)) __m256i step(const uint8_t* p, int64_t dy, int64_t kh, const TapWords& t,
                    const Chan& c) {
    const __m256i z = _mm256_setzero_si256();
    __m256i a[4] = {z, z, z, z};
    window<KH, ND, S>(p, dy, kh, t, a);
    // each requantized lane holds its output byte's value (s8 outputs sign-extended)
    const __m256i byte = _mm256_set1_epi32(0xFF);
    const __m256i y0 = _mm256_and_si256(requant8(a[0], c), byte);
    const __m256i y1 = _mm256_slli_epi32(_mm256_and_si256(requant8(a[1], c), byte), 8);
    if (S == 2) {
        // lane t: outputs 2t, 2t + 1 in its low 16 bits; 16-bit words in order
        const __m256i w = _mm256_packus_epi32(_mm256_or_si256(y0, y1), z);
        return _mm256_permute4x64_epi64(w, 0x08);
    }
    const __m256i y2 = _mm256_slli_epi32(_mm256_and_si256(requant8(a[2], c), byte), 16);
    const __m256i y3 = _mm256_slli_epi32(requant8(a[3], c), 24);
    return _mm256_or_si256(_mm256_or_si256(y0, y1), _mm256_or_si256(y2, y3));
}

// Output row by row, 32 / S outputs a step, straight into out.
template <int KH, int ND, int S>
void rows(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t, const Chan& c,
          uint8_t* out) {
    constexpr int64_t L = 32 / S;
    const int64_t dy = g.dh * wp;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
        const uint8_t* top = xp + oy * g.sh * wp;
        for (int64_t x0 = 0; x0 < g.ow; x0 += L)
            store_first32(step<KH, ND, S>(top + S * x0, dy, g.kh, t, c), out + oy * g.ow + x0,
                          g.ow - x0 < L ? g.ow - x0 : L);
    }
}

// Row stride = column stride S: the plane as one flat run, output f = oy * wp + ox at input
// S * f, so steps run across row ends (small planes fill the lanes), into `flat` (oh * wp +
// 64 bytes); then each row's ow columns are copied out in 32-byte steps, in order, the last
// step of a row running into the next row's place (rewritten next); the rows whose steps
// would pass the plane's end, exactly: no memcpy per row (bench/RESULTS.md, int8 kernels:
// depthwise).
template <int KH, int ND, int S>
void flat(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t, const Chan& c,
          uint8_t* out, uint8_t* flat) {
    constexpr int64_t L = 32 / S;
    const int64_t nf = (g.oh - 1) * wp + g.ow, dy = g.dh * wp, ow = g.ow, total = g.oh * ow;
    for (int64_t f = 0; f < nf; f += L)
        store_first32(step<KH, ND, S>(xp + S * f, dy, g.kh, t, c), flat + f,
                      nf - f < L ? nf - f : L);
    const int64_t whole = (ow + 31) / 32 * 32;  // bytes a row's steps write
    int64_t oy = 0;
    for (; oy < g.oh && oy * ow + whole <= total; ++oy)
        for (int64_t x = 0; x < ow; x += 32)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + oy * ow + x),
                                load(flat + oy * wp + x));
    for (; oy < g.oh; ++oy)
        std::memcpy(out + oy * ow, flat + oy * wp, static_cast<size_t>(ow));
}

template <int KH, int ND, int S>
void plane(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t, const Chan& c,
           uint8_t* out, uint8_t* scratch) {
    constexpr int64_t L = 32 / S;
    const int64_t flat_steps = ((g.oh - 1) * wp + g.ow + L - 1) / L;
    const int64_t row_steps = g.oh * ((g.ow + L - 1) / L);
    if (g.sh == S && flat_steps < row_steps) return flat<KH, ND, S>(xp, wp, g, t, c, out, scratch);
    rows<KH, ND, S>(xp, wp, g, t, c, out);
}

template <int S>
void plane_any(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t,
               const Chan& c, uint8_t* out, uint8_t* scratch) {
    if (g.kh == 3 && g.kw == 3) return plane<3, 1, S>(xp, wp, g, t, c, out, scratch);
    if (g.kh == 5 && g.kw == 5) return plane<5, 2, S>(xp, wp, g, t, c, out, scratch);
    if (g.kw <= 4) return plane<0, 1, S>(xp, wp, g, t, c, out, scratch);
    plane<0, 2, S>(xp, wp, g, t, c, out, scratch);
}

}  // namespace

bool depthwise_avxvnni_takes(const ConvGeom& g) {
    return g.dw == 1 && (g.sw == 1 || g.sw == 2) && g.kh <= kMaxTap && g.kw <= kMaxTap;
}

void depthwise_plane_avxvnni(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
                             const RowParams& q, const Requant& r, uint8_t* out,
                             uint8_t* scratch) {
    const Chan c = chan(q.bias[0], q.multiplier[0], q.shift[0], r);
    const int nd = g.kw <= 4 ? 1 : 2;
    TapWords t;
    for (int64_t i = 0; i < g.kh; ++i) {
        for (int d = 0; d < nd; ++d) {
            int8_t b[4] = {0, 0, 0, 0};
            for (int j = 0; j < 4 && 4 * d + j < g.kw; ++j) b[j] = w[i * g.kw + 4 * d + j];
            int32_t word;
            std::memcpy(&word, b, sizeof(word));
            t.v[i * nd + d] = _mm256_set1_epi32(word);
        }
    }
    if (g.sw == 1) return plane_any<1>(xp, wp, g, t, c, out, scratch);
    plane_any<2>(xp, wp, g, t, c, out, scratch);
}

}  // namespace int8
}  // namespace tianyuan
