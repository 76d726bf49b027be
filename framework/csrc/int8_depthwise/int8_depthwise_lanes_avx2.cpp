// AVX2 depthwise int8 convolution with channels in the lanes (the scheme and its driver:
// int8_depthwise_lanes.h): each output position's 16 channels are computed at once (two
// taps' inputs as int16, interleaved, one vpmaddwd against the taps' weight pairs, per
// channel, as the plane kernel does along a row) and requantized with per-lane constants,
// exactly reference.requantize.
#include <immintrin.h>

#include <cstdint>

#include "int8_depthwise/int8_depthwise_lanes.h"
#include "int8_gemm/int8_requant_avx2.h"

namespace tianyuan {
namespace int8 {
namespace {

// No STL in an ISA translation unit (setup.py): an instance compiled with AVX2 flags could be
// the one the linker keeps for generic code.
constexpr int kMaxPairs = 13;  // windows up to 26 taps (5x5)

// Lane j of the low accumulator holds channel kLo[j] of the block, of the high one kHi[j]
// (vpunpck{l,h}wd work within 128-bit lanes).
constexpr int kLo[8] = {0, 1, 2, 3, 8, 9, 10, 11};
constexpr int kHi[8] = {4, 5, 6, 7, 12, 13, 14, 15};

// Per-lane requantization constants of 8 channels. kFold (every shift >= 33): the s32 form of
// int8_requant_avx2.h on the products' high halves; kSat, besides, the zero point joined to
// the rounding half (requant8_sat's form, where every lane's sat_add holds)
// and no clamp where the output range is the type's own (the packs saturate); else kS64,
// the s64 form with per-lane shifts.
enum Mode { kS64, kFold, kSat };

struct Lanes {
    __m256i bias, mult, mult_odd;      // s32; mult_odd: odd lanes' multipliers, even slots
    __m256i half_hi, shift_hi;         // fold: 2^(s-33) and s-32, s32
    __m256i add_hi;                    // kSat: 2^(s-33) + zp * 2^(s-32), s32
    __m256i half_e, half_o, sh_e, sh_o;  // s64 form: 2^(s-1) and s of the even / odd lanes
    bool sat;                          // every lane's add_hi is within 2^30
};

Lanes lanes_of(const int32_t* bias, const int32_t* mult, const int32_t* shift, int nc,
               const int* order, int32_t zp) {
    alignas(32) int32_t b[8], m[8], hh[8], sh[8], ah[8];
    alignas(32) int64_t he[4], ho[4], se[4], so[4];
    bool sat = true;
    for (int j = 0; j < 8; ++j) {
        const int c = order[j];
        const bool real = c < nc;
        const int32_t s = real ? shift[c] : 33;
        b[j] = real ? bias[c] : 0;
        m[j] = real ? mult[c] : 0;
        hh[j] = s >= 33 ? 1 << (s - 33) : 0;
        sh[j] = s - 32;
        ah[j] = 0;
        sat = sat_add(s, zp, &ah[j]) && sat;
        (j % 2 ? ho : he)[j / 2] = int64_t{1} << (s - 1);
        (j % 2 ? so : se)[j / 2] = s;
    }
    const auto ld = [](const void* p) {
        return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
    };
    const __m256i mv = ld(m);
    return {ld(b), mv, _mm256_srli_epi64(mv, 32), ld(hh), ld(sh), ld(ah), ld(he), ld(ho),
            ld(se), ld(so), sat};
}

// floor(x / 2^s) of s64 lanes by per-lane counts.
inline __m256i sra64v(__m256i x, __m256i s) {
    const __m256i sign = _mm256_cmpgt_epi64(_mm256_setzero_si256(), x);
    return _mm256_xor_si256(_mm256_srlv_epi64(_mm256_xor_si256(x, sign), s), sign);
}

// The output range's bounds less the zero point, as s32 (fold) and s64 lanes.
struct Bounds {
    __m256i lo32, hi32, lo64, hi64, zp;
};

// 8 accumulators, one channel a lane -> 8 s32 lanes whose saturating packs are the output
// bytes (kSat: before the clamp the packs do; else the output bytes' values).
template <int M>
inline __m256i requant_lanes(__m256i acc, const Lanes& l, const Bounds& b) {
    const __m256i t = _mm256_add_epi32(acc, l.bias);
    const __m256i pe = _mm256_mul_epi32(t, l.mult);
    const __m256i po = _mm256_mul_epi32(_mm256_srli_epi64(t, 32), l.mult_odd);
    if (M == kSat) {
        const __m256i high = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
        return _mm256_srav_epi32(_mm256_add_epi32(high, l.add_hi), l.shift_hi);
    }
    if (M == kFold) {
        __m256i high = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
        high = _mm256_srav_epi32(_mm256_add_epi32(high, l.half_hi), l.shift_hi);
        return _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(high, b.lo32), b.hi32), b.zp);
    }
    const __m256i ye = clamp64(sra64v(_mm256_add_epi64(pe, l.half_e), l.sh_e), b.lo64, b.hi64);
    const __m256i yo = clamp64(sra64v(_mm256_add_epi64(po, l.half_o), l.sh_o), b.lo64, b.hi64);
    return _mm256_add_epi32(_mm256_blend_epi32(ye, _mm256_slli_epi64(yo, 32), 0xAA), b.zp);
}

// The block's weights as pairs of taps (2i, 2i + 1; an odd count pairs the last tap with
// itself at weight 0), int16 pairs per lane in the accumulators' order, and the offsets of
// the taps in the position-major plane.
struct Window {
    __m256i lo[kMaxPairs], hi[kMaxPairs];
    int64_t a[kMaxPairs], b[kMaxPairs];
    int64_t n;
};

void window_of(const int8_t* w, int64_t taps, int nc, const int64_t* off, Window& win) {
    win.n = (taps + 1) / 2;
    for (int64_t i = 0; i < win.n; ++i) {
        const int64_t t0 = 2 * i, t1 = 2 * i + 1 < taps ? 2 * i + 1 : 2 * i;
        win.a[i] = off[t0];
        win.b[i] = off[t1];
        alignas(32) int32_t lo[8], hi[8];
        for (int j = 0; j < 8; ++j) {
            const auto pair = [&](int c) {
                if (c >= nc) return 0;
                const int16_t w0 = w[c * taps + t0], w1 = t1 != t0 ? w[c * taps + t1] : 0;
                return static_cast<int32_t>(static_cast<uint16_t>(w0) |
                                            static_cast<uint32_t>(static_cast<uint16_t>(w1))
                                                << 16);
            };
            lo[j] = pair(kLo[j]);
            hi[j] = pair(kHi[j]);
        }
        win.lo[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
        win.hi[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
    }
}

// Output positions of one block: xt position-major padded input, ot (p, 16) bytes.
template <int NP, int M>
void positions(const uint8_t* xt, const ConvGeom& g, int64_t wp, const Window& win,
               const Lanes& llo, const Lanes& lhi, const Bounds& bd, bool out_signed,
               uint8_t* ot) {
    const int64_t n = NP ? NP : win.n;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
        const uint8_t* row = xt + oy * g.sh * wp * 16;
        for (int64_t ox = 0; ox < g.ow; ++ox) {
            const uint8_t* base = row + ox * g.sw * 16;
            __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
#pragma GCC unroll 13
            for (int64_t i = 0; i < n; ++i) {
                const __m256i xa = _mm256_cvtepu8_epi16(
                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + win.a[i])));
                const __m256i xb = _mm256_cvtepu8_epi16(
                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + win.b[i])));
                lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(xa, xb),
                                                            win.lo[i]));
                hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(xa, xb),
                                                            win.hi[i]));
            }
            // per 128-bit lane: channels 0-3 then 4-7 (8-11, 12-15): 0-15 in order
            const __m256i w16 = _mm256_packs_epi32(requant_lanes<M>(lo, llo, bd),
                                                   requant_lanes<M>(hi, lhi, bd));
            const __m256i b8 = out_signed ? _mm256_packs_epi16(w16, w16)
                                          : _mm256_packus_epi16(w16, w16);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(ot + (oy * g.ow + ox) * 16),
                             _mm256_castsi256_si128(_mm256_permute4x64_epi64(b8, 0x08)));
        }
    }
}

