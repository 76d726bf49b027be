// AVX2 int8 add (+relu), concat rescaling, float -> int8 quantization and max pooling
// (column strides 1, 2),
// exactly the generic loops of int8_eltwise.cpp (the reference formulas), for CPUs without
// AVX-512. The add and the concat's rescale run in the 16-bit form of int8_ops.h (Split16)
// where their shifts and multipliers allow; else in 64-bit products and shift, which share
// the conv store's requantization tail (int8_requant_avx2.h).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"
#include "int8_gemm/int8_requant_avx2.h"

namespace tianyuan {
namespace int8 {
namespace {

constexpr int64_t kChunk = 1 << 14;  // elements per task (a multiple of 32)

template <bool S>
inline __m256i widen8(const uint8_t* p) {  // 8 bytes as s32 lanes
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return S ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
}

template <bool S>
inline int32_t value(const uint8_t* p, int64_t i) {
    return S ? static_cast<int32_t>(static_cast<int8_t>(p[i])) : static_cast<int32_t>(p[i]);
}

// out[i] for i in [i0, i1): 16 a step, the rest with the scalar formula.
template <bool S>
void add_range(const QIn& a, const QIn& b, int64_t i0, int64_t i1, const AddParams& p,
               uint8_t* out) {
    Requant r{nullptr, nullptr, nullptr, 0, p.zero_point, p.lo, p.hi, false};
    const Chan c = chan(0, 0, p.shift, r);
    const __m256i za = _mm256_set1_epi32(a.zero_point), zb = _mm256_set1_epi32(b.zero_point);
    const __m256i ma = _mm256_set1_epi32(p.m_a), mb = _mm256_set1_epi32(p.m_b);
    // every value lies in [lo, hi]: signed packs where one can be negative (s8 output), else
    // unsigned ones (u8 output, or s8 with the relu's lo >= 0: the same bytes)
    const bool out_signed = p.lo < 0;
    const auto eight = [&](int64_t i) {
        const __m256i da = _mm256_sub_epi32(widen8<S>(a.data + i), za);
        const __m256i db = _mm256_sub_epi32(widen8<S>(b.data + i), zb);
        const __m256i pe = _mm256_add_epi64(
            _mm256_add_epi64(_mm256_mul_epi32(da, ma), _mm256_mul_epi32(db, mb)), c.half);
        const __m256i po = _mm256_add_epi64(
            _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(da, 32), ma),
                             _mm256_mul_epi32(_mm256_srli_epi64(db, 32), mb)),
            c.half);
        return shift_clamp8(pe, po, c);
    };
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         pack16(eight(i), eight(i + 8), out_signed));
    for (; i < i1; ++i) {
        const int64_t s = static_cast<int64_t>(value<S>(a.data, i) - a.zero_point) * p.m_a +
                          static_cast<int64_t>(value<S>(b.data, i) - b.zero_point) * p.m_b;
        int64_t y = (s + (int64_t{1} << (p.shift - 1))) >> p.shift;
        y = y < p.lo - p.zero_point ? p.lo - p.zero_point
                                    : (y > p.hi - p.zero_point ? p.hi - p.zero_point : y);
        out[i] = static_cast<uint8_t>(static_cast<int32_t>(y) + p.zero_point);
    }
}

inline __m256i pair16(int32_t a, int32_t b) {  // int16 lanes a, b, a, b, ...
    return _mm256_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(a) & 0xFFFFu) |
                                                  (static_cast<uint32_t>(b) << 16)));
}

// The 16-bit form's constants (int8_ops.h, Split16) for multipliers (ma, mb): mb = 0 for a
// concat part, whose d lanes are s32 (d in the low int16, its sign in the high one).
struct Form16 {
    __m256i mh, ml, half, zp;
    __m128i shift;
};

inline Form16 form16(const Split16& ma, const Split16& mb, int32_t shift, int32_t zp) {
    return {pair16(ma.hi, mb.hi), pair16(ma.lo, mb.lo),
            _mm256_set1_epi32(int32_t{1} << (shift - kSplit16MinShift)),
            _mm256_set1_epi32(zp), _mm_cvtsi32_si128(shift - 16)};
}

