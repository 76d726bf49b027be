// int8 GEMM (u8 activations x s8 weights -> s32) on weights packed once, and the
// requantization that turns s32 accumulators into u8/s8. The numpy twin is
// framework/quantization/reference.py (gemm, requantize); every ISA path is bit-exact to it.
//
// Packed weight layout (ISA independent, so set_isa() after packing is fine):
//   W (N, K) s8 row-major  ->  ceil(N/16) panels of 16 output channels; a panel holds
//   Kp/4 groups (Kp = K rounded up to 4) of 16 channels x 4 consecutive k:
//     packed[p*Kp*16 + (k/4)*64 + (n%16)*4 + k%4] = W[p*16 + n%16][k]   (0 past N or K)
//   One 64-byte group is one zmm whose 32-bit lane j holds W[j][k..k+3]: the operand of
//   vpdpbusd against 4 broadcast activation bytes.
// Activations A (M, K) u8 row-major must have Kp readable bytes per row (lda >= Kp); the
// bytes past K are multiplied by zero weights. C (M, N) s32 needs ldc >= Np = 16*panels:
// kernels write whole panels. int8 (signed) activations are fed as u8 by flipping the
// sign bit (a + 128) with zero point z + 128: the product with the row-sum correction is
// the same integer.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/cpu.h"

namespace tianyuan {
namespace int8 {

constexpr int64_t kPanel = 16;  // output channels per packed panel
constexpr int64_t kGroup = 4;   // consecutive k per 32-bit lane

static inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
// The low min(max(n, 0), 64) bits set: the byte mask of the first n lanes of a 64-byte vector.
static inline uint64_t low_mask64(int64_t n) {
    return n >= 64 ? ~uint64_t{0} : n <= 0 ? 0 : (uint64_t{1} << n) - 1;
}
// 4 bytes at p as one 32-bit word (a k-quad to broadcast), whatever p's alignment.
static inline int32_t load4(const void* p) {
    int32_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
static inline int64_t packed_size(int64_t n, int64_t k) {
    return round_up(n, kPanel) * round_up(k, kGroup);
}

// W (N, K) s8 -> packed (packed_size(N, K) bytes) and row sums (N,) over K.
void pack_weights(const int8_t* w, int64_t n, int64_t k, int8_t* packed, int32_t* row_sums);

// Raw C[i][p*16 + j] = sum_k A[i][k] * W[p*16 + j][k] for i < rows and panels p < npanels.
// `b` points at the first panel, kp = padded K. One per ISA; no threading inside.
void gemm_block_generic(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b,
                        int64_t kp, int64_t npanels, int32_t* c, int64_t ldc);
void gemm_block_avx2(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b,
                     int64_t kp, int64_t npanels, int32_t* c, int64_t ldc);
void gemm_block_vnni(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b,
                     int64_t kp, int64_t npanels, int32_t* c, int64_t ldc);
// AVX-VNNI (in int8_cgemm_avxvnni.cpp): vpdpbusd on ymm, 6 rows x 16 channels a tile.
void gemm_block_avxvnni(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b,
                        int64_t kp, int64_t npanels, int32_t* c, int64_t ldc);

// Register-only vpdpbusd throughput: `steps` x 12 independent instructions on one thread;
// returns a checksum so that the loop is kept. vnni_peak() runs it on every OpenMP thread
// and returns int8 operations per second (2 per multiply-add), the peak the benchmarks
// quote; it throws std::runtime_error where the CPU or the OS lacks AVX512-VNNI.
int64_t vnni_peak_steps(int64_t steps);
double vnni_peak(int64_t steps);
// The same for the exact AVX2 form of the product (vpmaddwd + vpaddd, 6 of each a step, 16
// multiply-adds each): the ceiling of the AVX2 convolution tile, whose inner step is that
// pair plus the activations' split. avx2_peak throws std::runtime_error without AVX2.
int64_t avx2_peak_steps(int64_t steps);
double avx2_peak(int64_t steps);
// And for AVX-VNNI's vpdpbusd on ymm (12 a step, 32 multiply-adds each): the ceiling of its
// convolution tile (int8_cgemm_avxvnni.cpp); avxvnni_peak throws without AVX-VNNI.
int64_t avxvnni_peak_steps(int64_t steps);
double avxvnni_peak(int64_t steps);

// Raw C (M, Np) = A (M, K) x packed W^T, parallel (OpenMP), through the family's table.
void gemm_u8s8s32(const uint8_t* a, int64_t lda, int64_t m, const int8_t* packed, int64_t n,
                  int64_t k, int32_t* c, int64_t ldc);

// Requantization parameters; the arrays have one entry per column (step 1) or a single
// entry for all (step 0). lo/hi are the output bounds with relu already folded in (lo = zp).
struct Requant {
    const int32_t* bias;
    const int32_t* multiplier;
    const int32_t* shift;  // in [1, 62]
    int64_t step;
    int32_t zero_point;
    int32_t lo;
    int32_t hi;
    bool out_signed;  // out holds int8 (else uint8)
};

// One row: out[j] = clamp(((acc[j] + bias[j]) * m[j] + 2^(s[j]-1)) >> s[j], lo-zp, hi-zp) + zp,
// parameter index j * r.step.
void requant_row_generic(const int32_t* acc, int64_t n, const Requant& r, uint8_t* out);
void requant_row_avx2(const int32_t* acc, int64_t n, const Requant& r, uint8_t* out);
void requant_row_avx512(const int32_t* acc, int64_t n, const Requant& r, uint8_t* out);

// The family's kernels, one table chosen once per ISA (runtime/dispatch.h) by
// fill_int8_gemm, which int8_deconv's fill function reads too: a GEMM block and a
// requantization row.
struct GemmKernels {
    void (*block)(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b, int64_t kp,
                  int64_t npanels, int32_t* c, int64_t ldc);
    void (*requant_row)(const int32_t* acc, int64_t n, const Requant& r, uint8_t* out);
};
void fill_int8_gemm(GemmKernels& k, Isa isa);
const GemmKernels& gemm_kernels();

// acc (M, N) with row stride lda -> out (M, N) with row stride ldo; parameters per column
// (r.step == 1) or, when per_row, parameter i for row i. Parallel, through the table.
void requantize(const int32_t* acc, int64_t lda, int64_t m, int64_t n, const Requant& r,
                bool per_row, uint8_t* out, int64_t ldo);

// Scalar twin of the formula, shared by the generic path and SIMD tails. `static` so that
// each ISA translation unit keeps its own copy (no COMDAT the linker could mix up).
static inline uint8_t requant_one(int32_t acc, int32_t bias, int32_t mult, int32_t shift,
                                  const Requant& r) {
    // acc + bias wraps like the SIMD add; the reference requires it to fit int32.
    const int32_t t =
        static_cast<int32_t>(static_cast<uint32_t>(acc) + static_cast<uint32_t>(bias));
    const int64_t p = static_cast<int64_t>(t) * mult + (int64_t{1} << (shift - 1));
    int64_t y = p >> shift;
    const int64_t lo = r.lo - r.zero_point;
    const int64_t hi = r.hi - r.zero_point;
    y = y < lo ? lo : (y > hi ? hi : y);
    return static_cast<uint8_t>(static_cast<int32_t>(y) + r.zero_point);
}

}  // namespace int8
}  // namespace tianyuan
