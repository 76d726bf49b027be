// AVX-512BW activation block pack for the int8 convolution (layout in int8_cgemm.h), the
// direct algorithm's quad planes (the same interleave, once per input row), and the copy
// of a block from those planes.
// Per k-quad: 4 rows of 64 positions are gathered into zmm registers (stride 1: masked
// loads merged at the run's place; stride 2: the even bytes of a masked 128-byte window,
// vpmovwb, merged at the run's place; larger strides through a small buffer), then
// interleaved so each 32-bit lane holds 4 consecutive k of one position. Every k row of a
// block reads the same runs at its own offset, so their masks are worked out once per block
// (per row they cost more than the loads: bench/RESULTS.md, int8 kernels).
#include <immintrin.h>

#include <cstdint>

#include "int8_cgemm/int8_cgemm.h"

namespace tianyuan {
namespace int8 {
namespace {

// The reads of one k row, the same for every row of a block but for its offset: per run,
// where lane 0 would read (masked-off lanes are never read, so it may lie outside the input),
// the lanes it fills and, for stride 2, the bytes of its 128-byte window.
struct RowReads {
    int64_t offset[kPos + 2];
    __mmask64 lanes[kPos + 2], lo[kPos + 2], hi[kPos + 2];
    int64_t count;
    // Prefetched per row: the bytes two blocks on, where the blocks continue the last run.
    // A 1x1 layer's k rows are as many streams, too many for the hardware prefetcher
    // (bench/RESULTS.md, int8 kernels).
    int64_t ahead;
};

RowReads plan_reads(const Run* runs, int64_t nruns, int64_t sw) {
    RowReads rr;
    rr.count = nruns;
    rr.ahead = runs[nruns - 1].src + runs[nruns - 1].len * sw + kPos * sw;
    for (int64_t i = 0; i < nruns; ++i) {
        const Run& u = runs[i];
        rr.lanes[i] = low_mask64(u.len) << u.dst;
        rr.offset[i] = u.src - sw * u.dst;
        // stride 2: window bytes [2 dst, 2 (dst + len) - 1)
        const int64_t b0 = 2 * u.dst, b1 = 2 * (u.dst + u.len) - 1;
        rr.lo[i] = (b1 >= 64 ? ~0ull : low_mask64(b1)) & ~low_mask64(b0 < 64 ? b0 : 64);
        rr.hi[i] = b1 > 64 ? low_mask64(b1 - 64) & ~low_mask64(b0 > 64 ? b0 - 64 : 0) : 0;
    }
    return rr;
}

inline __m512i read_row1(const uint8_t* src, const RowReads& rr) {
    _mm_prefetch(reinterpret_cast<const char*>(src + rr.ahead), _MM_HINT_T0);
    __m512i v = _mm512_setzero_si512();
    for (int64_t i = 0; i < rr.count; ++i)
        v = _mm512_mask_loadu_epi8(v, rr.lanes[i], src + rr.offset[i]);
    return v;
}

// Lane L of a run reads window byte 2L: the low bytes of the window's 16-bit words.
inline __m512i read_row2(const uint8_t* src, const RowReads& rr) {
    _mm_prefetch(reinterpret_cast<const char*>(src + rr.ahead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(src + rr.ahead + 64), _MM_HINT_T0);
    __m512i v = _mm512_setzero_si512();
    for (int64_t i = 0; i < rr.count; ++i) {
        const uint8_t* at = src + rr.offset[i];
        const __m512i lo = _mm512_maskz_loadu_epi8(rr.lo[i], at);
        const __m512i hi = _mm512_maskz_loadu_epi8(rr.hi[i], at + 64);
        const __m512i even = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(lo)),
                                                _mm512_cvtepi16_epi8(hi), 1);
        v = _mm512_mask_mov_epi8(v, rr.lanes[i], even);
    }
    return v;
}

// Strides past 2: byte by byte through a small buffer.
inline __m512i read_row_strided(const uint8_t* src, const Run* runs, int64_t nruns,
                                int64_t sw) {
    alignas(64) uint8_t row[kPos];
    for (int64_t i = 0; i < nruns; ++i)
        for (int64_t t = 0; t < runs[i].len; ++t)
            row[runs[i].dst + t] = src[runs[i].src + t * sw];
    return _mm512_load_si512(row);
}

// 4 rows of 64 positions -> 4 k-quad panels (16 positions each): each 32-bit lane holds 4
// consecutive k of one position.
inline void quad_panels(__m512i r0, __m512i r1, __m512i r2, __m512i r3, __m512i* q0,
                        __m512i* q1, __m512i* q2, __m512i* q3) {
    // bytes -> (r0, r1, r2, r3) quads; per 128-bit lane L: positions 16L + 0..15
    const __m512i u0 = _mm512_unpacklo_epi8(r0, r1), u1 = _mm512_unpackhi_epi8(r0, r1);
    const __m512i u2 = _mm512_unpacklo_epi8(r2, r3), u3 = _mm512_unpackhi_epi8(r2, r3);
    const __m512i t0 = _mm512_unpacklo_epi16(u0, u2);  // lanes: positions 16L + 0..3
    const __m512i t1 = _mm512_unpackhi_epi16(u0, u2);  // 16L + 4..7
    const __m512i t2 = _mm512_unpacklo_epi16(u1, u3);  // 16L + 8..11
    const __m512i t3 = _mm512_unpackhi_epi16(u1, u3);  // 16L + 12..15
    // 4x4 transpose of 128-bit lanes: panel P = (t0.P, t1.P, t2.P, t3.P)
    const __m512i a = _mm512_shuffle_i32x4(t0, t1, 0x44), b = _mm512_shuffle_i32x4(t0, t1, 0xEE);
    const __m512i c = _mm512_shuffle_i32x4(t2, t3, 0x44), d = _mm512_shuffle_i32x4(t2, t3, 0xEE);
    *q0 = _mm512_shuffle_i32x4(a, c, 0x88);
    *q1 = _mm512_shuffle_i32x4(a, c, 0xDD);
    *q2 = _mm512_shuffle_i32x4(b, d, 0x88);
    *q3 = _mm512_shuffle_i32x4(b, d, 0xDD);
}

// The 4 panels at dst; only the first `panels` stored.
inline void store_quads(__m512i r0, __m512i r1, __m512i r2, __m512i r3, uint8_t* dst,
                        int64_t panels = 4) {
    __m512i q0, q1, q2, q3;
    quad_panels(r0, r1, r2, r3, &q0, &q1, &q2, &q3);
    _mm512_storeu_si512(dst, q0);
    if (panels > 1) _mm512_storeu_si512(dst + 64, q1);
    if (panels > 2) _mm512_storeu_si512(dst + 128, q2);
    if (panels > 3) _mm512_storeu_si512(dst + 192, q3);
}

// Rows [0, kp) of the block, rows past k zero; read(src) gives one row.
template <typename Read>
void pack_rows(const uint8_t* xpad, const int64_t* koff, int64_t k, int64_t kp, Read read,
               uint8_t* buf) {
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t q = 0; q < kp; q += kGroup) {
        __m512i r0 = zero, r1 = zero, r2 = zero, r3 = zero;
        if (q < k) r0 = read(xpad + koff[q]);
        if (q + 1 < k) r1 = read(xpad + koff[q + 1]);
        if (q + 2 < k) r2 = read(xpad + koff[q + 2]);
        if (q + 3 < k) r3 = read(xpad + koff[q + 3]);
        store_quads(r0, r1, r2, r3, buf + (q / kGroup) * kPos * kGroup);
    }
}

// One row of a phase plane, 64 columns from x0: lane l reads input column sw*(x0+l) + b - pl
// of each of the 4 rows (z outside the input), stride 1 and 2 in vector loads.
inline __m512i plane_row(const uint8_t* src, const QuadPlanes& p, int64_t x0, int64_t b,
                         __m512i zf, __m512i flip) {
    const int64_t c0 = p.sw * x0 + b - p.pl;
    const auto window = [&](int64_t start) {  // input columns [start, start + 64) in range
        const int64_t lo = start < 0 ? -start : 0, hi = p.w - start;
        return hi <= lo ? 0 : low_mask64(hi) & ~low_mask64(lo);
    };
    __m512i v;
    if (p.sw == 1) {
        v = _mm512_mask_loadu_epi8(zf, window(c0), src + c0);
    } else if (p.sw == 2) {
        const __m512i lo = _mm512_mask_loadu_epi8(zf, window(c0), src + c0);
        const __m512i hi = _mm512_mask_loadu_epi8(zf, window(c0 + 64), src + c0 + 64);
        v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(lo)),
                               _mm512_cvtepi16_epi8(hi), 1);
    } else {
        alignas(64) uint8_t row[kPos];
        _mm512_store_si512(row, zf);
        for (int64_t l = 0; l < kPos; ++l) {
            const int64_t col = c0 + p.sw * l;
            if (col >= 0 && col < p.w) row[l] = src[col];
        }
        v = _mm512_load_si512(row);
    }
    return _mm512_xor_si512(v, flip);
}