// The kernel's state for one block of channels (lanes_conv's Block).
struct Avx2Block {
    const ConvGeom* g;
    const int8_t* w;
    const int32_t* bias;
    const Requant* r;
    const int64_t* off;  // the taps' offsets in the position-major plane
    int32_t z;
    bool full;
    Bounds bd;
    Lanes llo, lhi;
    Window win;
    int mode;

    void make(int64_t c0, int nc) {
        const int64_t taps = g->kh * g->kw;
        alignas(32) int32_t b[16];
        for (int c = 0; c < nc; ++c) {  // the zero point's term folded into the bias
            int32_t sum = 0;
            for (int64_t t = 0; t < taps; ++t) sum += w[(c0 + c) * taps + t];
            b[c] = static_cast<int32_t>(static_cast<uint32_t>(bias[c0 + c]) -
                                        static_cast<uint32_t>(z) * static_cast<uint32_t>(sum));
        }
        const int32_t* m = r->multiplier + c0;
        const int32_t* s = r->shift + c0;
        llo = lanes_of(b, m, s, nc, kLo, r->zero_point);
        lhi = lanes_of(b, m, s, nc, kHi, r->zero_point);
        bool fold = true;
        for (int c = 0; c < nc; ++c) fold = fold && s[c] >= 33;
        mode = fold && full && llo.sat && lhi.sat ? kSat : fold ? kFold : kS64;
        window_of(w + c0 * taps, taps, nc, off, win);
    }

