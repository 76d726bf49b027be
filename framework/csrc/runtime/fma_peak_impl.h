// The register-only FMA loop of fma_peak (conv_gemm.h), shared by the AVX2 and AVX-512
// translation units, each instantiating it on its own vector type. Included only by ISA
// units; everything is in an anonymous namespace (no COMDAT the linker could pick for a unit
// built with other flags).
#pragma once

#include <cstdint>
#include <cstring>

namespace tianyuan {
namespace {

// `steps` x 12 vfmadd231ps on V (__m256 or __m512): 12 accumulators cover the FMA latency
// (4 cycles) on 2 ports; inline assembly, as the compiler would merge identical intrinsic
// chains. c += x * w with x = 1, w = 0: the values stay normal. Returns a checksum.
template <typename V>
int64_t fma_chains(int64_t steps, V seed, V x, V w) {
    V c0 = seed, c1 = seed, c2 = seed, c3 = seed, c4 = seed, c5 = seed, c6 = seed, c7 = seed,
      c8 = seed, c9 = seed, c10 = seed, c11 = seed;
    for (int64_t s = 0; s < steps; ++s) {
        __asm__ volatile(
            "vfmadd231ps %[w], %[x], %[c0]\n\tvfmadd231ps %[w], %[x], %[c1]\n\t"
            "vfmadd231ps %[w], %[x], %[c2]\n\tvfmadd231ps %[w], %[x], %[c3]\n\t"
            "vfmadd231ps %[w], %[x], %[c4]\n\tvfmadd231ps %[w], %[x], %[c5]\n\t"
            "vfmadd231ps %[w], %[x], %[c6]\n\tvfmadd231ps %[w], %[x], %[c7]\n\t"
            "vfmadd231ps %[w], %[x], %[c8]\n\tvfmadd231ps %[w], %[x], %[c9]\n\t"
            "vfmadd231ps %[w], %[x], %[c10]\n\tvfmadd231ps %[w], %[x], %[c11]"
            : [c0] "+v"(c0), [c1] "+v"(c1), [c2] "+v"(c2), [c3] "+v"(c3), [c4] "+v"(c4),
              [c5] "+v"(c5), [c6] "+v"(c6), [c7] "+v"(c7), [c8] "+v"(c8), [c9] "+v"(c9),
              [c10] "+v"(c10), [c11] "+v"(c11)
            : [x] "v"(x), [w] "v"(w));
    }
    const V sum = ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)) + ((c8 + c9) + (c10 + c11));
    float lanes[sizeof(V) / sizeof(float)];
    std::memcpy(lanes, &sum, sizeof(sum));
    float total = 0.0f;
    for (float v : lanes) total += v;
    return static_cast<int64_t>(total);
}

}  // namespace
}  // namespace tianyuan