// Both column phases of a stride-2 row of at most 32 quads a phase, from one 64-byte load:
// lanes 0-31 phase 0's columns x (input column 2x - pl), lanes 32-63 phase 1's (2x + 1 - pl).
inline __m512i phase_pair_row(const uint8_t* src, const QuadPlanes& p, __m512i zf,
                              __m512i flip) {
    // byte k is input column k - pl: in range for k in [pl, pl + w)
    const __mmask64 in = low_mask64(p.pl + p.w) & ~low_mask64(p.pl);
    const __m512i v = _mm512_mask_loadu_epi8(zf, in, src - p.pl);
    // per 128-bit lane its 8 even bytes, then its 8 odd ones; then the lanes' evens first
    const __m512i split = _mm512_set4_epi32(0x0F0D0B09, 0x07050301, 0x0E0C0A08, 0x06040200);
    const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    return _mm512_xor_si512(_mm512_permutexvar_epi64(order, _mm512_shuffle_epi8(v, split)), flip);
}

// Input rows r0 and r1 for two rows of a stride-1 phase plane of at most 32 quads a row,
// lanes 0-31 and 32-63 (z for rows outside the input).
inline __m512i row_pair(const uint8_t* src, const QuadPlanes& p, int64_t r0, int64_t r1,
                        __m512i zf, __m512i flip) {
    const uint64_t in = low_mask64(p.pl + p.w) & ~low_mask64(p.pl);  // byte k: column k - pl
    __m512i v = zf;
    if (r0 >= 0 && r0 < p.h) v = _mm512_mask_loadu_epi8(v, in, src + r0 * p.w - p.pl);
    if (r1 >= 0 && r1 < p.h) v = _mm512_mask_loadu_epi8(v, in << 32, src + r1 * p.w - p.pl - 32);
    return _mm512_xor_si512(v, flip);
}

}  // namespace