// 8 lanes of (da, db) int16 pairs -> the 8 requantized values plus the zero point, unclamped
// (|y| < 2^23: the saturating packs clamp them to the output type's range exactly).
inline __m256i form16_eight(__m256i d, const Form16& f) {
    const __m256i l = _mm256_srai_epi32(_mm256_madd_epi16(d, f.ml), 16);
    const __m256i h = _mm256_add_epi32(_mm256_madd_epi16(d, f.mh), f.half);
    return _mm256_add_epi32(_mm256_sra_epi32(_mm256_add_epi32(h, l), f.shift), f.zp);
}

// 16 bytes clamped to [lo, hi] (bytes of the pack's signedness).
inline __m128i clamp16(__m128i v, __m128i lo, __m128i hi, bool out_signed) {
    return out_signed ? _mm_min_epi8(_mm_max_epi8(v, lo), hi)
                      : _mm_min_epu8(_mm_max_epu8(v, lo), hi);
}

// add_range in the 16-bit form: 16 (a, b) byte pairs a step, interleaved, widened to int16
// and centred, two vpmaddwd per 8.
template <bool S>
void add_range16(const QIn& a, const QIn& b, int64_t i0, int64_t i1, const AddParams& p,
                 const Split16& ma, const Split16& mb, uint8_t* out) {
    const Form16 f = form16(ma, mb, p.shift, p.zero_point);
    const __m256i z = pair16(a.zero_point, b.zero_point);
    const bool out_signed = p.lo < 0;  // as add_range's packs
    const __m128i lo = _mm_set1_epi8(static_cast<char>(p.lo));
    const __m128i hi = _mm_set1_epi8(static_cast<char>(p.hi));
    const auto eight = [&](__m128i ab) {
        return form16_eight(
            _mm256_sub_epi16(S ? _mm256_cvtepi8_epi16(ab) : _mm256_cvtepu8_epi16(ab), z), f);
    };
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.data + i));
        const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.data + i));
        const __m128i v = pack16(eight(_mm_unpacklo_epi8(va, vb)),
                                 eight(_mm_unpackhi_epi8(va, vb)), out_signed);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), clamp16(v, lo, hi, out_signed));
    }
    if (i < i1) add_range<S>(a, b, i, i1, p, out);
}

// One concat row in the 16-bit form, 16 a step.
template <bool S>
void rescale_row16(const uint8_t* row, int64_t inner, int32_t z, int32_t mult, const Split16& m,
                   int32_t shift, const Requant& r, uint8_t* out) {
    const Form16 f = form16(m, Split16{0, 0}, shift, r.zero_point);
    const __m256i zv = _mm256_set1_epi32(z);
    const auto eight = [&](int64_t i) {
        return form16_eight(_mm256_sub_epi32(widen8<S>(row + i), zv), f);
    };
    int64_t i = 0;
    for (; i + 16 <= inner; i += 16)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         pack16(eight(i), eight(i + 8), r.out_signed));
    for (; i < inner; ++i) out[i] = requant_one(value<S>(row, i) - z, 0, mult, shift, r);
}

// One concat row: out[i] = clamp(round_shift((x[i] - z) * m, shift) + out_zp), 16 a step.
template <bool S>
void rescale_row(const uint8_t* row, int64_t inner, int32_t z, int32_t mult, int32_t shift,
                 const Chan& c, const Requant& r, uint8_t* out) {
    const __m256i zv = _mm256_set1_epi32(z), m = _mm256_set1_epi32(mult);
    const auto eight = [&](int64_t i) {
        const __m256i d = _mm256_sub_epi32(widen8<S>(row + i), zv);
        const __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(d, m), c.half);
        const __m256i po =
            _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(d, 32), m), c.half);
        return shift_clamp8(pe, po, c);
    };
    int64_t i = 0;
    for (; i + 16 <= inner; i += 16)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         pack16(eight(i), eight(i + 8), r.out_signed));
    for (; i < inner; ++i) out[i] = requant_one(value<S>(row, i) - z, 0, mult, shift, r);
}

