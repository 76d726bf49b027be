// AVX2 depthwise int8 convolution with channels in the lanes, for small maps: per image and
// block of 16 channels, the 16 input planes are transposed into one position-major plane
// (16 bytes, the block's channels, per position) padded with the zero point, each output
// position's 16 channels are computed at once (two taps' inputs as int16, interleaved, one
// vpmaddwd against the taps' weight pairs, per channel, as the plane kernel does along a
// row), requantized with per-lane constants, exactly reference.requantize, and the
// position-major outputs are transposed back into the NCHW rows. The plane kernel
// (int8_depthwise_avx2.cpp) pads every (image, channel) plane and spends a 16-lane step on
// each output row of up to 16 columns: on 7x7 and 14x14 maps that set-up and those idle
// lanes were most of its time. Channel multiplier 1 only.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm.h"
#include "int8_ops.h"
#include "int8_requant_avx2.h"

namespace tianyuan {
namespace int8 {
namespace {

// No STL in an ISA translation unit (setup.py): an instance compiled with AVX2 flags could be
// the one the linker keeps for generic code.
constexpr int kMaxPairs = 13;  // windows up to 26 taps (5x5)

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

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

// Two 16 x 16 byte transposes, one per 128-bit lane: afterwards v[k] holds byte k of every
// former v[i], in order of i.
inline void transpose16x2(__m256i v[16]) {
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
inline void store_upto32(uint8_t* out, __m256i v, int64_t n) {
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

// 16 planes of hw bytes (x + rows[i], flipped by fv) into the position-major plane xt: input
// position q at byte at[q], its 16 channels in order. Reads stop at x's byte `size`.
void to_lanes(const uint8_t* x, const int64_t* rows, int64_t size, int64_t hw,
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
        const int64_t m = min64(32, hw - q);
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
void from_lanes(const uint8_t* ot, int64_t p, int nc, uint8_t* out) {
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

}  // namespace

bool depthwise_lanes_avx2_takes(const ConvGeom& g) {
    return g.oc == g.c && g.kh * g.kw <= 2 * kMaxPairs;
}

void depthwise_lanes_avx2(const QIn& x, const ConvGeom& g, const int8_t* w,
                          const int32_t* bias, const Requant& r, const int64_t* at,
                          uint8_t* out) {
    const int64_t hw = g.h * g.w, p = g.oh * g.ow, taps = g.kh * g.kw;
    const int64_t wp = g.w + g.pl + g.pr, hp = g.h + g.pt + g.pb;
    const int64_t blocks = (g.c + 15) / 16;
    const uint8_t flip = flip_of(x);
    const int32_t z = zero_of(x);
    int64_t off[2 * kMaxPairs];
    for (int64_t t = 0; t < taps; ++t) off[t] = (t / g.kw * g.dh * wp + t % g.kw * g.dw) * 16;
    const int64_t xt_bytes = (hp * wp * 16 + 63) / 64 * 64, ot_bytes = (p + 32) * 16;
    const int64_t size = g.n * g.c * hw;
    const __m256i fv = _mm256_set1_epi8(static_cast<char>(flip));
    const int32_t lo = r.lo - r.zero_point, hi = r.hi - r.zero_point;
    const Bounds bd{_mm256_set1_epi32(lo), _mm256_set1_epi32(hi), _mm256_set1_epi64x(lo),
                    _mm256_set1_epi64x(hi), _mm256_set1_epi32(r.zero_point)};
    const bool full = full_range(r);
#pragma omp parallel if (g.n * g.c * p * taps > (1 << 15))
    {
        uint8_t* xt = thread_space(Space::depthwise, xt_bytes + ot_bytes);
        uint8_t* ot = xt + xt_bytes;
        std::memset(xt, z, static_cast<size_t>(hp * wp * 16));  // the border, kept by all
        // A block's constants, made once for the images of it that a thread runs in a row
        // (tasks go image-minor): made per task, they had been most of a 7x7 map's set-up
        // (MobileNetV2's 960 channels at batch 16).
        Lanes llo, lhi;
        Window win;
        int mode = kS64;
        int64_t made = -1;  // the block they are for
#pragma omp for schedule(static)
        for (int64_t task = 0; task < g.n * blocks; ++task) {
            const int64_t n = task % g.n, c0 = task / g.n * 16;
            const int nc = static_cast<int>(min64(16, g.c - c0));
            int64_t rows[16];  // a part-filled block repeats its last plane
            for (int i = 0; i < 16; ++i) rows[i] = (n * g.c + c0 + min64(i, nc - 1)) * hw;
            to_lanes(x.data, rows, size, hw, at, fv, xt);
            if (made != c0) {
                alignas(32) int32_t b[16];
                for (int c = 0; c < nc; ++c) {  // the zero point's term folded into the bias
                    int32_t sum = 0;
                    for (int64_t t = 0; t < taps; ++t) sum += w[(c0 + c) * taps + t];
                    b[c] = static_cast<int32_t>(static_cast<uint32_t>(bias[c0 + c]) -
                                                static_cast<uint32_t>(z) *
                                                    static_cast<uint32_t>(sum));
                }
                const int32_t* m = r.multiplier + c0;
                const int32_t* s = r.shift + c0;
                llo = lanes_of(b, m, s, nc, kLo, r.zero_point);
                lhi = lanes_of(b, m, s, nc, kHi, r.zero_point);
                bool fold = true;
                for (int c = 0; c < nc; ++c) fold = fold && s[c] >= 33;
                mode = fold && full && llo.sat && lhi.sat ? kSat : fold ? kFold : kS64;
                window_of(w + c0 * taps, taps, nc, off, win);
                made = c0;
            }
            if (mode == kSat && taps == 9) {
                positions<5, kSat>(xt, g, wp, win, llo, lhi, bd, r.out_signed, ot);
            } else if (mode == kSat) {
                positions<0, kSat>(xt, g, wp, win, llo, lhi, bd, r.out_signed, ot);
            } else if (mode == kFold && taps == 9) {
                positions<5, kFold>(xt, g, wp, win, llo, lhi, bd, r.out_signed, ot);
            } else if (mode == kFold) {
                positions<0, kFold>(xt, g, wp, win, llo, lhi, bd, r.out_signed, ot);
            } else {
                positions<0, kS64>(xt, g, wp, win, llo, lhi, bd, r.out_signed, ot);
            }
            from_lanes(ot, p, nc, out + (n * g.c + c0) * p);
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