void pack_block_avx512(const uint8_t* xpad, const uint8_t* /* end: masked reads */,
                       const int64_t* koff, int64_t k, int64_t kp, const Run* runs,
                       int64_t nruns, int64_t sw, uint8_t* buf) {
    if (sw <= 2) {
        const RowReads rr = plan_reads(runs, nruns, sw);
        if (sw == 1)
            pack_rows(xpad, koff, k, kp, [&](const uint8_t* src) { return read_row1(src, rr); },
                      buf);
        else
            pack_rows(xpad, koff, k, kp, [&](const uint8_t* src) { return read_row2(src, rr); },
                      buf);
        return;
    }
    pack_rows(xpad, koff, k, kp,
              [&](const uint8_t* src) { return read_row_strided(src, runs, nruns, sw); }, buf);
}

// Each run in whole 64-byte steps, in lane order: a step past the run's end is overwritten
// by the next run, or the next k-quad's first (lane 0); the last k-quad's runs mask their
// last steps: a run ending near the block's last lane would step past the block (up to 60
// bytes), the buffer's end, or in a k-split pack the next part's first k-quad, which
// another thread writes.
void pack_quads_avx512(const uint8_t* src, const int64_t* qoff, int64_t nq, const Run* runs,
                       int64_t nruns, uint8_t* buf) {
    for (int64_t q = 0; q < nq; ++q) {
        const uint8_t* from = src + qoff[q];
        uint8_t* to = buf + q * kPos * kGroup;
        for (int64_t i = 0; i < nruns; ++i) {
            const uint8_t* a = from + runs[i].src * kGroup;
            uint8_t* b = to + runs[i].dst * kGroup;
            const int64_t bytes = runs[i].len * kGroup;
            int64_t x = 0;
            for (; x + 64 < bytes; x += 64) _mm512_storeu_si512(b + x, _mm512_loadu_si512(a + x));
            if (q + 1 < nq) {
                _mm512_storeu_si512(b + x, _mm512_loadu_si512(a + x));
            } else {
                const __mmask64 k = low_mask64(bytes - x);
                _mm512_mask_storeu_epi8(b + x, k, _mm512_maskz_loadu_epi8(k, a + x));
            }
        }
    }
}

