// Weight gradient of the direct GEMM convolution (conv_gemm.h): the OpenMP driver, the
// generic kernels and the ISA dispatch.
//
// gw^T (K x Co) += X (K x P) times gy^T (P x Co), the reduction running over all positions
// of all images. Per group of images (its gy^T under kGyBudget bytes): the threads first
// gather the group's gy^T rows together (channel blocks of kNr, zero past Co); then each
// thread, owning a range of k, takes blocks of up to kKb rows k and, per chunk of kChunk
// panels (kNr positions each, any images), packs the panels straight from the image with
// the forward's packer and runs every kWgradMr x kWgradNr register block over the chunk.
// The thread's block of gw^T stays in L2 across the chunks and is transposed into gw once,
// after the last group.
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "conv_gemm.h"
#include "cpu.h"

namespace tianyuan {
namespace {

constexpr int64_t kNr = kConvGemmNr, kMr = kWgradMr, kCr = kWgradNr;
constexpr int64_t kKb = 12 * kMr;  // rows k per packed chunk (a multiple of kMr)
constexpr int64_t kChunk = 8;      // panels per chunk: gy^T rows of 256 positions
constexpr int64_t kParallelMacs = 1 << 20;
constexpr int64_t kGyBudget = int64_t(16) << 20;  // bytes of gathered gy^T per image group
static_assert(kCr == kNr, "gy^T rows are padded to whole register blocks");

void kernel_generic(const float* b, int64_t ldp, const int64_t* nvalid, int64_t npanels,
                    const float* at, float* acc, int64_t ldacc) {
    float sum[kMr][kCr] = {};
    for (int64_t pn = 0; pn < npanels; ++pn)
        for (int64_t l = 0; l < nvalid[pn]; ++l, at += kCr) {
            const float* bl = b + pn * ldp + l;
            for (int64_t r = 0; r < kMr; ++r) {
                const float br = bl[r * kNr];
                for (int64_t c = 0; c < kCr; ++c) sum[r][c] += br * at[c];
            }
        }
    for (int64_t r = 0; r < kMr; ++r)
        for (int64_t c = 0; c < kCr; ++c) acc[r * ldacc + c] += sum[r][c];
}

void gather_generic(const float* gy, int64_t co, int64_t positions, const int64_t* image,
                    const int64_t* p0, const int64_t* nvalid, int64_t npanels, float* at,
                    int64_t ldblock) {
    int64_t s = 0;
    for (int64_t i = 0; i < npanels; ++i) {
        const float* src = gy + image[i] * co * positions + p0[i];
        for (int64_t l = 0; l < nvalid[i]; ++l, ++s)
            for (int64_t c = 0; c < (co + kCr - 1) / kCr * kCr; ++c)
                at[c / kCr * ldblock + s * kCr + c % kCr] = c < co ? src[c * positions + l] : 0.0f;
    }
}

// Panels [c0, c0 + kChunk) of a group of images from image n0 (per_image panels each):
// their images, first positions and valid lanes; returns how many there are.
int64_t chunk_panels(int64_t c0, int64_t panels, int64_t per_image, int64_t positions,
                     int64_t n0, int64_t* image, int64_t* p0, int64_t* nvalid) {
    const int64_t np = panels - c0 < kChunk ? panels - c0 : kChunk;
    for (int64_t i = 0; i < np; ++i) {
        image[i] = n0 + (c0 + i) / per_image;
        p0[i] = (c0 + i) % per_image * kNr;
        nvalid[i] = positions - p0[i] < kNr ? positions - p0[i] : kNr;
    }
    return np;
}

float* aligned64(float* p) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<float*>((at + 63) & ~uintptr_t(63));
}

}  // namespace

