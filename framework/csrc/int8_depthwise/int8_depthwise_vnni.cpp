// AVX512-VNNI depthwise int8 convolution (column dilation 1, column stride 1 or 2, kernels
// up to 8x8). vpdpbusd multiplies 4 adjacent bytes of one kernel row by 4 taps and sums them
// into each s32 lane, so no input is widened: an unaligned 64-byte load at row + s holds in
// lane t the bytes row[s + 4t .. s + 4t + 3]. At column stride 1 these are the window row of
// output 4t + s, so the loads at s = 0..3 give 4 accumulators covering 64 outputs; at stride
// 2 the loads at s = 0, 2 cover outputs 2t and 2t + 1 (32 outputs). Kernels wider than 4 add
// a second tap word per row (taps 4..7, loads at + 4). After the channel's requantization
// the phases are interleaved back into consecutive bytes with masked byte moves.
// Stride 1 with the output as wide as the input reads each plane in place (`direct`, the
// zero point brought in at the borders by masked loads); other shapes run on a copy of the
// plane padded with the zero point (the AVX-512 kernel's layout).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"
#include "int8_gemm/int8_requant_avx512.h"

namespace tianyuan {
namespace int8 {
namespace {

constexpr int kMaxTap = 8;  // kernel rows and columns this kernel takes

// Per kernel row i and tap word d (taps 4d .. 4d + 3 of the row, zeros past kw) one
// broadcast s32: the s8 operand of vpdpbusd.
struct TapWords {
    __m512i v[2 * kMaxTap];
};

inline TapWords broadcast(const int32_t* words, int64_t n) {
    TapWords t;
    for (int64_t i = 0; i < n; ++i) t.v[i] = _mm512_set1_epi32(words[i]);
    return t;
}

inline __m512i load(const uint8_t* p) { return _mm512_loadu_si512(p); }

// The window sums of one step: S = 1: a[s] lane t = output 4t + s of the 64 outputs at
// p; S = 2: a[0], a[1] lane t = outputs 2t, 2t + 1 of the 32 at p (input offsets 2 apart).
// KH = 0: kh from the caller. dy = row step of the kernel (dh * wp).
template <int KH, int ND, int S>
inline void window(const uint8_t* p, int64_t dy, int64_t kh, const TapWords& t, __m512i* a) {
    const int64_t rows = KH ? KH : kh;
#pragma GCC unroll 8
    for (int64_t i = 0; i < rows; ++i) {
        const uint8_t* row = p + i * dy;
#pragma GCC unroll 2
        for (int d = 0; d < ND; ++d) {
            const __m512i wv = t.v[i * ND + d];
            const uint8_t* q = row + 4 * d;
            a[0] = _mm512_dpbusd_epi32(a[0], load(q), wv);
            a[1] = _mm512_dpbusd_epi32(a[1], load(q + S), wv);
            if (S == 1) {
                a[2] = _mm512_dpbusd_epi32(a[2], load(q + 2), wv);
                a[3] = _mm512_dpbusd_epi32(a[3], load(q + 3), wv);
            }
        }
    }
}

// Requantize the step's accumulators: the 64 / S outputs in order in the low bytes of y.
template <int S>
inline __m512i requant_step(const __m512i* a, const ChannelQ& c) {
    __m512i y = requant16(a[0], c);
    y = _mm512_mask_mov_epi8(y, 0x2222222222222222ull, _mm512_slli_epi32(requant16(a[1], c), 8));
    if (S == 2) {
        // each s32 lane now holds outputs 2t, 2t + 1 in its low 16 bits
        return _mm512_castsi256_si512(_mm512_cvtepi32_epi16(y));
    }
    y = _mm512_mask_mov_epi8(y, 0x4444444444444444ull, _mm512_slli_epi32(requant16(a[2], c), 16));
    return _mm512_mask_mov_epi8(y, 0x8888888888888888ull,
                                _mm512_slli_epi32(requant16(a[3], c), 24));
}

template <int KH, int ND, int S>
inline __m512i step(const uint8_t* p, int64_t dy, int64_t kh, const TapWords& t,
                    const ChannelQ& c) {
    const __m512i z = _mm512_setzero_si512();
    __m512i a[4] = {z, z, z, z};
    window<KH, ND, S>(p, dy, kh, t, a);
    return requant_step<S>(a, c);
}

// Output row by row, 64 / S outputs a step, straight into out. Here and in flat, each store
// asks for the line `ahead` bytes on for writing (RowParams.ahead's rule, store_ahead).
template <int KH, int ND, int S>
void rows(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t,
          const ChannelQ& c, uint8_t* out, int64_t ahead) {
    constexpr int64_t L = 64 / S;
    const int64_t dy = g.dh * wp;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
        const uint8_t* top = xp + oy * g.sh * wp;
        for (int64_t x0 = 0; x0 < g.ow; x0 += L) {
            const int64_t n = g.ow - x0 < L ? g.ow - x0 : L;
            if (ahead) __builtin_prefetch(out + oy * g.ow + x0 + ahead, 1, 3);
            _mm512_mask_storeu_epi8(out + oy * g.ow + x0, low_mask64(n),
                                    step<KH, ND, S>(top + S * x0, dy, g.kh, t, c));
        }
    }
}

// Row stride = column stride S: the plane as one flat run, output f = oy * wp + ox at input
// S * f, so steps run across row ends (small planes fill the lanes). Each step's lanes of
// columns ox < ow go to their rows of out by masked stores (lanes [a, b) of the step are
// row oy's columns col .. col + b - a: stored through base out + oy * ow + col - a).
template <int KH, int ND, int S>
void flat(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t,
          const ChannelQ& c, uint8_t* out, int64_t ahead) {
    constexpr int64_t L = 64 / S;
    const int64_t ow = g.ow, oh = g.oh, dy = g.dh * wp;
    int64_t oy = 0, col = 0;  // where the step's first lane falls
    for (int64_t f = 0; oy < oh; f += L) {
        const __m512i y = step<KH, ND, S>(xp + S * f, dy, g.kh, t, c);
        if (ahead) __builtin_prefetch(out + oy * ow + col + ahead, 1, 3);
        int64_t lane = 0;
        while (lane < L && oy < oh) {
            const int64_t run = wp - col;  // lanes left in this row (padding columns too)
            if (col < ow) {
                const int64_t b = lane + (ow - col < L - lane ? ow - col : L - lane);
                const __mmask64 k = low_mask64(b) & ~low_mask64(lane);
                const auto base = reinterpret_cast<uintptr_t>(out + oy * ow + col) - lane;
                _mm512_mask_storeu_epi8(reinterpret_cast<void*>(base), k, y);
            }
            if (run > L - lane) {
                col += L - lane;
                break;
            }
            lane += run;
            col = 0;
            ++oy;
        }
    }
}

template <int KH, int ND, int S>
void plane(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t,
           const ChannelQ& c, uint8_t* out, int64_t ahead) {
    constexpr int64_t L = 64 / S;
    const int64_t flat_steps = ((g.oh - 1) * wp + g.ow + L - 1) / L;
    const int64_t row_steps = g.oh * ((g.ow + L - 1) / L);
    if (g.sh == S && flat_steps <= row_steps)
        return flat<KH, ND, S>(xp, wp, g, t, c, out, ahead);
    rows<KH, ND, S>(xp, wp, g, t, c, out, ahead);
}

template <int S>
void plane_any(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t,
               const ChannelQ& c, uint8_t* out, int64_t ahead) {
    if (g.kh == 3 && g.kw == 3) return plane<3, 1, S>(xp, wp, g, t, c, out, ahead);
    if (g.kh == 5 && g.kw == 5) return plane<5, 2, S>(xp, wp, g, t, c, out, ahead);
    if (g.kw <= 4) return plane<0, 1, S>(xp, wp, g, t, c, out, ahead);
    plane<0, 2, S>(xp, wp, g, t, c, out, ahead);
}

// Unpadded, stride 1, ow == w: output f = oy * w + ox reads input f shifted by each tap's
// row and column offset, so steps of 64 outputs read the plane in place; bytes outside it
// (and taps past kw) load as the zero point through masked loads (`masks`, built by
// int8_depthwise.cpp), and a step's 64 outputs are one store. Flip: s8 input.
template <int KH, int ND, bool Flip>
void direct(const uint8_t* x, const ConvGeom& g, const uint64_t* masks, const TapWords& t,
            const ChannelQ& c, __m512i zv, uint8_t* out) {
    const int64_t total = g.oh * g.ow, kh = KH ? KH : g.kh;
    const __m512i fv = _mm512_set1_epi8(static_cast<char>(0x80));
    const auto base = reinterpret_cast<uintptr_t>(x);
    for (int64_t f = 0; f < total; f += 64) {
        const __m512i z = _mm512_setzero_si512();
        __m512i a[4] = {z, z, z, z};
#pragma GCC unroll 8
        for (int64_t i = 0; i < kh; ++i) {
            // row may start before the plane: only masked-in bytes are read
            const uintptr_t row = base + f + (i * g.dh - g.pt) * g.w - g.pl;
#pragma GCC unroll 2
            for (int d = 0; d < ND; ++d) {
                const __m512i wv = t.v[i * ND + d];
#pragma GCC unroll 4
                for (int s = 0; s < 4; ++s) {
                    const void* q = reinterpret_cast<const void*>(row + 4 * d + s);
                    __m512i v = _mm512_mask_loadu_epi8(zv, masks[(i * 4 + s) * ND + d], q);
                    if (Flip) v = _mm512_xor_si512(v, fv);
                    a[s] = _mm512_dpbusd_epi32(a[s], v, wv);
                }
            }
        }
        masks += kh * 4 * ND;
        _mm512_mask_storeu_epi8(out + f, low_mask64(total - f), requant_step<1>(a, c));
    }
}

template <bool Flip>
void direct_any(const uint8_t* x, const ConvGeom& g, const uint64_t* masks, const TapWords& t,
                const ChannelQ& c, __m512i zv, uint8_t* out) {
    if (g.kh == 3 && g.kw == 3) return direct<3, 1, Flip>(x, g, masks, t, c, zv, out);
    if (g.kh == 5 && g.kw == 5) return direct<5, 2, Flip>(x, g, masks, t, c, zv, out);
    if (g.kw <= 4) return direct<0, 1, Flip>(x, g, masks, t, c, zv, out);
    direct<0, 2, Flip>(x, g, masks, t, c, zv, out);
}

// One input plane (h, w) into xp (hp, wp): the zero point around it, the sign bit flipped
// for s8 input. Rows are filled with z and then overwritten by masked copies. next: the plane
// the thread copies next (or null), asked for a row at a time (depthwise_conv2d_vnni).
void pad_plane(const uint8_t* src, const ConvGeom& g, int64_t wp, int64_t hp, uint8_t flip,
               uint8_t z, uint8_t* xp, const uint8_t* next) {
    const __m512i zv = _mm512_set1_epi8(static_cast<char>(z));
    const __m512i fv = _mm512_set1_epi8(static_cast<char>(flip));
    const int64_t size = hp * wp;
    for (int64_t i = 0; i < size; i += 64) {
        _mm512_mask_storeu_epi8(xp + i, low_mask64(size - i), zv);
    }
    for (int64_t y = 0; y < g.h; ++y) {
        uint8_t* row = xp + (g.pt + y) * wp + g.pl;
        const uint8_t* in = src + y * g.w;
        for (int64_t x = 0; next && x < g.w; x += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(next + y * g.w + x), _MM_HINT_T0);
        }
        for (int64_t x = 0; x < g.w; x += 64) {
            const __mmask64 k = low_mask64(g.w - x);
            const __m512i v = _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, in + x), fv);
            _mm512_mask_storeu_epi8(row + x, k, v);
        }
    }
}

}  // namespace