void quad_planes_avx512(const uint8_t* const* rows4, const QuadPlanes& p, uint8_t* dst) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(p.flip));
    const __m512i zf = _mm512_set1_epi8(static_cast<char>(p.z ^ p.flip));  // z after the xor
    const __m512i zq = _mm512_set1_epi8(static_cast<char>(p.z));
    if (p.sw <= 2 && p.wph <= 32) {
        // Two phase rows of at most 32 quads at once, one transpose for both: at stride 2 a
        // row's two column phases (phase_pair_row), at stride 1 two rows (row_pair); panels 0-1
        // the first, 2-3 the second, each row's last panel masked (at stride 2 phase 0's
        // last row would run into phase 1's plane, written before it here). Stride 2 had
        // taken two loads, two `vpmovwb` and a transpose of 64 lanes a phase row
        // (bench/RESULTS.md, int8 kernels: quad planes).
        const bool two = p.wph > 16;
        const __mmask16 last = static_cast<__mmask16>(low_mask64(p.wph - (two ? 16 : 0)));
        const auto put = [&](uint8_t* out, __m512i lo, __m512i hi) {
            if (two) _mm512_storeu_si512(out, lo);
            _mm512_mask_storeu_epi32(out + (two ? 64 : 0), last, two ? hi : lo);
        };
        const int64_t step = p.sw == 1 ? 2 : 1;  // rows a pass
        for (int64_t a = 0; a < p.sh; ++a) {
            for (int64_t y = 0; y < p.hph; y += step) {
                const int64_t row = p.sh * y + a - p.pt;
                uint8_t* out = dst + (a * p.sw * p.plane + y * p.wph) * kGroup;
                // the second row: the next one's, or phase 1's
                uint8_t* out2 = out + (p.sw == 1 ? p.wph : p.plane) * kGroup;
                const bool has_next = y + 1 < p.hph;
                const int64_t next = has_next ? row + p.sh : p.h;  // p.h: outside, not stored
                __m512i v[kGroup];
                for (int64_t t = 0; t < kGroup; ++t) {
                    const uint8_t* src = rows4[t];
                    if (p.sw == 1) {
                        v[t] = row_pair(src, p, row, next, zf, flip);
                    } else {
                        v[t] = row >= 0 && row < p.h ? phase_pair_row(src + row * p.w, p, zf, flip)
                                                     : zq;
                    }
                }
                __m512i q0, q1, q2, q3;
                quad_panels(v[0], v[1], v[2], v[3], &q0, &q1, &q2, &q3);
                put(out, q0, q1);
                if (p.sw == 2 || has_next) put(out2, q2, q3);
            }
        }
        return;
    }
    for (int64_t a = 0; a < p.sh; ++a) {
        for (int64_t b = 0; b < p.sw; ++b) {
            uint8_t* plane = dst + (a * p.sw + b) * p.plane * kGroup;
            for (int64_t y = 0; y < p.hph; ++y) {
                const int64_t row = p.sh * y + a - p.pt;
                uint8_t* out = plane + y * p.wph * kGroup;
                // whole panels of 16 quads: the last one runs into the next row, written
                // after it
                for (int64_t x0 = 0; x0 < p.wph; x0 += kPos, out += kPos * kGroup) {
                    const int64_t left = p.wph - x0, panels = left < kPos ? (left + 15) / 16 : 4;
                    if (row < 0 || row >= p.h) {
                        for (int64_t i = 0; i < panels; ++i) _mm512_storeu_si512(out + 64 * i, zq);
                        continue;
                    }
                    const int64_t at = row * p.w;
                    store_quads(plane_row(rows4[0] + at, p, x0, b, zf, flip),
                                plane_row(rows4[1] + at, p, x0, b, zf, flip),
                                plane_row(rows4[2] + at, p, x0, b, zf, flip),
                                plane_row(rows4[3] + at, p, x0, b, zf, flip), out, panels);
                }
            }
        }
    }
}

