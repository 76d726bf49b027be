// AVX512-VNNI tile and requantization of the channels-last int8 convolution (int8_conv_nhwc.h):
// M positions x V vectors of 16 output channels in M * V zmm accumulators (up to 6 x 4),
// starting from the block's bias. Per step (a kernel row or a tap), each position's pointer;
// per k-quad, V loads of the block's weights (s8 operand) and M broadcasts of a position's 4
// activation bytes (u8 operand), M * V `vpdpbusd`. The sums go to the driver's buffer; a few
// tiles' positions are then requantized together with per-lane constants (exactly
// reference.requantize) and each position's channels packed into one 64-byte vector, stored
// whole or masked to the block's channels.
#include <immintrin.h>

#include <cstdint>

#include "int8_conv/int8_conv_nhwc.h"
#include "int8_gemm/int8_requant_avx512.h"

namespace tianyuan {
namespace int8 {
namespace {

// Named accumulators: GCC keeps arrays of vectors in memory.
#define TY_ACC(m) __m512i c##m##0 = b0, c##m##1 = b1, c##m##2 = b2, c##m##3 = b3;
#define TY_PTR(m) \
    const uint8_t* p##m = M > m ? (Table ? t.table[k * kNhwcPos + m] : t.base[m] + t.soff[k]) : 0;
#define TY_DOT(m)                                                              \
    if (M > m) {                                                               \
        const __m512i b = _mm512_set1_epi32(load4(p##m + 4 * q));              \
        c##m##0 = _mm512_dpbusd_epi32(c##m##0, b, w0);                         \
        if (V > 1) c##m##1 = _mm512_dpbusd_epi32(c##m##1, b, w1);              \
        if (V > 2) c##m##2 = _mm512_dpbusd_epi32(c##m##2, b, w2);              \
        if (V > 3) c##m##3 = _mm512_dpbusd_epi32(c##m##3, b, w3);              \
    }
#define TY_SAVE(m)                                                             \
    if (M > m) {                                                               \
        _mm512_store_si512(t.sums + m * 64, c##m##0);                          \
        if (V > 1) _mm512_store_si512(t.sums + m * 64 + 16, c##m##1);          \
        if (V > 2) _mm512_store_si512(t.sums + m * 64 + 32, c##m##2);          \
        if (V > 3) _mm512_store_si512(t.sums + m * 64 + 48, c##m##3);          \
    }

template <int M, int V, bool Table>
void tile(const NhwcTile& t) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i b0 = _mm512_loadu_si512(t.bias);
    const __m512i b1 = V > 1 ? _mm512_loadu_si512(t.bias + 16) : z;
    const __m512i b2 = V > 2 ? _mm512_loadu_si512(t.bias + 32) : z;
    const __m512i b3 = V > 3 ? _mm512_loadu_si512(t.bias + 48) : z;
    TY_ACC(0) TY_ACC(1) TY_ACC(2) TY_ACC(3) TY_ACC(4) TY_ACC(5)
    const int64_t step = V * 64;  // weight bytes a k-quad
    for (int64_t k = 0; k < t.steps; ++k) {
        TY_PTR(0) TY_PTR(1) TY_PTR(2) TY_PTR(3) TY_PTR(4) TY_PTR(5)
        const int8_t* wk = t.w + k * t.quads * step;
        for (int64_t q = 0; q < t.quads; ++q) {
            const int8_t* wq = wk + q * step;
            const __m512i w0 = _mm512_loadu_si512(wq);
            const __m512i w1 = V > 1 ? _mm512_loadu_si512(wq + 64) : z;
            const __m512i w2 = V > 2 ? _mm512_loadu_si512(wq + 128) : z;
            const __m512i w3 = V > 3 ? _mm512_loadu_si512(wq + 192) : z;
            TY_DOT(0) TY_DOT(1) TY_DOT(2) TY_DOT(3) TY_DOT(4) TY_DOT(5)
        }
    }
    TY_SAVE(0) TY_SAVE(1) TY_SAVE(2) TY_SAVE(3) TY_SAVE(4) TY_SAVE(5)
}

#undef TY_ACC
#undef TY_PTR
#undef TY_DOT
#undef TY_SAVE

template <int V, bool Table>
void by_positions(const NhwcTile& t) {
    switch (t.npos) {
        case 1: return tile<1, V, Table>(t);
        case 2: return tile<2, V, Table>(t);
        case 3: return tile<3, V, Table>(t);
        case 4: return tile<4, V, Table>(t);
        case 5: return tile<5, V, Table>(t);
        default: return tile<6, V, Table>(t);
    }
}

template <bool Table>
void by_vectors(const NhwcTile& t) {
    switch (t.nv) {
        case 1: return by_positions<1, Table>(t);
        case 2: return by_positions<2, Table>(t);
        case 3: return by_positions<3, Table>(t);
        default: return by_positions<4, Table>(t);
    }
}

inline __m512i at(const int32_t* a, int v) { return _mm512_loadu_si512(a + 16 * v); }

inline void store(uint8_t* out, __m512i y, int64_t nbytes, __mmask64 mask) {
    if (nbytes == 64) {
        _mm512_storeu_si512(out, y);
    } else {
        _mm512_mask_storeu_epi8(out, mask, y);
    }
}

// The fold form, its constants in registers for all the positions (named: GCC keeps arrays
// of vectors in memory).
template <int V>
void requant_fold(const int32_t* sums, int64_t npos, const NhwcRequant& q, uint8_t* out,
                  int64_t ldo) {
    const NhwcBlockQ& k = *q.q;
    const __m512i z = _mm512_setzero_si512();
    const RowQ rq = row_q(*q.r);
    const __mmask64 mask = low_mask64(q.nbytes);
#define TY_K(v) \
    const __m512i m##v = V > v ? at(k.mult, v) : z, o##v = V > v ? at(k.mult_odd, v) : z, \
                  h##v = V > v ? at(k.half_hi, v) : z, s##v = V > v ? at(k.shift_hi, v) : z;
    TY_K(0) TY_K(1) TY_K(2) TY_K(3)
#undef TY_K
    for (int64_t p = 0; p < npos; ++p) {
        const int32_t* a = sums + p * 64;
        store(out + p * ldo, requant_row64(
                  fold_lanes(at(a, 0), m0, o0, h0, s0),
                  V > 1 ? fold_lanes(at(a, 1), m1, o1, h1, s1) : z,
                  V > 2 ? fold_lanes(at(a, 2), m2, o2, h2, s2) : z,
                  V > 3 ? fold_lanes(at(a, 3), m3, o3, h3, s3) : z, rq), q.nbytes, mask);
    }
}

// Any shifts: requant_lanes_y's three forms, each vector's constants worked out here.
template <int V>
void requant_lanes(const int32_t* sums, int64_t npos, const NhwcRequant& q, uint8_t* out,
                   int64_t ldo) {
    const __m512i z = _mm512_setzero_si512();
    const RowQ rq = row_q(*q.r);
    const __mmask64 mask = low_mask64(q.nbytes);
    static const int32_t no_bias[16] = {};  // the bias is in the sums
    LaneQ lq[V];
    for (int v = 0; v < V; ++v) {
        lq[v] = lane_q(no_bias, q.q->mult + 16 * v, q.q->shift + 16 * v, *q.r);
    }
    for (int64_t p = 0; p < npos; ++p) {
        const int32_t* a = sums + p * 64;
        store(out + p * ldo, requant_row64(
                  requant_lanes_y(at(a, 0), lq[0]),
                  V > 1 ? requant_lanes_y(at(a, 1), lq[V > 1 ? 1 : 0]) : z,
                  V > 2 ? requant_lanes_y(at(a, 2), lq[V > 2 ? 2 : 0]) : z,
                  V > 3 ? requant_lanes_y(at(a, 3), lq[V > 3 ? 3 : 0]) : z, rq), q.nbytes, mask);
    }
}

template <int V>
void requant(const int32_t* sums, int64_t npos, const NhwcRequant& q, uint8_t* out,
             int64_t ldo) {
    if (q.q->fold) return requant_fold<V>(sums, npos, q, out, ldo);
    requant_lanes<V>(sums, npos, q, out, ldo);
}

}  // namespace

void nhwc_tile_vnni(const NhwcTile& t) {
    if (t.table) return by_vectors<true>(t);
    by_vectors<false>(t);
}

void nhwc_requant_vnni(const int32_t* sums, int64_t npos, const NhwcRequant& q, uint8_t* out,
                       int64_t ldo) {
    switch (q.nv) {
        case 1: return requant<1>(sums, npos, q, out, ldo);
        case 2: return requant<2>(sums, npos, q, out, ldo);
        case 3: return requant<3>(sums, npos, q, out, ldo);
        default: return requant<4>(sums, npos, q, out, ldo);
    }
}

}  // namespace int8
}  // namespace tianyuan
