// AVX-512 int8 add (+relu) and concat requantization, 16 elements a step, lane for lane the
// reference formulas (int8_eltwise.cpp has the scalar loops): the products of the centred
// inputs and the multipliers as s64 (vpmuldq on even and odd lanes), rounded shift and clamp
// in s64, narrowed to bytes; the add and the concat's rescale, where their shifts and
// multipliers allow (all the models' adds), in the exact 16-bit form of int8_ops.h instead
// (add_range16, rescale_row16: 16-bit products, no s64; with unmasked loads and stores but
// for the tail; bench/RESULTS.md, other int8 ops). Max pooling at
// column stride 1 or 2: per output row, per 64 columns, the window's input rows are
// max-reduced in a register into one padded row, then the kernel columns, 64 (stride 1) or
// 32 (stride 2) outputs a step.
// Quantization of float32: IEEE division by the scale, rounding half to even, clamp.
// Average pooling over windows as wide as the plane (global pooling): each window one run of
// bytes, summed 64 at a time by vpsadbw.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {
namespace {

inline __mmask16 lanes(int64_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// 16 input bytes as s32 lanes minus the zero point.
template <bool Signed>
inline __m512i centred(const uint8_t* p, __mmask16 k, __m512i zp) {
    const __m128i v = _mm_maskz_loadu_epi8(k, p);
    const __m512i x = Signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
    return _mm512_sub_epi32(x, zp);
}

// The s64 sums (even lanes, odd lanes) -> rounded shift, clamp to [lo, hi] (already minus
// the output zero point), + zero point, 16 bytes to out.
struct Out {
    __m512i half, lo, hi, zp;
    __m128i shift;
};

inline Out out_params(int32_t shift, int32_t zp, int32_t lo, int32_t hi) {
    return {_mm512_set1_epi64(int64_t{1} << (shift - 1)), _mm512_set1_epi64(lo - zp),
            _mm512_set1_epi64(hi - zp), _mm512_set1_epi32(zp), _mm_cvtsi32_si128(shift)};
}

inline void store(__m512i pe, __m512i po, const Out& o, uint8_t* out, __mmask16 k) {
    __m512i ye = _mm512_sra_epi64(_mm512_add_epi64(pe, o.half), o.shift);
    __m512i yo = _mm512_sra_epi64(_mm512_add_epi64(po, o.half), o.shift);
    ye = _mm512_min_epi64(_mm512_max_epi64(ye, o.lo), o.hi);
    yo = _mm512_min_epi64(_mm512_max_epi64(yo, o.lo), o.hi);
    const __m512i y = _mm512_mask_mov_epi32(ye, 0xAAAA, _mm512_slli_epi64(yo, 32));
    _mm_mask_storeu_epi8(out, k, _mm512_cvtepi32_epi8(_mm512_add_epi32(y, o.zp)));
}

template <bool Signed>
void add_range(const QIn& a, const QIn& b, int64_t i0, int64_t i1, const AddParams& p,
               uint8_t* out) {
    const __m512i za = _mm512_set1_epi32(a.zero_point), zb = _mm512_set1_epi32(b.zero_point);
    const __m512i ma = _mm512_set1_epi32(p.m_a), mb = _mm512_set1_epi32(p.m_b);
    const Out o = out_params(p.shift, p.zero_point, p.lo, p.hi);
    for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 k = lanes(i1 - i);
        const __m512i da = centred<Signed>(a.data + i, k, za);
        const __m512i db = centred<Signed>(b.data + i, k, zb);
        const __m512i pe = _mm512_add_epi64(_mm512_mul_epi32(da, ma), _mm512_mul_epi32(db, mb));
        const __m512i po = _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(da, 32), ma),
                                            _mm512_mul_epi32(_mm512_srli_epi64(db, 32), mb));
        store(pe, po, o, out + i, k);
    }
}

inline __m512i pair16(int32_t a, int32_t b) {  // int16 lanes a, b, a, b, ...
    return _mm512_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(a) & 0xFFFFu) |
                                                  (static_cast<uint32_t>(b) << 16)));
}