// Unit stride (one phase): the plane read as one run of quads, 64 at a time (plane_lanes says
// which of each 64 are input). The input bytes of a channel fill, in order, the plane's
// positions that are not padding, so each 64 of them is one load of the next bytes spread
// onto those lanes (vpexpandb, AVX512-VBMI2) over the zero point, then the 4-row transpose.
// Row by row (quad_planes_avx512), each row's masks and pieces had been mostly scalar work
// (bench/RESULTS.md, int8 kernels: quad planes, `vpexpandb`).
// VBMI2 by a target attribute, not a unit of its own, to share this unit's transpose; callers
// check CpuFeatures::avx512vbmi2 (quad_input).
__attribute__((target("avx512vbmi2"))) void quad_planes_vbmi2(const uint8_t* const* rows4,
                                                             const QuadPlanes& p,
                                                             const uint64_t* lanes,
                                                             int64_t chunks, uint8_t* dst) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(p.flip));
    const __m512i zf = _mm512_set1_epi8(static_cast<char>(p.z ^ p.flip));  // z after the xor
    int64_t used = 0;  // input bytes of each row taken so far
    for (int64_t k = 0; k < chunks; ++k, dst += kPos * kGroup) {
        const __mmask64 in = lanes[k];
        const int64_t n = __builtin_popcountll(lanes[k]);
        const __mmask64 take = low_mask64(n);
        __m512i v[kGroup];
        for (int64_t t = 0; t < kGroup; ++t) {
            const __m512i raw = _mm512_maskz_loadu_epi8(take, rows4[t] + used);
            v[t] = _mm512_xor_si512(_mm512_mask_expand_epi8(zf, in, raw), flip);
        }
        store_quads(v[0], v[1], v[2], v[3], dst);
        used += n;
    }
}

// Each padded row in 64-byte steps: one masked load that starts pl bytes before the source
// row (masked-off lanes are never read) over the zero point, flipped, one store.
void pad_plane_avx512(const uint8_t* src, const PadPlane& p, uint8_t* dst) {
    const int64_t wp = p.pl + p.w + p.pr;
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(p.flip));
    const __m512i z = _mm512_set1_epi8(static_cast<char>(p.z));
    const __m512i fill = _mm512_xor_si512(z, flip);  // z once flipped with the row
    for (int64_t x = 0; x < p.pt * wp; x += 64) {
        _mm512_mask_storeu_epi8(dst + x, low_mask64(p.pt * wp - x), z);
    }
    for (int64_t y = 0; y < p.h; ++y) {
        const uint8_t* from = src + y * p.w - p.pl;  // padded column c reads from[c]
        uint8_t* row = dst + (p.pt + y) * wp;
        for (int64_t x = 0; x < wp; x += 64) {
            const int64_t lo = p.pl - x, hi = p.pl + p.w - x;  // data lanes [lo, hi)
            const __mmask64 k = low_mask64(hi > 0 ? hi : 0) & ~low_mask64(lo > 0 ? lo : 0);
            const __m512i v = _mm512_mask_loadu_epi8(fill, k, from + x);
            _mm512_mask_storeu_epi8(row + x, low_mask64(wp - x), _mm512_xor_si512(v, flip));
        }
    }
    uint8_t* bottom = dst + (p.pt + p.h) * wp;
    for (int64_t x = 0; x < p.pb * wp; x += 64) {
        _mm512_mask_storeu_epi8(bottom + x, low_mask64(p.pb * wp - x), z);
    }
}

}  // namespace int8
}  // namespace tianyuan
