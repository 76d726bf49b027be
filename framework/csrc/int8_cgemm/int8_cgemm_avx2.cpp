// AVX2 tile of the int8 convolution (layouts in int8_cgemm.h), exact without VNNI, for
// AVX2-only CPUs (AMD Zen 1-3, Intel's client CPUs) and AVX-512 ones without VNNI (the
// activation-block pack, quad planes and padding: int8_pack_avx2.cpp).
// vpmaddubsw would sum two u8 x s8 products into a saturating int16 (2 * 255 * 127 >
// 32767), so the products go through vpmaddwd on int16 instead: a k-quad's 4 activation
// bytes of a position (one 32-bit lane) split into the even bytes (k0, k2) and the odd ones
// (k1, k3), zero-extended to int16, and each is multiplied by the channel's matching pair of
// weights, sign-extended: two vpmaddwd and two adds per 8 positions and channel, every
// partial sum exact (2 * 255 * 128 per pair).
// The weights are widened into (w0, w2) and (w1, w3) int16 pairs once per tile call (or once
// per convolution: cgemm_tile_avx2_wide), so that the inner loop broadcasts a ready pair from
// memory. Register tile: up to 4 channels x 16
// positions (8 ymm accumulators); a tile of 5 or 6 channels runs as two passes over the
// activations. Weights in the narrow form (NarrowWeights: pairs clamped to |w0| + |w1| <= 128,
// the rest as a sparse residual) take cgemm_tile_avx2_narrow, where vpmaddubsw is exact. The
// store requantizes lane for lane as reference.requantize.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_requant_avx2.h"
#include "int8_cgemm/int8_tile6_impl.h"

namespace tianyuan {
namespace int8 {
namespace {

// The narrow tile's product (cgemm_tile_avx2_narrow): vpmaddubsw, then vpmaddwd by ones.
struct NarrowDot {
    static __m256i step(__m256i acc, __m256i x, __m256i w) {
        return _mm256_add_epi32(
            acc, _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), _mm256_set1_epi16(1)));
    }
};

// Two requantized halves (positions 0-7, 8-15) -> up to 16 bytes at out.
inline void store16(__m256i y0, __m256i y1, bool out_signed, uint8_t* out, int64_t n) {
    if (n > 0) store_first(pack16(y0, y1, out_signed), out, n);
}

// Named accumulators (GCC keeps arrays of vectors in memory).
#define TY_DOT(i)                                                                      \
    if (R > i) {                                                                       \
        const __m256i we = _mm256_set1_epi32(wq[2 * i]);                               \
        const __m256i wo = _mm256_set1_epi32(wq[2 * i + 1]);                           \
        c##i##0 = _mm256_add_epi32(c##i##0, _mm256_madd_epi16(e0, we));                \
        c##i##0 = _mm256_add_epi32(c##i##0, _mm256_madd_epi16(o0, wo));                \
        if (P > 1) {                                                                   \
            c##i##1 = _mm256_add_epi32(c##i##1, _mm256_madd_epi16(e1, we));            \
            c##i##1 = _mm256_add_epi32(c##i##1, _mm256_madd_epi16(o1, wo));            \
        }                                                                              \
    }
#define TY_STORE(i)                                                                    \
    if (R > i) {                                                                       \
        store16(requant8_sat_t(c##i##0, cs[i]), P > 1 ? requant8_sat_t(c##i##1, cs[i]) : z, \
                r.out_signed, out + i * ldo, npos);                                    \
    }

// R channels (rows of the widened block wx, `rows` per quad; cs: their requantization) x 8P
// positions from acts.
template <int R, int P>
inline __attribute__((always_inline)) void sub_tile(
    const uint8_t* acts, const int64_t* qoff, const int32_t* wx, int64_t rows, int64_t nq,
    int64_t npos, const Chan* cs, const Requant& r, uint8_t* out, int64_t ldo) {
    const __m256i z = _mm256_setzero_si256();
    const __m256i low = _mm256_set1_epi16(0x00FF);
    // the sums start at the bias (the store's requant8_sat_t takes acc + bias)
    const __m256i b0 = cs[0].bias, b1 = R > 1 ? cs[1].bias : z, b2 = R > 2 ? cs[2].bias : z,
                  b3 = R > 3 ? cs[3].bias : z;
    __m256i c00 = b0, c01 = b0, c10 = b1, c11 = b1, c20 = b2, c21 = b2, c30 = b3, c31 = b3;
    // unrolled by 4 (bench/RESULTS.md, int8 kernels: AVX2)
#pragma GCC unroll 4
    for (int64_t g = 0; g < nq; ++g) {
        const uint8_t* a = acts + qoff[g];
        const int32_t* wq = wx + g * rows * 2;
        const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
        const __m256i x1 =
            P > 1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32)) : z;
        const __m256i e0 = _mm256_and_si256(x0, low), o0 = _mm256_srli_epi16(x0, 8);
        const __m256i e1 = _mm256_and_si256(x1, low), o1 = _mm256_srli_epi16(x1, 8);
        TY_DOT(0) TY_DOT(1) TY_DOT(2) TY_DOT(3)
    }
    TY_STORE(0) TY_STORE(1) TY_STORE(2) TY_STORE(3)
}

#undef TY_DOT

#undef TY_STORE

// R channels x all npos positions, 16 a step (8 in the last where 8 or fewer are left), in
// one function rather than a call through a pointer per step (never slower).
template <int R>
void sub_rows(const uint8_t* acts, const int64_t* qoff, const int32_t* wx, int64_t rows,
              int64_t nq, int64_t npos, const Chan* cs, const Requant& r, uint8_t* out,
              int64_t ldo) {
    int64_t p0 = 0;
    for (; npos - p0 > 8; p0 += 16)
        sub_tile<R, 2>(acts + p0 * kGroup, qoff, wx, rows, nq, npos - p0, cs, r, out + p0, ldo);
    if (p0 < npos)
        sub_tile<R, 1>(acts + p0 * kGroup, qoff, wx, rows, nq, npos - p0, cs, r, out + p0, ldo);
}