// 32 window values at p, p + S, ... (S = 2: the even bytes of 64).
template <int S>
inline __m256i load32(const uint8_t* p) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if (S == 1) return a;
    const __m256i low = _mm256_set1_epi16(0x00FF);
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
    return _mm256_permute4x64_epi64(
        _mm256_packus_epi16(_mm256_and_si256(a, low), _mm256_and_si256(b, low)), 0xD8);
}

// One plane padded with `flip` (the smallest value once flipped): max over the window in
// the flipped (unsigned) order, 32 outputs a step.
template <int S>
void max_plane(const uint8_t* xp, int64_t wp, const PoolGeom& g, uint8_t flip, uint8_t* out) {
    const __m256i f = _mm256_set1_epi8(static_cast<char>(flip));
    for (int64_t oy = 0; oy < g.oh; ++oy) {
        const uint8_t* top = xp + oy * g.sh * wp;
        for (int64_t x0 = 0; x0 < g.ow; x0 += 32) {
            __m256i best = _mm256_setzero_si256();
            for (int64_t i = 0; i < g.kh; ++i)
                for (int64_t j = 0; j < g.kw; ++j)
                    best = _mm256_max_epu8(
                        best, _mm256_xor_si256(load32<S>(top + i * wp + j + S * x0), f));
            best = _mm256_xor_si256(best, f);
            store_first32(best, out + oy * g.ow + x0, g.ow - x0);
        }
    }
}

}  // namespace

void add_avx2(const QIn& a, const QIn& b, int64_t size, const AddParams& p, uint8_t* out) {
    const int64_t chunks = (size + kChunk - 1) / kChunk;
    const int32_t mults[2] = {p.m_a, p.m_b}, zps[2] = {a.zero_point, b.zero_point};
    Split16 m[2]{};
    const bool narrow = split16_takes(p.shift, mults, zps, 2, a.is_signed, m);
#pragma omp parallel for schedule(static) if (size > (1 << 16))
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i0 = c * kChunk, i1 = i0 + kChunk < size ? i0 + kChunk : size;
        if (narrow) {
            if (a.is_signed) {
                add_range16<true>(a, b, i0, i1, p, m[0], m[1], out);
            } else {
                add_range16<false>(a, b, i0, i1, p, m[0], m[1], out);
            }
        } else if (a.is_signed) {
            add_range<true>(a, b, i0, i1, p, out);
        } else {
            add_range<false>(a, b, i0, i1, p, out);
        }
    }
}

void concat_part_avx2(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                      int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner) {
    const Requant r{nullptr, nullptr, nullptr, 0, out_zp, out_signed ? -128 : 0,
                    out_signed ? 127 : 255, out_signed};
    const Chan c = chan(0, 0, shift, r);
    Split16 m16{};
    const bool narrow = split16_takes(shift, &mult, &x.zero_point, 1, x.is_signed, &m16);
    const int32_t z = x.zero_point;
#pragma omp parallel for schedule(static) if (rows.outer * rows.inner > (1 << 14))
    for (int64_t o = 0; o < rows.outer; ++o) {
        const uint8_t* row = rows.row(x.data, o);
        uint8_t* dst = out + o * out_inner;
        if (narrow) {
            if (x.is_signed) {
                rescale_row16<true>(row, rows.inner, z, mult, m16, shift, r, dst);
            } else {
                rescale_row16<false>(row, rows.inner, z, mult, m16, shift, r, dst);
            }
        } else if (x.is_signed) {
            rescale_row<true>(row, rows.inner, z, mult, shift, c, r, dst);
        } else {
            rescale_row<false>(row, rows.inner, z, mult, shift, c, r, dst);
        }
    }
}

void quantize_avx2(const float* x, int64_t size, float scale, int32_t zp, bool out_signed,
                   uint8_t* out) {
    const __m256 s = _mm256_set1_ps(scale);
    const float flo = static_cast<float>((out_signed ? -128 : 0) - zp);
    const float fhi = static_cast<float>((out_signed ? 127 : 255) - zp);
    const __m256 lo = _mm256_set1_ps(flo), hi = _mm256_set1_ps(fhi);
    const __m256i z = _mm256_set1_epi32(zp);
    const int64_t chunks = (size + kChunk - 1) / kChunk;
    const auto eight = [&](const float* p) {
        __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(p), s),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm256_min_ps(_mm256_max_ps(q, lo), hi);  // max(NaN, lo) is lo
        return _mm256_add_epi32(_mm256_cvtps_epi32(q), z);
    };
