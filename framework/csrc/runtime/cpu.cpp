#include "runtime/cpu.h"

#include <cpuid.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tianyuan {
namespace {

uint64_t read_xcr0() {
    uint32_t eax = 0;
    uint32_t edx = 0;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (static_cast<uint64_t>(edx) << 32) | eax;
}

// Linux hands out AMX tile data only on request (arch_prctl ARCH_REQ_XCOMP_PERM).
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
    const long ARCH_REQ_XCOMP_PERM = 0x1023;
    const long XFEATURE_XTILEDATA = 18;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}

CpuFeatures detect() {
    CpuFeatures f;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1;
    f.fma = (c >> 12) & 1;
    const bool avx = (c >> 28) & 1;
    if (osxsave) {
        const uint64_t xcr0 = read_xcr0();
        f.os_avx = avx && (xcr0 & 0x6) == 0x6;
        f.os_avx512 = f.os_avx && (xcr0 & 0xE0) == 0xE0;
    }
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    f.avx2 = f.os_avx && ((b >> 5) & 1);
    f.fma = f.fma && f.os_avx;
    f.avx512f = f.os_avx512 && ((b >> 16) & 1);
    f.avx512dq = f.avx512f && ((b >> 17) & 1);
    f.avx512bw = f.avx512f && ((b >> 30) & 1);
    f.avx512vl = f.avx512f && ((b >> 31) & 1);
    f.avx512vnni = f.avx512f && ((c >> 11) & 1);
    f.avx512vbmi = f.avx512f && ((c >> 1) & 1);
    f.avx512vbmi2 = f.avx512f && ((c >> 6) & 1);
    f.amx_tile = (d >> 24) & 1;
    f.amx_int8 = (d >> 25) & 1;
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;  // leaf 7 sub-leaf 1: EAX bit 4, AVX-VNNI
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avxvnni = f.avx2 && ((a1 >> 4) & 1);
    if (f.amx_tile && f.amx_int8 && f.avx512vnni && f.avx512vbmi && request_amx_permission()) {
        f.os_amx = (read_xcr0() & 0x60000) == 0x60000;
    }
    return f;
}

Isa detect_best() {
    const CpuFeatures& f = cpu_features();
    const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma;
    if (avx512 && f.avx512vnni && f.os_amx) return Isa::amx;
    if (avx512 && f.avx512vnni) return Isa::vnni;
    if (avx512) return Isa::avx512;
    if (f.avx2 && f.fma && f.avxvnni) return Isa::avxvnni;
    if (f.avx2 && f.fma) return Isa::avx2;
    return Isa::generic;
}

Isa g_isa = Isa::generic;
bool g_isa_set = false;

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = detect();
    return features;
}

Isa best_isa() {
    static const Isa best = detect_best();
    return best;
}

Isa current_isa() {
    if (!g_isa_set) {
        g_isa = best_isa();
        g_isa_set = true;
    }
    return g_isa;
}

bool isa_runs(Isa isa) {
    if (isa == Isa::avxvnni) return cpu_features().avxvnni && best_isa() >= Isa::avx2;
    return static_cast<int>(isa) <= static_cast<int>(best_isa());
}

std::atomic<uint64_t>& isa_generation() {
    static std::atomic<uint64_t> generation{0};
    return generation;
}

bool set_isa(Isa isa) {
    if (!isa_runs(isa)) return false;
    g_isa = isa;
    g_isa_set = true;
    isa_generation().fetch_add(1, std::memory_order_acq_rel);  // dispatch tables refill
    return true;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::generic: return "generic";
        case Isa::avx2: return "avx2";
        case Isa::avxvnni: return "avxvnni";
        case Isa::avx512: return "avx512";
        case Isa::vnni: return "vnni";
        case Isa::amx: return "amx";
    }
    return "unknown";
}

double peak_ops(int64_t (*loop)(int64_t), int64_t steps, double ops_per_step) {
    if (steps < 1 || steps > kPeakStepsMax) {
        throw std::invalid_argument("peak: steps must be in [1, 2^31], got " +
                                    std::to_string(steps));
    }
    std::atomic<int64_t> sink{0};
    int threads = 1;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    {
#pragma omp single nowait
        threads = omp_get_num_threads();
        sink += loop(steps);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sink.load() == 42) return 0.0;  // never: keeps the checksum (and the loop) alive
    return static_cast<double>(threads) * static_cast<double>(steps) * ops_per_step / seconds;
}

}  // namespace tianyuan