using SubFn = void (*)(const uint8_t*, const int64_t*, const int32_t*, int64_t, int64_t,
                       int64_t, const Chan*, const Requant&, uint8_t*, int64_t);

SubFn pick(int64_t rows) {
    switch (rows) {
        case 1: return sub_rows<1>;
        case 2: return sub_rows<2>;
        case 3: return sub_rows<3>;
        default: return sub_rows<4>;
    }
}

}  // namespace

// Narrow weights: one vpmaddubsw on the raw bytes (u8 x s8 pairs summed into int16, exact
// since |w0| + |w1| <= 128: 255 * 128 < 2^15) and one vpmaddwd by ones (the two pairs into
// int32), then the residual quads of each row (NarrowWeights): as many multiply-port
// operations as the split form, but no split and no widened weights, so all 6 channels of a
// block fit one pass over the activations (int8_tile6_impl.h; of its 12 accumulators and the
// ones, GCC keeps one on the stack), faster than two passes of 3 (bench/RESULTS.md, int8
// kernels: AVX2).
void cgemm_tile_avx2_narrow(const uint8_t* acts, const int64_t* qoff, const int8_t* w,
                            int64_t kp, int64_t rows, int64_t npos, const RowParams& q,
                            const Requant& r, uint8_t* out, int64_t ldo) {
    tile6<NarrowDot>(acts, qoff, w, kp, rows, npos, q, r, out, ldo);
}

// groups of 4 s8 (w0, w1, w2, w3) -> 2 words each: int16 (w0, w2) then int16 (w1, w3).
void widen_weights_avx2(const int8_t* w, int64_t groups, int32_t* out) {
    int64_t g = 0;
    for (; g + 4 <= groups; g += 4) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + g * kGroup));
        const __m256i s = _mm256_cvtepi8_epi16(b);  // 16 int16: w0 w1 w2 w3 per group
        const __m256i lo = _mm256_shufflelo_epi16(s, _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * g),
                            _mm256_shufflehi_epi16(lo, _MM_SHUFFLE(3, 1, 2, 0)));
    }
    for (; g < groups; ++g) {
        const int8_t* q = w + g * kGroup;
        const auto pair = [](int8_t a, int8_t b) {
            return static_cast<int32_t>(static_cast<uint16_t>(a) |
                                        static_cast<uint32_t>(static_cast<uint16_t>(b)) << 16);
        };
        out[2 * g] = pair(q[0], q[2]);
        out[2 * g + 1] = pair(q[1], q[3]);
    }
}

// A block of up to kStackWidened words widens on the stack: thread_space's look-up and canary
// check outweigh the widening itself on shallow layers (bench/RESULTS.md, int8 kernels: AVX2).
constexpr int64_t kStackWidened = 2048;

void cgemm_tile_avx2(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp,
                     int64_t rows, int64_t npos, const RowParams& q, const Requant& r,
                     uint8_t* out, int64_t ldo) {
    const int64_t nq = kp / kGroup;
    alignas(32) int32_t local[kStackWidened];
    int32_t* wx = nq * rows * 2 <= kStackWidened
                      ? local
                      : reinterpret_cast<int32_t*>(thread_space(Space::widened, nq * rows * 8));
    widen_weights_avx2(w, nq * rows, wx);
    cgemm_tile_avx2_wide(acts, qoff, wx, kp, rows, npos, q, r, out, ldo);
}

void cgemm_tile_avx2_wide(const uint8_t* acts, const int64_t* qoff, const int32_t* wx,
                          int64_t kp, int64_t rows, int64_t npos, const RowParams& q,
                          const Requant& r, uint8_t* out, int64_t ldo) {
    const int64_t nq = kp / kGroup;
    for (int64_t i = 0; i < rows && q.ahead; ++i)  // the lines ahead, for writing
        __builtin_prefetch(out + i * ldo + q.ahead, 1, 3);
    // 5 or 6 channels: 3 + 2 or 3 + 3 (as many vector operations per product as 4 + 1, 4 + 2)
    const int64_t first = rows > 4 ? 3 : rows;
    // The channels' constants once per call, not per 16 positions: on shallow layers the
    // requantization outweighs the k-quads' products (bench/RESULTS.md, int8 kernels: AVX2).
    Chan local[kOcBlock];
    const Chan* cs = reinterpret_cast<const Chan*>(q.chans);
    if (!cs) {
        for (int64_t i = 0; i < rows; ++i)
            local[i] = chan(q.bias[i], q.multiplier[i], q.shift[i], r);
        cs = local;
    }
    for (int64_t i0 = 0; i0 < rows; i0 += first) {
        const int64_t ri = rows - i0 < first ? rows - i0 : first;
        pick(ri)(acts, qoff, wx + i0 * 2, rows, nq, npos, cs + i0, r, out + i0 * ldo, ldo);
    }
}

static_assert(sizeof(Chan) == kChanBytes, "kChanBytes (int8_cgemm.h) is Chan's size");

void make_chans_avx2(const int32_t* bias, const int32_t* multiplier, const int32_t* shift,
                     int64_t n, const Requant& r, uint8_t* out) {
    Chan* c = reinterpret_cast<Chan*>(out);
    for (int64_t i = 0; i < n; ++i) c[i] = chan(bias[i], multiplier[i], shift[i], r);
}

}  // namespace int8
}  // namespace tianyuan