// The add in 16-bit products (int8_ops.h, Split16): (da, db) pairs, one vpmaddwd each for
// the multipliers' high and low halves.
template <bool Signed>
void add_range16(const QIn& a, const QIn& b, int64_t i0, int64_t i1, const AddParams& p,
                 const Split16& ma, const Split16& mb, uint8_t* out) {
    const __m512i z = pair16(a.zero_point, b.zero_point);
    const __m512i mh = pair16(ma.hi, mb.hi), ml = pair16(ma.lo, mb.lo);
    const __m512i half = _mm512_set1_epi32(int32_t{1} << (p.shift - kSplit16MinShift));
    const __m512i lo = _mm512_set1_epi32(p.lo - p.zero_point);
    const __m512i hi = _mm512_set1_epi32(p.hi - p.zero_point);
    const __m512i zp = _mm512_set1_epi32(p.zero_point);
    const __m128i shift = _mm_cvtsi32_si128(p.shift - 16);
    const auto step = [&](__m128i va, __m128i vb) {
        const __m256i ab = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_unpacklo_epi8(va, vb)), _mm_unpackhi_epi8(va, vb), 1);
        const __m512i d = _mm512_sub_epi16(
            Signed ? _mm512_cvtepi8_epi16(ab) : _mm512_cvtepu8_epi16(ab), z);
        const __m512i l = _mm512_srai_epi32(_mm512_madd_epi16(d, ml), 16);
        const __m512i h = _mm512_add_epi32(_mm512_madd_epi16(d, mh), half);
        const __m512i y = _mm512_sra_epi32(_mm512_add_epi32(h, l), shift);
        return _mm512_cvtepi32_epi8(
            _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(y, lo), hi), zp));
    };
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.data + i));
        const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.data + i));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), step(va, vb));
    }
    if (i < i1) {
        const __mmask16 k = lanes(i1 - i);
        _mm_mask_storeu_epi8(out + i, k, step(_mm_maskz_loadu_epi8(k, a.data + i),
                                              _mm_maskz_loadu_epi8(k, b.data + i)));
    }
}

template <bool Signed>
void rescale_row(const uint8_t* x, int64_t n, __m512i z, __m512i m, const Out& o,
                 uint8_t* out) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = lanes(n - i);
        const __m512i d = centred<Signed>(x + i, k, z);
        store(_mm512_mul_epi32(d, m), _mm512_mul_epi32(_mm512_srli_epi64(d, 32), m), o,
              out + i, k);
    }
}

// The same 16-bit form for one input: d as s32 lanes (|d| <= 255) is d in its low int16 and
// the sign in its high one, so vpmaddwd against (Mh, 0) pairs is d * Mh.
template <bool Signed>
void rescale_row16(const uint8_t* x, int64_t n, __m512i z, const Split16& m, int32_t shift,
                   int32_t out_zp, int32_t out_lo, int32_t out_hi, uint8_t* out) {
    const __m512i mh = pair16(m.hi, 0), ml = pair16(m.lo, 0);
    const __m512i half = _mm512_set1_epi32(int32_t{1} << (shift - kSplit16MinShift));
    const __m128i s = _mm_cvtsi32_si128(shift - 16);
    const __m512i lo = _mm512_set1_epi32(out_lo - out_zp), hi = _mm512_set1_epi32(out_hi - out_zp);
    const __m512i zp = _mm512_set1_epi32(out_zp);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = lanes(n - i);
        const __m512i d = centred<Signed>(x + i, k, z);
        const __m512i l = _mm512_srai_epi32(_mm512_madd_epi16(d, ml), 16);
        const __m512i h = _mm512_add_epi32(_mm512_madd_epi16(d, mh), half);
        const __m512i y = _mm512_sra_epi32(_mm512_add_epi32(h, l), s);
        const __m512i v = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(y, lo), hi), zp);
        if (k == 0xFFFF) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(v));
        } else {
            _mm_mask_storeu_epi8(out + i, k, _mm512_cvtepi32_epi8(v));
        }
    }
}