#pragma omp parallel for schedule(static) if (size > (1 << 16))
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i1 = (c + 1) * kChunk < size ? (c + 1) * kChunk : size;
        int64_t i = c * kChunk;
        for (; i + 16 <= i1; i += 16) {
            _mm_prefetch(reinterpret_cast<const char*>(x + i + kQuantizeAhead), _MM_HINT_T0);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                             pack16(eight(x + i), eight(x + i + 8), out_signed));
        }
        for (; i < i1; ++i) {
            float q = std::nearbyint(x[i] / scale);  // the default rounding: half to even
            q = q >= flo ? q : flo;                  // NaN too
            q = q <= fhi ? q : fhi;
            out[i] = static_cast<uint8_t>(static_cast<int32_t>(q) + zp);
        }
    }
}

void fake_quantize_run_avx2(const FakeQuantRows& f, int64_t r, int64_t i0, int64_t i1,
                            float* y, uint8_t* inside) {
    const int64_t c = r % f.c;
    const float sc = f.scale[c];
    const float flo = static_cast<float>(f.lo - f.zp[c]), fhi = static_cast<float>(f.hi - f.zp[c]);
    const __m256 s = _mm256_set1_ps(sc), lo = _mm256_set1_ps(flo), hi = _mm256_set1_ps(fhi);
    const float* x = f.x + r * f.inner;
    float* yr = y + r * f.inner;
    uint8_t* in = inside + r * f.inner;
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
        const __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        // ordered compares: false for NaN; 0/1 per lane, packed to 8 bytes
        const __m256i ok = _mm256_srli_epi32(_mm256_castps_si256(_mm256_and_ps(
            _mm256_cmp_ps(q, lo, _CMP_GE_OQ), _mm256_cmp_ps(q, hi, _CMP_LE_OQ))), 31);
        const __m128i ok16 = _mm_packs_epi32(_mm256_castsi256_si128(ok),
                                             _mm256_extracti128_si256(ok, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(in + i), _mm_packus_epi16(ok16, ok16));
        const __m256 v = _mm256_min_ps(_mm256_max_ps(q, lo), hi);  // max(NaN, lo) is lo
        // + 0: a rounded -0 as +0, the reference's integer zero
        _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_add_ps(v, _mm256_setzero_ps()), s));
    }
    for (; i < i1; ++i) {
        const float q = std::nearbyint(x[i] / sc);  // the default rounding: half to even
        float v = q >= flo ? q : flo;               // NaN too
        v = v <= fhi ? v : fhi;
        yr[i] = (v + 0.0f) * sc;
        in[i] = q >= flo && q <= fhi;
    }
}

void max_pool2d_avx2(const QIn& x, const PoolGeom& g, uint8_t* out) {
    const uint8_t flip = x.is_signed ? 0x80 : 0;  // signed order == unsigned order of x ^ 0x80
    const int64_t hp = g.h + g.pt + g.pb, wp = g.w + g.pl + g.pr;
#pragma omp parallel for schedule(static) if (g.planes * g.oh * g.ow > (1 << 14))
    for (int64_t pl = 0; pl < g.planes; ++pl) {
        // rows read 64 bytes past the last window: slack
        uint8_t* xp = thread_space(Space::pool, hp * wp + 64);
        std::memset(xp, flip, static_cast<size_t>(hp * wp + 64));
        const uint8_t* in = x.data + pl * g.h * g.w;
        for (int64_t y = 0; y < g.h; ++y)
            std::memcpy(xp + (g.pt + y) * wp + g.pl, in + y * g.w, static_cast<size_t>(g.w));
        if (g.sw == 1) {
            max_plane<1>(xp, wp, g, flip, out + pl * g.oh * g.ow);
        } else {
            max_plane<2>(xp, wp, g, flip, out + pl * g.oh * g.ow);
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
