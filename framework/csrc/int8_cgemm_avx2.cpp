// AVX2 tile of the int8 convolution (layouts in int8_cgemm.h), exact without VNNI, for
// AVX2-only CPUs (AMD Zen 1-3, Intel's client CPUs) and AVX-512 ones without VNNI; and the
// AVX2 activation-block pack, quad planes and quad copy (a 4-row byte interleave with vpunpck).
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

#include "int8_cgemm.h"
#include "int8_requant_avx2.h"
#include "int8_tile6_impl.h"

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
        store16(requant8(c##i##0, cs[i]), P > 1 ? requant8(c##i##1, cs[i]) : z,        \
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
    __m256i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
    // unrolled: 54 -> 58.5 GMAC/s a thread on 6 channels x 64 positions x 576 k (Zen 3)
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
// one function rather than a call through a pointer per step (level to 0.95x the time).
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
// ones, GCC keeps one on the stack). On Zen 3, 6 channels x 16 positions took 0.94-0.98x the
// time of two passes of 3 (ResNet-18's 3x3 layers, 1x1 and stem, interleaved in one process).
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
// check had taken 8 % of MobileNetV2's 16-deep 1x1 layer (batch 16), its widening 5 %.
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
    // 5 or 6 channels: 3 + 2 or 3 + 3 (as many vector operations per product as 4 + 1, 4 + 2)
    const int64_t first = rows > 4 ? 3 : rows;
    // The channels' constants once per call, not per 16 positions: with the widening on the
    // stack, MobileNetV2's 16-deep 1x1 layer (96 channels at 112x112, batch 16) 9.5-10.2 ->
    // 6.7-7.6 ms on Zen 3, where the requantization outweighs the 4 k-quads' products.
    Chan cs[kOcBlock];
    for (int64_t i = 0; i < rows; ++i) cs[i] = chan(q.bias[i], q.multiplier[i], q.shift[i], r);
    for (int64_t i0 = 0; i0 < rows; i0 += first) {
        const int64_t ri = rows - i0 < first ? rows - i0 : first;
        pick(ri)(acts, qoff, wx + i0 * 2, rows, nq, npos, cs + i0, r, out + i0 * ldo, ldo);
    }
}

namespace {

inline __m256i load32(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// One k row of a block into row[0, kPos): run i's lanes [dst, dst + len) read src + u.src +
// sw * t. 32 lanes a step in run order, so a step past a run's end is overwritten by the
// next run (row holds kPos + 32 bytes); stride 2 keeps the even bytes of 64. Steps read past
// a run's last byte, up to `end` (the input may be the caller's unpadded tensor); what is left
// goes byte by byte. Steps had stopped at a run's last byte: the ResNet stem's 64- and
// 48-position runs at stride 2 then went half byte by byte (the pack took 19 % of its time).
inline void read_row(const uint8_t* src, const uint8_t* end, const Run* runs, int64_t nruns,
                     int64_t sw, uint8_t* row) {
    const __m256i low = _mm256_set1_epi16(0x00FF);
    for (int64_t i = 0; i < nruns; ++i) {
        const Run& u = runs[i];
        const uint8_t* from = src + u.src;
        uint8_t* to = row + u.dst;
        int64_t t = 0;
        if (sw == 1) {
            for (; t < u.len && end - (from + t) >= 32; t += 32)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + t), load32(from + t));
        } else if (sw == 2) {
            for (; t < u.len && end - (from + 2 * t) >= 64; t += 32) {
                const __m256i a = _mm256_and_si256(load32(from + 2 * t), low);
                const __m256i b = _mm256_and_si256(load32(from + 2 * t + 32), low);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + t),
                                    _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xD8));
            }
        }
        for (; t < u.len; ++t) to[t] = from[t * sw];
    }
}

// 4 rows of 32 positions -> 32 quads (128 bytes) at dst: each 32-bit lane holds the 4 rows'
// bytes of one position; only the first `quads` are stored (in whole 8-quad steps).
inline void store_quads(__m256i r0, __m256i r1, __m256i r2, __m256i r3, uint8_t* dst,
                        int64_t quads) {
    // per 128-bit lane L: positions 16L + 0..7 (u0, u2) and 16L + 8..15 (u1, u3)
    const __m256i u0 = _mm256_unpacklo_epi8(r0, r1), u1 = _mm256_unpackhi_epi8(r0, r1);
    const __m256i u2 = _mm256_unpacklo_epi8(r2, r3), u3 = _mm256_unpackhi_epi8(r2, r3);
    const __m256i t0 = _mm256_unpacklo_epi16(u0, u2);  // 16L + 0..3
    const __m256i t1 = _mm256_unpackhi_epi16(u0, u2);  // 16L + 4..7
    const __m256i t2 = _mm256_unpacklo_epi16(u1, u3);  // 16L + 8..11
    const __m256i t3 = _mm256_unpackhi_epi16(u1, u3);  // 16L + 12..15
    __m256i* out = reinterpret_cast<__m256i*>(dst);
    _mm256_storeu_si256(out, _mm256_permute2x128_si256(t0, t1, 0x20));
    if (quads > 8) _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(t2, t3, 0x20));
    if (quads > 16) _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(t0, t1, 0x31));
    if (quads > 24) _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(t2, t3, 0x31));
}

