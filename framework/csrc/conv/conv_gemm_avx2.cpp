// AVX2 register block for the direct GEMM convolution (conv_gemm.h), for CPUs without
// AVX-512. The kMr x 32 block of the AVX-512 kernel would take 48 ymm accumulators, so it
// runs as sub-blocks of up to 6 rows by 16 lanes (12 accumulators, two vector loads of
// positions and one broadcast weight a row per reduction row: the classic 6 x 16 AVX2 SGEMM
// block), each over the whole chunk of kc rows: lane half by lane half, and the rows in passes
// of 6. Every output is still summed in the order of k with fused multiply-adds, and scale
// and shift are one fused multiply-add, as in the AVX-512 kernel.
// A sub-block whose 16 lanes lie in one output run reads and writes its rows in place;
// one at a run's edge (the last panel of an image, or a panel that straddles images) goes
// through a 6 x 16 staging tile. A pointwise input read in place (ldb != kNr) is read with
// masked loads past its last lane. Also here: the AVX2 panel packer (masked loads planned
// once per kernel tap) and weight packer (8 x 8 register transposes).
#include <immintrin.h>

#include <cstdint>

#include "conv/conv_gemm.h"
#include "conv/conv_gemm_pack_impl.h"
#include "runtime/fma_peak_impl.h"
#include "conv/transpose_avx2.h"

namespace tianyuan {
namespace {

constexpr int64_t kNr = kConvGemmNr, kMr = kConvGemmMr;
constexpr int kSubMr = 6, kSubNr = 16;

// The mask of lanes [lo, hi) of the 8-lane vector that starts at lane `at`.
inline __m256i lane_mask(int64_t at, int64_t lo, int64_t hi) {
    const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(at)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i ge = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(static_cast<int>(lo) - 1));
    const __m256i lt = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(hi)), idx);
    return _mm256_and_si256(ge, lt);
}

// Rows [0, MR) x 16 lanes: c (row stride ldc) (+)= a (kc rows of kMr weights, this pass's
// first at a[0]) x b (kc rows of 16 lanes, row stride ldb; lanes outside `bm0`/`bm1` are
// not read when MASKED), then the epilogue when `last`.
template <int MR, bool MASKED>
void sub_block(const float* a, const float* b, int64_t ldb, int64_t kc, float* c, int64_t ldc,
               bool first, bool last, const float* scale, const float* shift, int act,
               __m256i bm0, __m256i bm1) {
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
        acc[r][0] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * ldc);
        acc[r][1] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * ldc + 8);
    }
    for (int64_t k = 0; k < kc; ++k) {
        const float* bk = b + k * ldb;
        const __m256 b0 = MASKED ? _mm256_maskload_ps(bk, bm0) : _mm256_loadu_ps(bk);
        const __m256 b1 = MASKED ? _mm256_maskload_ps(bk + 8, bm1) : _mm256_loadu_ps(bk + 8);
#pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
            const __m256 ar = _mm256_broadcast_ss(a + k * kMr + r);
            acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
        }
    }
    const __m256 zero = _mm256_setzero_ps(), six = _mm256_set1_ps(6.0f);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            __m256 v = acc[r][h];
            if (last) {
                if (scale && shift)
                    v = _mm256_fmadd_ps(v, _mm256_set1_ps(scale[r]), _mm256_set1_ps(shift[r]));
                else if (scale)
                    v = _mm256_mul_ps(v, _mm256_set1_ps(scale[r]));
                else if (shift)
                    v = _mm256_add_ps(v, _mm256_set1_ps(shift[r]));
                if (act >= 1) v = _mm256_max_ps(v, zero);
                if (act == 2) v = _mm256_min_ps(v, six);
            }
            _mm256_storeu_ps(c + r * ldc + 8 * h, v);
        }
    }
}

using Sub = void (*)(const float*, const float*, int64_t, int64_t, float*, int64_t, bool, bool,
                     const float*, const float*, int, __m256i, __m256i);
constexpr Sub kSubs[2][kSubMr] = {
    {sub_block<1, false>, sub_block<2, false>, sub_block<3, false>, sub_block<4, false>,
     sub_block<5, false>, sub_block<6, false>},
    {sub_block<1, true>, sub_block<2, true>, sub_block<3, true>, sub_block<4, true>,
     sub_block<5, true>, sub_block<6, true>}};