void conv_gemm_weight_grad(const float* x, const float* gy, int64_t co, const Conv2dGeometry& g,
                           float* gw) {
    const bool avx512 = current_isa() >= Isa::avx512;
    const WgradKernel kernel = avx512 ? conv_wgrad_kernel_avx512() : kernel_generic;
    // the gather indexes channels with 32-bit offsets
    const WgradGather gather = avx512 && co * g.out_h() * g.out_w() < (int64_t(1) << 31)
                                   ? conv_wgrad_gather_avx512()
                                   : gather_generic;
    const ConvGemmPack pack = conv_gemm_pack();
    const int64_t positions = g.out_h() * g.out_w(), depth = g.c * g.kh * g.kw;
    const int64_t per_image = (positions + kNr - 1) / kNr;
    const int64_t co_padded = (co + kCr - 1) / kCr * kCr, plane = g.c * g.h * g.w;
    // images per group: the group's gy^T stays under kGyBudget (at least one image)
    int64_t group = kGyBudget / (positions * co_padded * int64_t(sizeof(float)));
    group = group < 1 ? 1 : (group > g.n ? g.n : group);
    const int64_t blocks = (depth + kMr - 1) / kMr, threads = omp_get_max_threads();
    const int64_t tasks = blocks < threads ? blocks : threads;
    const bool parallel = g.n * co * positions * depth >= kParallelMacs && threads > 1;
    std::vector<float> gyt(static_cast<size_t>(group * positions * co_padded));
    std::vector<std::vector<float>> acc(static_cast<size_t>(tasks));
#pragma omp parallel if (parallel)
    {
        std::vector<float> bstore(static_cast<size_t>(kChunk * kKb * kNr + 16));
        float* const bbuf = aligned64(bstore.data());  // the packer stores aligned rows
        for (int64_t n0 = 0; n0 < g.n; n0 += group) {
            const int64_t nb = g.n - n0 < group ? g.n - n0 : group, ldblock = nb * positions * kCr;
            const int64_t panels = nb * per_image;
#pragma omp for schedule(static)
            for (int64_t c0 = 0; c0 < panels; c0 += kChunk) {
                int64_t image[kChunk], p0[kChunk], nvalid[kChunk];
                const int64_t np = chunk_panels(c0, panels, per_image, positions, n0, image,
                                                p0, nvalid);
                gather(gy, co, positions, image, p0, nvalid, np,
                       gyt.data() + ((image[0] - n0) * positions + p0[0]) * kCr, ldblock);
            }  // implicit barrier: the group's gy^T is complete
#pragma omp for schedule(static)
            for (int64_t t = 0; t < tasks; ++t) {
                const int64_t k0 = blocks * t / tasks * kMr;
                const int64_t k1 = std::min(blocks * (t + 1) / tasks * kMr, depth);
                if (n0 == 0)
                    acc[t].assign(static_cast<size_t>((k1 - k0 + kMr - 1) / kMr * kMr * co_padded),
                                  0.0f);
                for (int64_t kb0 = k0; kb0 < k1; kb0 += kKb) {
                    const int64_t kb = k1 - kb0 < kKb ? k1 - kb0 : kKb;
                    const int64_t kbp = (kb + kMr - 1) / kMr * kMr, ldp = kbp * kNr;
                    for (int64_t c0 = 0; c0 < panels; c0 += kChunk) {
                        int64_t image[kChunk], p0[kChunk], nvalid[kChunk];
                        const int64_t np = chunk_panels(c0, panels, per_image, positions, n0,
                                                        image, p0, nvalid);
                        for (int64_t i = 0; i < np; ++i) {
                            ConvGemmSegment seg[kNr];
                            const int64_t nseg =
                                conv_gemm_segments(p0[i], nvalid[i], g.out_w(), seg);
                            float* panel = bbuf + i * ldp;
                            pack(x + image[i] * plane, g, seg, nseg, nvalid[i], kb0, kb, panel);
                            std::memset(panel + kb * kNr, 0, sizeof(float) * (kbp - kb) * kNr);
                        }
                        const float* at = gyt.data() + ((image[0] - n0) * positions + p0[0]) * kCr;
                        for (int64_t cb = 0; cb < co_padded; cb += kCr)
                            for (int64_t r0 = 0; r0 < kbp; r0 += kMr)
                                kernel(bbuf + r0 * kNr, ldp, nvalid, np, at + cb / kCr * ldblock,
                                       acc[t].data() + (kb0 - k0 + r0) * co_padded + cb,
                                       co_padded);
                    }
                }
                if (n0 + nb == g.n)
                    for (int64_t c = 0; c < co; ++c)
                        for (int64_t k = k0; k < k1; ++k)
                            gw[c * depth + k] = acc[t][(k - k0) * co_padded + c];
            }  // implicit barrier: gy^T is reused by the next group
        }
    }
}

}  // namespace tianyuan