// 4 row buffers of kPos positions -> the kPos quads of one k-quad at dst (`quads` stored).
inline void interleave(const uint8_t* const* rows, uint8_t* dst, int64_t quads) {
    store_quads(load32(rows[0]), load32(rows[1]), load32(rows[2]), load32(rows[3]), dst, quads);
    if (quads > 32)
        store_quads(load32(rows[0] + 32), load32(rows[1] + 32), load32(rows[2] + 32),
                    load32(rows[3] + 32), dst + 128, quads - 32);
}

}  // namespace

void pack_block_avx2(const uint8_t* xpad, const uint8_t* end, const int64_t* koff, int64_t k,
                     int64_t kp, const Run* runs, int64_t nruns, int64_t sw, uint8_t* buf) {
    alignas(32) uint8_t rows[kGroup][kPos + 32];
    std::memset(rows, 0, sizeof(rows));
    const uint8_t* at[kGroup] = {rows[0], rows[1], rows[2], rows[3]};
    for (int64_t q = 0; q < kp; q += kGroup) {
        for (int64_t t = 0; t < kGroup; ++t) {
            if (q + t < k) {
                read_row(xpad + koff[q + t], end, runs, nruns, sw, rows[t]);
            } else {
                std::memset(rows[t], 0, kPos);
            }
        }
        interleave(at, buf + (q / kGroup) * kPos * kGroup, kPos);
    }
}

// Each phase plane in steps of kPos quads, as one flat run of hph x wph (a step spans
// several rows where the rows are narrow): 4 row buffers, z outside the input, each plane
// row's columns copied in, every byte xor flip, then interleaved; the last step of a phase
// runs into the next phase, written after it (or into dst's slack). Row by row, a 7x7 layer's
// 9-quad rows had each cost a whole 64-quad step (quad planes took 4 % of the convolution).
void quad_planes_avx2(const uint8_t* const* rows4, const QuadPlanes& p, uint8_t* dst) {
    alignas(32) uint8_t rows[kGroup][kPos];
    const uint8_t* at[kGroup] = {rows[0], rows[1], rows[2], rows[3]};
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(p.flip));
    const __m256i even = _mm256_set1_epi16(0x00FF);
    const int64_t total = p.hph * p.wph;
    for (int64_t a = 0; a < p.sh; ++a) {
        for (int64_t b = 0; b < p.sw; ++b) {
            uint8_t* plane = dst + (a * p.sw + b) * p.plane * kGroup;
            // phase columns [x_lo, x_hi) read input columns sw * x + b - pl inside [0, w)
            const int64_t x_lo = b >= p.pl ? 0 : (p.pl - b + p.sw - 1) / p.sw;
            const int64_t x_hi = p.w + p.pl - b <= 0 ? 0 : (p.w + p.pl - b - 1) / p.sw + 1;
            for (int64_t s0 = 0; s0 < total; s0 += kPos) {
                const int64_t quads = total - s0 < kPos ? total - s0 : kPos;
                for (int64_t t = 0; t < kGroup; ++t) std::memset(rows[t], p.z ^ p.flip, kPos);
                for (int64_t y = s0 / p.wph; y * p.wph < s0 + quads; ++y) {
                    const int64_t row = p.sh * y + a - p.pt;
                    if (row < 0 || row >= p.h) continue;
                    // this step's columns of phase row y, within the input
                    int64_t x0 = s0 - y * p.wph > x_lo ? s0 - y * p.wph : x_lo;
                    int64_t x1 = s0 + quads - y * p.wph < x_hi ? s0 + quads - y * p.wph : x_hi;
                    x1 = x1 < p.wph ? x1 : p.wph;
                    if (x1 <= x0) continue;
                    const int64_t lane = y * p.wph + x0 - s0, col = p.sw * x0 + b - p.pl;
                    for (int64_t t = 0; t < kGroup; ++t) {
                        const uint8_t* src = rows4[t] + row * p.w + col;
                        if (p.sw == 1) {
                            std::memcpy(rows[t] + lane, src, static_cast<size_t>(x1 - x0));
                            continue;
                        }
                        int64_t l = 0;
                        // stride 2: 16 even bytes of 32 a step while the step stays in the
                        // plane (ResNet-18's 56x56 stride-2 layer 0.92-0.96x the time)
                        if (p.sw == 2) {
                            const uint8_t* end = rows4[t] + p.h * p.w;
                            for (; l + 16 <= x1 - x0 && src + 2 * l + 32 <= end; l += 16) {
                                const __m256i v = _mm256_and_si256(load32(src + 2 * l), even);
                                const __m256i bytes = _mm256_permute4x64_epi64(
                                    _mm256_packus_epi16(v, v), 0x08);
                                _mm_storeu_si128(reinterpret_cast<__m128i*>(rows[t] + lane + l),
                                                 _mm256_castsi256_si128(bytes));
                            }
                        }
                        for (; l < x1 - x0; ++l) rows[t][lane + l] = src[p.sw * l];
                    }
                }
                for (int64_t t = 0; t < kGroup; ++t)
                    for (int64_t h = 0; h < kPos; h += 32)
                        _mm256_store_si256(reinterpret_cast<__m256i*>(rows[t] + h),
                                           _mm256_xor_si256(load32(rows[t] + h), flip));
                interleave(at, plane + s0 * kGroup, quads);
            }
        }
    }
}

