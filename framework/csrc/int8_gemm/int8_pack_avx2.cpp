// AVX2 packing for the int8 convolution (layouts in int8_cgemm.h): the activation-block pack,
// the direct algorithm's quad planes, the padded plane and the quad copy, each a 4-row byte
// interleave with vpunpck where it builds k-quads. The tile that reads them:
// int8_cgemm_avx2.cpp.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm/int8_cgemm.h"

namespace tianyuan {
namespace int8 {
namespace {

inline __m256i load32(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// One k row of a block into row[0, kPos): run i's lanes [dst, dst + len) read src + u.src +
// sw * t. 32 lanes a step in run order, so a step past a run's end is overwritten by the
// next run (row holds kPos + 32 bytes); stride 2 keeps the even bytes of 64. Steps read past
// a run's last byte, up to `end` (the input may be the caller's unpadded tensor); what is left
// goes byte by byte. Steps had stopped at a run's last byte: the ResNet stem's 64- and
// 48-position runs at stride 2 then went half byte by byte (bench/RESULTS.md, AVX2: the
// stem's gather).
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
    // A whole block that is one contiguous run (1x1 layers at stride 1) whose rows all lie
    // before `end`: the k rows interleave straight from the input, without the copy into row
    // buffers
    if (nruns == 1 && sw == 1 && runs[0].dst == 0 && runs[0].len == kPos) {
        const uint8_t* from = xpad + runs[0].src;
        bool inside = true;
        for (int64_t i = 0; i < k && inside; ++i) inside = end - (from + koff[i]) >= kPos;
        if (inside) {
            alignas(32) static const uint8_t zeros[kPos] = {};
            const uint8_t* at[kGroup];
            for (int64_t q = 0; q < kp; q += kGroup) {
                for (int64_t t = 0; t < kGroup; ++t) at[t] = q + t < k ? from + koff[q + t] : zeros;
                interleave(at, buf + (q / kGroup) * kPos * kGroup, kPos);
            }
            return;
        }
    }
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
// 9-quad rows had each cost a whole 64-quad step.
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
                        // plane (bench/RESULTS.md, AVX2: planes in wide steps)
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
// side by several threads) and reads that would pass src_end go through a buffer, not a
// memset / memcpy per row. (Not for the depthwise planes, which their kernels read right
// after: memset and memcpy fill the plane in whole lines, faster there; bench/RESULTS.md.)
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
