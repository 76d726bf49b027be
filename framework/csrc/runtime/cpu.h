// CPU feature detection and the ISA level chosen once for every kernel family.
#pragma once

#include <cstdint>

namespace tianyuan {

// Levels, each running the kernels of those below it, but avxvnni: AVX2 with the VEX
// encoding of vpdpbusd (Intel's client cores since Alder Lake, E-core Xeons, AMD Zen 5),
// which AVX-512 CPUs may lack (Skylake-X, Zen 4), so an AVX-512 level does not imply it.
enum class Isa : int { generic = 0, avx2 = 1, avxvnni = 2, avx512 = 3, vnni = 4, amx = 5 };

struct CpuFeatures {
    bool avx2 = false;
    bool fma = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512dq = false;
    bool avx512vnni = false;
    bool avx512vbmi = false;  // byte permutes (the AMX store's transpose)
    bool avx512vbmi2 = false;  // byte expand (int8 quad planes at unit stride)
    bool avxvnni = false;     // vpdpbusd on ymm, VEX-encoded
    bool amx_tile = false;
    bool amx_int8 = false;
    bool os_avx = false;     // XCR0 grants YMM state
    bool os_avx512 = false;  // XCR0 grants opmask + ZMM state
    bool os_amx = false;     // the kernel granted this process AMX tile data
};

const CpuFeatures& cpu_features();
// Highest ISA level this CPU and OS can run.
Isa best_isa();
// Level the kernels dispatch on; starts at best_isa().
Isa current_isa();
// Whether this CPU and OS can run `isa`'s kernels.
bool isa_runs(Isa isa);
// Returns false (and changes nothing) when the machine cannot run `isa`.
bool set_isa(Isa isa);
const char* isa_name(Isa isa);
// Operations per second of `loop(steps)` run on every OpenMP thread at once, ops_per_step
// each step: the shared timing of the register-only peak loops (vnni_peak, fma_peak, ...);
// `loop` returns a checksum that keeps it from being optimised away. steps in [1,
// kPeakStepsMax] (seconds at the most), else std::invalid_argument.
constexpr int64_t kPeakStepsMax = int64_t{1} << 31;
double peak_ops(int64_t (*loop)(int64_t), int64_t steps, double ops_per_step);

}  // namespace tianyuan