// As pad_plane_generic (the PadPlane contract in int8_cgemm.h), in 32-byte steps: the top
// border, then per row its left border, its bytes (xor flip) and its right border, then the
// bottom border. A step may run past what it writes into the rows after it, which are
// written later; only steps that would pass the plane's end (planes are padded side by
// side by several threads) and reads that would pass src_end go through a buffer. The
// generic version's memset / memcpy per row had taken 4.5 % of ResNet-18's stem on AVX2.
// (Not for the depthwise planes, which their kernels read right after: their layers took
// 1.09-1.32x the time with it, where memset and memcpy fill the plane in whole lines.)
void pad_plane_avx2(const uint8_t* src, const PadPlane& p, uint8_t* dst) {
    const int64_t wp = p.pl + p.w + p.pr, size = (p.pt + p.h + p.pb) * wp;
    const uint8_t* const src_end = p.src_end ? p.src_end : src + p.h * p.w;
    const __m256i z = _mm256_set1_epi8(static_cast<char>(p.z));
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(p.flip));
    // v's first n bytes at dst + at, exactly where a whole step would pass the plane's end
    const auto put = [&](int64_t at, __m256i v, int64_t n) {
        if (at + 32 <= size) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + at), v);
            return;
        }
        alignas(32) uint8_t tmp[32];
        _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), v);
        std::memcpy(dst + at, tmp, static_cast<size_t>(n));
    };
    const auto fill = [&](int64_t from, int64_t to) {  // [from, to) = z
        for (int64_t x = from; x < to; x += 32) put(x, z, to - x < 32 ? to - x : 32);
    };
    fill(0, p.pt * wp);
    for (int64_t y = 0; y < p.h; ++y) {
        const int64_t row = (p.pt + y) * wp;
        const uint8_t* in = src + y * p.w;
        fill(row, row + p.pl);
        for (int64_t x = 0; x < p.w; x += 32) {
            const int64_t n = p.w - x < 32 ? p.w - x : 32;
            __m256i v;
            if (in + x + 32 <= src_end) {
                v = load32(in + x);
            } else {
                alignas(32) uint8_t tmp[32] = {};
                std::memcpy(tmp, in + x, static_cast<size_t>(n));
                v = _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
            }
            put(row + p.pl + x, _mm256_xor_si256(v, flip), n);
        }
        fill(row + p.pl + p.w, row + wp);
    }
    fill((p.pt + p.h) * wp, size);
}

// As pack_quads_generic, in 32-byte steps: a step past a run's end is overwritten by the
// next run or the next k-quad, which starts at lane 0; the last k-quad's runs store their
// tails exactly (maskstore of whole quads): a run ending near its block's last lane would
// step past the block, the buffer's end, or in a k-split pack the next part's first k-quad,
// which another thread writes. The source planes are readable kPos quads past every run.
void pack_quads_avx2(const uint8_t* src, const int64_t* qoff, int64_t nq, const Run* runs,
                     int64_t nruns, uint8_t* buf) {
    for (int64_t q = 0; q < nq; ++q) {
        const uint8_t* from = src + qoff[q];
        uint8_t* to = buf + q * kPos * kGroup;
        for (int64_t i = 0; i < nruns; ++i) {
            const uint8_t* a = from + runs[i].src * kGroup;
            uint8_t* d = to + runs[i].dst * kGroup;
            const int64_t bytes = runs[i].len * kGroup;
            int64_t x = 0;
            for (; x + 32 < bytes; x += 32)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + x), load32(a + x));
            if (q + 1 < nq) {
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + x), load32(a + x));
            } else {  // (bytes - x) / 4 whole quads, 1 to 8
                const __m256i lanes = _mm256_cmpgt_epi32(
                    _mm256_set1_epi32(static_cast<int32_t>((bytes - x) / kGroup)),
                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                _mm256_maskstore_epi32(reinterpret_cast<int*>(d + x), lanes, load32(a + x));
            }
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