void kernel(const float* a, const float* b, int64_t ldb, int64_t kc, const ConvGemmOut& out,
            int64_t row0, int64_t mr, bool first, bool last, const float* scale,
            const float* shift, int act) {
    const int64_t nvalid = out.hi[out.count - 1], ldc = out.ldc;
    // a packed panel's lanes past nvalid are zero, so only a pointwise input read in place
    // needs the masks (its last panel of an image)
    const bool masked = ldb != kNr && nvalid < kNr;
    for (int64_t h0 = 0; h0 < nvalid; h0 += kSubNr) {
        const __m256i bm0 = lane_mask(h0, 0, nvalid), bm1 = lane_mask(h0 + 8, 0, nvalid);
        // the run that holds all 16 lanes, if one does
        int64_t whole = -1;
        for (int64_t i = 0; i < out.count; ++i)
            if (out.lo[i] <= h0 && out.hi[i] >= h0 + kSubNr) whole = i;
        for (int64_t r0 = 0; r0 < mr; r0 += kSubMr) {
            const int64_t rows = mr - r0 < kSubMr ? mr - r0 : kSubMr;
            const Sub fn = kSubs[masked][rows - 1];
            const float* sc = scale ? scale + r0 : nullptr;
            const float* sh = shift ? shift + r0 : nullptr;
            if (whole >= 0) {
                fn(a + r0, b + h0, ldb, kc, out.base[whole] + (row0 + r0) * ldc + h0, ldc,
                   first, last, sc, sh, act, bm0, bm1);
                continue;
            }
            alignas(32) float stage[kSubMr * kSubNr] = {};
            for (int64_t i = 0; !first && i < out.count; ++i) {
                const int64_t lo = out.lo[i] > h0 ? out.lo[i] : h0;
                const int64_t hi = out.hi[i] < h0 + kSubNr ? out.hi[i] : h0 + kSubNr;
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t l = lo; l < hi; ++l)
                        stage[r * kSubNr + l - h0] = out.base[i][(row0 + r0 + r) * ldc + l];
            }
            fn(a + r0, b + h0, ldb, kc, stage, kSubNr, first, last, sc, sh, act, bm0, bm1);
            for (int64_t i = 0; i < out.count; ++i) {
                const int64_t lo = out.lo[i] > h0 ? out.lo[i] : h0;
                const int64_t hi = out.hi[i] < h0 + kSubNr ? out.hi[i] : h0 + kSubNr;
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t l = lo; l < hi; ++l)
                        out.base[i][(row0 + r0 + r) * ldc + l] = stage[r * kSubNr + l - h0];
            }
        }
    }
}

// 8 bits -> an 8-lane mask (lane i: bit i).
inline __m256i bits8(uint64_t b) {
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(
        _mm256_and_si256(_mm256_set1_epi32(static_cast<int>(b & 0xFF)), sel), sel);
}

// One panel row from one channel's plane. The segments' lanes are disjoint and a masked load
// reads zeros elsewhere (and never faults on a masked-off element, so lane 0's address may
// lie outside the plane): the row is the or of one masked load per segment and vector.
// Stride 2 loads the 16 columns of 8 lanes and keeps the even ones; other strides gather.
inline void pack_row(const float* plane, const TapReads& t, int64_t sw, float* dst) {
    __m256 row[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32(static_cast<int>(sw)));
    for (int64_t s = 0; s < t.count; ++s) {
        const float* at = plane + t.offset[s];
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
            const uint32_t lanes = t.lanes[s] >> (8 * v) & 0xFF;
            if (!lanes) continue;
            __m256 x;
            if (sw == 1) {
                x = _mm256_maskload_ps(at + 8 * v, bits8(lanes));
            } else if (sw == 2) {
                const uint64_t span = t.span[s] >> (16 * v);
                const __m256 a = _mm256_maskload_ps(at + 16 * v, bits8(span));
                const __m256 b = _mm256_maskload_ps(at + 16 * v + 8, bits8(span >> 8));
                const __m256 e = _mm256_shuffle_ps(a, b, 0x88);  // a0 a2 b0 b2 | a4 a6 b4 b6
                x = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
            } else {
                x = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), at + 8 * v * sw, idx,
                                             _mm256_castsi256_ps(bits8(lanes)), 4);
            }
            row[v] = _mm256_or_ps(row[v], x);
        }
    }
    for (int v = 0; v < 4; ++v) _mm256_storeu_ps(dst + 8 * v, row[v]);
}

void pack(const float* xn, const Conv2dGeometry& g, const ConvGemmSegment* seg, int64_t nseg,
          int64_t /*nvalid: lanes outside every segment stay zero*/, int64_t k0, int64_t kc,
          float* panel) {
    pack_panel<pack_row>(xn, g, seg, nseg, k0, kc, panel);
}

// dst[k][r] = w[cb * 12 + r][k]: 8 columns a step, rows 0-7 and 8-11 transposed in registers
// (the scalar loop had run at a third of memory speed on AVX-512 hosts).
void pack_weights(const float* w, int64_t co, int64_t depth, int64_t cb, float* dst) {
    const int64_t r0 = cb * kMr, rows = co - r0 < kMr ? co - r0 : kMr;
    int64_t k0 = 0;
    for (; k0 + 8 <= depth; k0 += 8) {
        __m256 a[8], b[8];
        for (int i = 0; i < 8; ++i) {
            a[i] = i < rows ? _mm256_loadu_ps(w + (r0 + i) * depth + k0) : _mm256_setzero_ps();
            b[i] = i < 4 && 8 + i < rows ? _mm256_loadu_ps(w + (r0 + 8 + i) * depth + k0)
                                         : _mm256_setzero_ps();
        }
        transpose8(a);
        transpose8(b);
        for (int j = 0; j < 8; ++j) {
            _mm256_storeu_ps(dst + (k0 + j) * kMr, a[j]);
            _mm_storeu_ps(dst + (k0 + j) * kMr + 8, _mm256_castps256_ps128(b[j]));
        }
    }
    for (; k0 < depth; ++k0)
        for (int64_t r = 0; r < kMr; ++r)
            dst[k0 * kMr + r] = r < rows ? w[(r0 + r) * depth + k0] : 0.0f;
}

}  // namespace

ConvGemmKernel conv_gemm_kernel_avx2() { return kernel; }
ConvGemmPack conv_gemm_pack_avx2() { return pack; }
ConvGemmPackWeights conv_gemm_pack_weights_avx2() { return pack_weights; }

int64_t fma_peak_steps_avx2(int64_t steps) {
    return fma_chains(steps, _mm256_set1_ps(static_cast<float>(steps & 7)), _mm256_set1_ps(1.0f),
                      _mm256_set1_ps(0.0f));
}

}  // namespace tianyuan