// One plane in two passes over a buffer of one padded row per output row (`rows`, zero
// outside the columns stored here): per output row and 64 columns, the max over the
// window's valid input rows (u8 order: signed input comes sign-flipped; lanes past the row
// zero, the smallest value), stored after the left padding; then per output row the max
// over each window's kw columns. Row by row, each row's columns had been read back right
// after their store, every load spanning stores still in flight (no store forwarding).
// A row's whole 64-byte steps load unmasked (masked ones are slower in the model; asking for
// the next plane ahead as well gained nothing): bench/RESULTS.md, other int8 ops.
void max_pool_plane(const uint8_t* in, const PoolGeom& g, __m512i flip, int64_t width,
                    uint8_t* rows, uint8_t* out) {
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t oy = 0; oy < g.oh; ++oy) {
        uint8_t* row = rows + oy * width;
        const int64_t i0 = g.pt - oy * g.sh > 0 ? g.pt - oy * g.sh : 0;
        const int64_t i1 = g.h + g.pt - oy * g.sh < g.kh ? g.h + g.pt - oy * g.sh : g.kh;
        for (int64_t x = 0; x < g.w; x += 64) {
            const __mmask64 k = low_mask64(g.w - x);
            const bool whole = g.w - x >= 64;  // unmasked: see above
            __m512i m = zero;
            for (int64_t i = i0; i < i1; ++i) {
                const uint8_t* src = in + (oy * g.sh - g.pt + i) * g.w + x;
                const __m512i v = whole ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi8(k, src);
                m = _mm512_max_epu8(m, _mm512_xor_si512(v, flip));
            }
            _mm512_storeu_si512(row + g.pl + x, _mm512_maskz_mov_epi8(k, m));
        }
    }
    const int64_t step = g.sw == 1 ? 64 : 32;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
        const uint8_t* row = rows + oy * width;
        uint8_t* o = out + oy * g.ow;
        for (int64_t x0 = 0; x0 < g.ow; x0 += step) {
            __m512i m = zero;
            for (int64_t j = 0; j < g.kw; ++j) {
                m = _mm512_max_epu8(m, _mm512_loadu_si512(row + g.sw * x0 + j));
            }
            const int64_t n = g.ow - x0 < step ? g.ow - x0 : step;
            if (g.sw == 1) {
                _mm512_mask_storeu_epi8(o + x0, low_mask64(n), _mm512_xor_si512(m, flip));
                continue;
            }
            // stride 2: output x0 + t is the low byte of word t (bytes 2t + j of the row)
            const __m256i packed = _mm512_cvtepi16_epi8(m);
            _mm256_mask_storeu_epi8(o + x0, static_cast<__mmask32>(low_mask64(n)),
                                    _mm256_xor_si256(packed, _mm512_castsi512_si256(flip)));
        }
    }
}

}  // namespace

void max_pool2d_avx512(const QIn& x, const PoolGeom& g, uint8_t* out) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(x.is_signed ? 0x80 : 0));
    // a padded row: every column a window reads, and a whole step's loads past the last
    const int64_t span = (g.ow - 1) * g.sw + g.kw, valid = g.pl + round_up(g.w, 64);
    const int64_t width = (span > valid ? span : valid) + 2 * 64 + g.kw;
#pragma omp parallel if (g.planes * g.oh * g.ow > (1 << 14))
    {
        uint8_t* rows = new uint8_t[static_cast<size_t>(g.oh * width + 64)]();
#pragma omp for schedule(static)
        for (int64_t pl = 0; pl < g.planes; ++pl) {
            max_pool_plane(x.data + pl * g.h * g.w, g, flip, width, rows,
                           out + pl * g.oh * g.ow);
        }
        delete[] rows;
    }
}

void add_avx512(const QIn& a, const QIn& b, int64_t size, const AddParams& p, uint8_t* out) {
    constexpr int64_t kChunk = 1 << 14;  // elements per task (a multiple of 16)
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

void quantize_avx512(const float* x, int64_t size, float scale, int32_t zp, bool out_signed,
                     uint8_t* out) {
    const __m512 s = _mm512_set1_ps(scale);
    const __m512 lo = _mm512_set1_ps(static_cast<float>((out_signed ? -128 : 0) - zp));
    const __m512 hi = _mm512_set1_ps(static_cast<float>((out_signed ? 127 : 255) - zp));
    const __m512i z = _mm512_set1_epi32(zp);
    constexpr int64_t kChunk = 1 << 14;
    const int64_t chunks = (size + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (size > (1 << 16))
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i1 = (c + 1) * kChunk < size ? (c + 1) * kChunk : size;
        const auto one = [&](__m512 v) {
            __m512 q = _mm512_roundscale_ps(_mm512_div_ps(v, s),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);  // max(NaN, lo) is lo
            return _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(q), z));
        };
        int64_t i = c * kChunk;
        for (; i + 16 <= i1; i += 16) {  // whole vectors: masked loads had not been prefetched
            _mm_prefetch(reinterpret_cast<const char*>(x + i + kQuantizeAhead), _MM_HINT_T0);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), one(_mm512_loadu_ps(x + i)));
        }
        if (i < i1) {
            const __mmask16 k = lanes(i1 - i);
            _mm_mask_storeu_epi8(out + i, k, one(_mm512_maskz_loadu_ps(k, x + i)));
        }
    }
}