bool depthwise_vnni_takes(const ConvGeom& g) {
    return g.dw == 1 && (g.sw == 1 || g.sw == 2) && g.kh <= kMaxTap && g.kw <= kMaxTap;
}

bool depthwise_vnni_unpadded(const ConvGeom& g) {
    return depthwise_vnni_takes(g) && g.sw == 1 && g.sh == 1 && g.ow == g.w;
}

void depthwise_conv2d_vnni(const QIn& x, const ConvGeom& g, const int32_t* words,
                           const int32_t* sums, const int32_t* bias, const Requant& r,
                           const uint64_t* masks, uint8_t* out) {
    const int64_t p = g.oh * g.ow, mult = g.oc / g.c, taps = g.kh * g.kw;
    const int64_t wp = g.w + g.pl + g.pr, hp = g.h + g.pt + g.pb;
    const uint8_t flip = flip_of(x);
    const int32_t z = zero_of(x);
    const __m512i zv = _mm512_set1_epi8(static_cast<char>(z ^ flip));
    const int nd = depthwise_words_per_row(g.kw);
    // the padded planes' stores ask for the line `ahead` bytes on (the next planes' where
    // planes are small), as the convolution tiles' stores do (bench/RESULTS.md, int8 kernels:
    // depthwise)
    const int64_t ahead = store_ahead(g.n * g.oc * p);
#pragma omp parallel if (g.n * g.oc * p * taps > (1 << 15))
    {
        uint8_t* xp = masks ? nullptr : new uint8_t[static_cast<size_t>(hp * wp + kPadSlack)]();
#pragma omp for schedule(static)
        for (int64_t t = 0; t < g.n * g.oc; ++t) {
            const int64_t oc = t % g.oc;
            const uint8_t* plane = x.data + (t / g.oc * g.c + oc / mult) * g.h * g.w;
            const TapWords tw = broadcast(words + oc * g.kh * nd, g.kh * nd);
            // the bias corrected for the input zero point, bias - z * sum(w) mod 2^32, here
            // per channel: a serial pass over the channels had come before the threads
            const int32_t cbias = static_cast<int32_t>(
                static_cast<uint32_t>(bias[oc]) -
                static_cast<uint32_t>(z) * static_cast<uint32_t>(sums[oc]));
            const ChannelQ c = channel_q(cbias, r.multiplier[oc], r.shift[oc], r);
            // the thread's next plane, asked for while this one runs: a plane that is not in the
            // cache had waited on its reads (on 112x112 and 56x56 planes at batch 16 the inputs
            // pass L2): padded copies ask a row at a time, unpadded planes the whole plane
            // first (bench/RESULTS.md, int8 kernels: depthwise).
            const int64_t u = t + 1;
            const uint8_t* next =
                u < g.n * g.oc ? x.data + (u / g.oc * g.c + u % g.oc / mult) * g.h * g.w : nullptr;
            for (int64_t i = 0; masks && next && i < g.h * g.w; i += 64) {
                _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T0);
            }
            if (masks && flip) {
                direct_any<true>(plane, g, masks, tw, c, zv, out + t * p);
            } else if (masks) {
                direct_any<false>(plane, g, masks, tw, c, zv, out + t * p);
            } else {
                pad_plane(plane, g, wp, hp, flip, static_cast<uint8_t>(z), xp, next);
                if (g.sw == 1) {
                    plane_any<1>(xp, wp, g, tw, c, out + t * p, ahead);
                } else {
                    plane_any<2>(xp, wp, g, tw, c, out + t * p, ahead);
                }
            }
        }
        delete[] xp;
    }
}

}  // namespace int8
}  // namespace tianyuan
