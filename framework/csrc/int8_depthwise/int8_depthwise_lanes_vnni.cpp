// AVX512-VNNI depthwise int8 convolution with channels in the lanes (the scheme and its driver:
// int8_depthwise_lanes.h), for column dilation 1, kernels up to 8x8 and shifts of 33 or more.
// A 64-byte load at a window row holds 4 adjacent positions' 16 channels; a dword permute and
// an in-lane byte shuffle (no VBMI) make of it 16 dwords, channel c's 4 adjacent bytes in
// lane c, the u8 operand of vpdpbusd against that channel's 4 taps of the row (zeros past the
// kernel's width): one vpdpbusd per kernel row (two past 4 columns) sums 16 channels of an
// output position. They are requantized as s32 lanes with per-lane constants, requant16's
// form for shifts of 33 or more, exactly reference.requantize.
#include <immintrin.h>

#include <cstdint>

#include "int8_depthwise/int8_depthwise_lanes.h"
#include "int8_gemm/int8_requant_avx512.h"

namespace tianyuan {
namespace int8 {
namespace {

constexpr int kMaxTap = 8;  // kernel rows and columns

// Lane c of the result: bytes p[c], p[16 + c], p[32 + c], p[48 + c] (channel c at 4 adjacent
// positions). The dword permute puts dword L of position j into dword 4L + j (lane L holds
// channels 4L .. 4L + 3 of the 4 positions), the shuffle transposes each lane's 4 x 4 bytes.
inline __m512i quads(const uint8_t* p, __m512i dwords, __m512i bytes) {
    const __m512i v = _mm512_permutexvar_epi32(dwords, _mm512_loadu_si512(p));
    return _mm512_shuffle_epi8(v, bytes);
}

// The kernel's state for one block of channels (lanes_conv's Block).
struct VnniBlock {
    const ConvGeom* g;
    const int32_t* words;  // depthwise_consts: (oc, kh, nd) tap words
    const int32_t* sums;
    const int32_t* bias;
    const Requant* r;
    const int64_t* off;  // (kh, nd): the tap words' first positions, bytes in the plane
    int32_t z;
    int nd;
    __m512i lo, hi, zp;  // the output range less the zero point; the zero point
    __m512i tw[2 * kMaxTap];
    __m512i cbias, mult, mult_odd, half_hi, shift_hi;

    void make(int64_t c0, int nc) {
        const int64_t n = g->kh * nd;
        alignas(64) int32_t t[16];
        for (int64_t k = 0; k < n; ++k) {
            for (int c = 0; c < 16; ++c) t[c] = c < nc ? words[(c0 + c) * n + k] : 0;
            tw[k] = _mm512_load_si512(t);
        }
        alignas(64) int32_t b[16], m[16], hh[16], sh[16];
        for (int c = 0; c < 16; ++c) {
            const bool real = c < nc;
            const int32_t s = real ? r->shift[c0 + c] : 33;
            // the bias corrected for the input zero point, bias - z * sum(w) mod 2^32
            b[c] = real ? static_cast<int32_t>(static_cast<uint32_t>(bias[c0 + c]) -
                                               static_cast<uint32_t>(z) *
                                                   static_cast<uint32_t>(sums[c0 + c]))
                        : 0;
            m[c] = real ? r->multiplier[c0 + c] : 0;
            hh[c] = 1 << (s - 33);
            sh[c] = s - 32;
        }
        cbias = _mm512_load_si512(b);
        mult = _mm512_load_si512(m);
        mult_odd = _mm512_srli_epi64(mult, 32);
        half_hi = _mm512_load_si512(hh);
        shift_hi = _mm512_load_si512(sh);
    }

    // 16 channels' sums -> their output bytes
    __m128i requant(__m512i acc) const {
        __m512i y = fold_lanes(_mm512_add_epi32(acc, cbias), mult, mult_odd, half_hi, shift_hi);
        y = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(y, lo), hi), zp);
        return _mm512_cvtepi32_epi8(y);
    }

    template <int KH, int ND>
    void positions(const uint8_t* xt, int64_t wp, uint8_t* ot) const {
        const int64_t kh = KH ? KH : g->kh, n = ND ? ND : nd;
        const __m512i dwords =
            _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
        const __m512i bytes = _mm512_broadcast_i32x4(
            _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
        for (int64_t oy = 0; oy < g->oh; ++oy) {
            const uint8_t* row = xt + oy * g->sh * wp * 16;
            for (int64_t ox = 0; ox < g->ow; ++ox) {
                const uint8_t* base = row + ox * g->sw * 16;
                __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 16
                for (int64_t k = 0; k < kh * n; ++k) {
                    acc = _mm512_dpbusd_epi32(acc, quads(base + off[k], dwords, bytes), tw[k]);
                }
                _mm_storeu_si128(reinterpret_cast<__m128i*>(ot + (oy * g->ow + ox) * 16),
                                 requant(acc));
            }
        }
    }

    void run(const uint8_t* xt, int64_t wp, uint8_t* ot) const {
        if (g->kh == 3 && g->kw == 3) return positions<3, 1>(xt, wp, ot);
        if (g->kh == 5 && g->kw == 5) return positions<5, 2>(xt, wp, ot);
        positions<0, 0>(xt, wp, ot);
    }
};

}  // namespace

bool depthwise_lanes_vnni_takes(const ConvGeom& g, const Requant& r) {
    if (g.oc != g.c || g.dw != 1 || g.kh > kMaxTap || g.kw > kMaxTap) return false;
    for (int64_t c = 0; c < g.oc; ++c) {
        if (r.shift[c] < 33) return false;
    }
    return true;
}

void depthwise_lanes_vnni(const QIn& x, const ConvGeom& g, const int32_t* words,
                          const int32_t* sums, const int32_t* bias, const Requant& r,
                          const int64_t* at, uint8_t* out) {
    const int64_t wp = g.w + g.pl + g.pr;
    const int nd = depthwise_words_per_row(g.kw);
    int64_t off[2 * kMaxTap];
    for (int64_t i = 0; i < g.kh; ++i) {
        for (int d = 0; d < nd; ++d) off[i * nd + d] = (i * g.dh * wp + 4 * d) * 16;
    }
    const int32_t lo = r.lo - r.zero_point, hi = r.hi - r.zero_point;
    VnniBlock proto{};
    proto.g = &g;
    proto.words = words;
    proto.sums = sums;
    proto.bias = bias;
    proto.r = &r;
    proto.off = off;
    proto.z = zero_of(x);
    proto.nd = nd;
    proto.lo = _mm512_set1_epi32(lo);
    proto.hi = _mm512_set1_epi32(hi);
    proto.zp = _mm512_set1_epi32(r.zero_point);
    lanes_conv(x, g, at, proto, out);
}

}  // namespace int8
}  // namespace tianyuan