void fake_quantize_run_avx512(const FakeQuantRows& f, int64_t r, int64_t i0, int64_t i1,
                              float* y, uint8_t* inside) {
    const int64_t c = r % f.c;
    const __m512 s = _mm512_set1_ps(f.scale[c]);
    const __m512 lo = _mm512_set1_ps(static_cast<float>(f.lo - f.zp[c]));
    const __m512 hi = _mm512_set1_ps(static_cast<float>(f.hi - f.zp[c]));
    const float* x = f.x + r * f.inner;
    float* yr = y + r * f.inner;
    uint8_t* in = inside + r * f.inner;
    for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 k = lanes(i1 - i);
        const __m512 q = _mm512_roundscale_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), s),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        // ordered compares: false for NaN
        const __mmask16 ok = _mm512_cmp_ps_mask(q, lo, _CMP_GE_OQ) &
                             _mm512_cmp_ps_mask(q, hi, _CMP_LE_OQ);
        const __m512 v = _mm512_min_ps(_mm512_max_ps(q, lo), hi);  // max(NaN, lo) is lo
        // + 0: a rounded -0 as +0, the reference's integer zero
        _mm512_mask_storeu_ps(yr + i, k, _mm512_mul_ps(_mm512_add_ps(v, _mm512_setzero_ps()), s));
        _mm_mask_storeu_epi8(in + i, k, _mm_maskz_set1_epi8(ok, 1));
    }
}

void concat_part_avx512(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                        int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner) {
    const int64_t outer = rows.outer, inner = rows.inner;
    const int32_t out_lo = out_signed ? -128 : 0, out_hi = out_signed ? 127 : 255;
    const Out o = out_params(shift, out_zp, out_lo, out_hi);
    const __m512i z = _mm512_set1_epi32(x.zero_point), m = _mm512_set1_epi32(mult);
    Split16 m16{};
    const bool narrow = split16_takes(shift, &mult, &x.zero_point, 1, x.is_signed, &m16);
#pragma omp parallel for schedule(static) if (outer * inner > (1 << 16))
    for (int64_t r = 0; r < outer; ++r) {
        const uint8_t* row = rows.row(x.data, r);
        if (narrow) {
            if (x.is_signed) {
                rescale_row16<true>(row, inner, z, m16, shift, out_zp, out_lo, out_hi,
                                    out + r * out_inner);
            } else {
                rescale_row16<false>(row, inner, z, m16, shift, out_zp, out_lo, out_hi,
                                     out + r * out_inner);
            }
        } else if (x.is_signed) {
            rescale_row<true>(row, inner, z, m, o, out + r * out_inner);
        } else {
            rescale_row<false>(row, inner, z, m, o, out + r * out_inner);
        }
    }
}

// Unpadded windows as wide as the plane: output (plane, oy) is the mean of the kh * w bytes
// from row oy * sh on, rounded half up as avg_pool2d's formula: floor((2 s + n) / 2n) + zp,
// s the sum less zp per byte. Through double the floor is exact: numerator and denominator
// are integers exact in double, the quotient (at most 256 in size) lies within 2^-45 of its
// double, and a quotient that is no integer lies at least 1 / 2n from one. A signed byte is
// its unsigned one less 256 where the top bit is set. Faster than the scalar loop, which
// widens every byte to 64 bits (bench/RESULTS.md, other int8 ops: `vpsadbw`).
void avg_pool_runs_avx512(const QIn& x, const PoolGeom& g, uint8_t* out) {
    // locals: out may alias anything, so fields read through g and x were reloaded per store
    const int64_t count = g.kh * g.w, plane = g.h * g.w, oh = g.oh, step = g.sh * g.w;
    const int64_t planes = g.planes, zp = x.zero_point, bias = zp * count;
    const uint8_t* data = x.data;
    const bool is_signed = x.is_signed;
    const double den = 2.0 * static_cast<double>(count);
#pragma omp parallel for schedule(static) if (planes * plane > (1 << 16))
    for (int64_t pl = 0; pl < planes; ++pl) {
        for (int64_t oy = 0; oy < oh; ++oy) {
            const uint8_t* p = data + pl * plane + oy * step;
            __m512i acc = _mm512_setzero_si512();
            int64_t negative = 0;
            for (int64_t j = 0; j < count; j += 64) {
                const __m512i v = _mm512_maskz_loadu_epi8(low_mask64(count - j), p + j);
                acc = _mm512_add_epi64(acc, _mm512_sad_epu8(v, _mm512_setzero_si512()));
                if (is_signed) negative += __builtin_popcountll(_mm512_movepi8_mask(v));
            }
            const int64_t sum = _mm512_reduce_add_epi64(acc) - 256 * negative - bias;
            const double q = std::floor((2.0 * static_cast<double>(sum) + count) / den);
            out[pl * oh + oy] = static_cast<uint8_t>(static_cast<int64_t>(q) + zp);
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
