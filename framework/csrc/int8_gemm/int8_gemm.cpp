// Weight packing, the generic int8 GEMM block, the family's one ISA choice (fill_int8_gemm)
// and the threaded driver.
#include "int8_gemm/int8_gemm.h"

#include <omp.h>

#include <cstring>
#include <stdexcept>

#include "runtime/cpu.h"
#include "runtime/dispatch.h"

namespace tianyuan {
namespace int8 {

void pack_weights(const int8_t* w, int64_t n, int64_t k, int8_t* packed, int32_t* row_sums) {
    const int64_t kp = round_up(k, kGroup);
    std::memset(packed, 0, static_cast<size_t>(packed_size(n, k)));
    for (int64_t j = 0; j < n; ++j) {
        int8_t* panel = packed + (j / kPanel) * kp * kPanel + (j % kPanel) * kGroup;
        int32_t sum = 0;
        for (int64_t q = 0; q < k; ++q) {
            panel[(q / kGroup) * kPanel * kGroup + q % kGroup] = w[j * k + q];
            sum += w[j * k + q];
        }
        row_sums[j] = sum;
    }
}

// Plain loops over the packed layout: the numpy gemm, 16 columns at a time.
void gemm_block_generic(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b,
                        int64_t kp, int64_t npanels, int32_t* c, int64_t ldc) {
    for (int64_t p = 0; p < npanels; ++p) {
        const int8_t* panel = b + p * kp * kPanel;
        for (int64_t i = 0; i < rows; ++i) {
            int32_t acc[kPanel] = {0};
            const uint8_t* row = a + i * lda;
            for (int64_t g = 0; g < kp / kGroup; ++g) {
                const int8_t* grp = panel + g * kPanel * kGroup;
                const uint8_t* av = row + g * kGroup;
                for (int64_t j = 0; j < kPanel; ++j) {
                    const int8_t* wv = grp + j * kGroup;
                    acc[j] += av[0] * wv[0] + av[1] * wv[1] + av[2] * wv[2] + av[3] * wv[3];
                }
            }
            std::memcpy(c + i * ldc + p * kPanel, acc, sizeof(acc));
        }
    }
}

// avxvnni sits below avx512, whose CPUs lack it; avx512 without VNNI shares the AVX2 block.
void fill_int8_gemm(GemmKernels& k, Isa isa) {
    k.block = isa >= Isa::vnni        ? gemm_block_vnni
              : isa == Isa::avxvnni   ? gemm_block_avxvnni
              : isa >= Isa::avx2      ? gemm_block_avx2
                                      : gemm_block_generic;
    k.requant_row = isa >= Isa::avx512 ? requant_row_avx512
                    : isa >= Isa::avx2 ? requant_row_avx2
                                       : requant_row_generic;
}

namespace {

Dispatch<GemmKernels> kernels(fill_int8_gemm);

// Tile sizes: 96 rows x 4 panels (64 columns); the 64 x Kp weight block stays in L2.
constexpr int64_t kTileRows = 96;
constexpr int64_t kTilePanels = 4;

}  // namespace

const GemmKernels& gemm_kernels() { return kernels(); }

void gemm_u8s8s32(const uint8_t* a, int64_t lda, int64_t m, const int8_t* packed, int64_t n,
                  int64_t k, int32_t* c, int64_t ldc) {
    const auto block = kernels().block;
    const int64_t kp = round_up(k, kGroup);
    const int64_t panels = round_up(n, kPanel) / kPanel;
    const int64_t row_tiles = (m + kTileRows - 1) / kTileRows;
    const int64_t col_tiles = (panels + kTilePanels - 1) / kTilePanels;
#pragma omp parallel for schedule(static) if (m * n * k > (1 << 18))
    for (int64_t t = 0; t < row_tiles * col_tiles; ++t) {
        const int64_t i0 = (t % row_tiles) * kTileRows;
        const int64_t p0 = (t / row_tiles) * kTilePanels;
        const int64_t rows = m - i0 < kTileRows ? m - i0 : kTileRows;
        const int64_t np = panels - p0 < kTilePanels ? panels - p0 : kTilePanels;
        block(a + i0 * lda, lda, rows, packed + p0 * kp * kPanel, kp, np, c + i0 * ldc + p0 * kPanel,
              ldc);
    }
}

double avx2_peak(int64_t steps) {
    if (best_isa() < Isa::avx2) {
        throw std::runtime_error("avx2_peak: this CPU (or its OS) offers no AVX2");
    }
    return peak_ops(avx2_peak_steps, steps, 6 * 16 * 2);
}

double avxvnni_peak(int64_t steps) {
    if (!isa_runs(Isa::avxvnni)) {
        throw std::runtime_error("avxvnni_peak: this CPU (or its OS) offers no AVX-VNNI");
    }
    return peak_ops(avxvnni_peak_steps, steps, 12 * 32 * 2);
}

double vnni_peak(int64_t steps) {
    if (best_isa() < Isa::vnni) {
        throw std::runtime_error("vnni_peak: this CPU (or its OS) offers no AVX512-VNNI");
    }
    return peak_ops(vnni_peak_steps, steps, 12 * 64 * 2);
}

}  // namespace int8
}  // namespace tianyuan