    void run(const uint8_t* xt, int64_t wp, uint8_t* ot) const {
        const bool sg = r->out_signed;
        const bool nine = g->kh * g->kw == 9;
        if (mode == kSat && nine) {
            positions<5, kSat>(xt, *g, wp, win, llo, lhi, bd, sg, ot);
        } else if (mode == kSat) {
            positions<0, kSat>(xt, *g, wp, win, llo, lhi, bd, sg, ot);
        } else if (mode == kFold && nine) {
            positions<5, kFold>(xt, *g, wp, win, llo, lhi, bd, sg, ot);
        } else if (mode == kFold) {
            positions<0, kFold>(xt, *g, wp, win, llo, lhi, bd, sg, ot);
        } else {
            positions<0, kS64>(xt, *g, wp, win, llo, lhi, bd, sg, ot);
        }
    }
};

}  // namespace

bool depthwise_lanes_avx2_takes(const ConvGeom& g) {
    return g.oc == g.c && g.kh * g.kw <= 2 * kMaxPairs;
}

void depthwise_lanes_avx2(const QIn& x, const ConvGeom& g, const int8_t* w,
                          const int32_t* bias, const Requant& r, const int64_t* at,
                          uint8_t* out) {
    const int64_t wp = g.w + g.pl + g.pr;
    int64_t off[2 * kMaxPairs];
    for (int64_t t = 0; t < g.kh * g.kw; ++t) {
        off[t] = (t / g.kw * g.dh * wp + t % g.kw * g.dw) * 16;
    }
    const int32_t lo = r.lo - r.zero_point, hi = r.hi - r.zero_point;
    Avx2Block proto{};
    proto.g = &g;
    proto.w = w;
    proto.bias = bias;
    proto.r = &r;
    proto.off = off;
    proto.z = zero_of(x);
    proto.full = full_range(r);
    proto.bd = {_mm256_set1_epi32(lo), _mm256_set1_epi32(hi), _mm256_set1_epi64x(lo),
                _mm256_set1_epi64x(hi), _mm256_set1_epi32(r.zero_point)};
    lanes_conv(x, g, at, proto, out);
}

}  // namespace int8
}  // namespace tianyuan
