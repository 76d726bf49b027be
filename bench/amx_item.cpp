// Where an AMX int8 convolution's time goes, stage by stage, on a host whose OS grants AMX:
// the work items' tile loop alone (amx_item_tiles over every item), the loop with each
// item's requantization (amx_requant, to a staging buffer), and the whole convolution
// (conv2d_amx: the NHWC planes, the loop, the requantization stored into NCHW rows).
// Differences between them are the stages' costs. Built from framework/csrc by amx_item.sh;
// ResNet-18's 3x3 layers at batch 16 unless given `C HW N` triples. Times are medians over
// alternating rounds (the shared hosts' speed drifts between stretches), per item (32
// positions x 32 channels) and thread.
//
//   sh bench/amx_item.sh [C HW N ...]       # OMP_NUM_THREADS as the environment says
//
// AMX_ITEM_EMULATE=1 runs the emulated tiles instead (any CPU with AVX-512 VBMI): a check of
// this program, whose times mean nothing.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "runtime/cpu.h"
#include "int8_amx/int8_amx.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"

using namespace tianyuan;
using namespace tianyuan::int8;

namespace {

// A buffer at a 64-byte boundary, as the library keeps planes and packed weights.
template <typename T>
struct Aligned {
    std::vector<T> bytes;
    T* data;
    explicit Aligned(int64_t n) : bytes(static_cast<size_t>(n + 64)) {
        data = bytes.data() + (-reinterpret_cast<uintptr_t>(bytes.data()) & 63) / sizeof(T);
    }
};

double seconds(void (*fn)(void*), void* arg) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(arg);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Layer {
    int64_t c, hw, n, wph, image, vblocks, oblocks, chunks, items;
    std::vector<int64_t> soff;  // the item's steps (tap, chunk): bytes from a block's first
    Aligned<uint8_t> planes, x, out;
    Aligned<int8_t> w;
    std::vector<int32_t> bias, mult, shift;
    Requant r{};
    ConvGeom g{};
    bool requant = false;  // loop(): with amx_requant per item
    bool emulate = false;   // the emulated tiles (a check of this program only)

    Layer(int64_t c_, int64_t hw_, int64_t n_)
        : c(c_), hw(hw_), n(n_), wph(hw_ + 2), image(wph * wph + kAmxPos),
          vblocks(((hw_ - 1) * wph + hw_ + kAmxPos - 1) / kAmxPos), oblocks(c_ / kAmxOc),
          chunks(c_ / kAmxK), items(n_ * vblocks * oblocks), soff(9 * chunks),
          planes(n_ * image * c_),
          x(n_ * c_ * hw_ * hw_), out(n_ * c_ * hw_ * hw_), w(c_ * c_ * 9), bias(c_, 100),
          mult(c_, 1 << 30), shift(c_, 38) {
        uint32_t s = 12345;
        for (int64_t i = 0; i < n * image * c; ++i) planes.data[i] = (s = s * 1103515245u + 1);
        for (int64_t i = 0; i < n * c * hw * hw; ++i) x.data[i] = (s = s * 1103515245u + 1) >> 8;
        for (int64_t i = 0; i < c * c * 9; ++i) w.data[i] = (s = s * 1103515245u + 1) >> 16;
        for (int64_t t = 0; t < 9; ++t)
            for (int64_t cc = 0; cc < chunks; ++cc)
                soff[t * chunks + cc] = (t / 3 * wph + t % 3) * c + cc * kAmxK;
        r = Requant{nullptr, mult.data(), shift.data(), 1, 3, 0, 255, false};  // zp 3, u8
        g = ConvGeom{n, c, hw, hw, c, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, hw, hw};
    }
};

// Every item's tile loop (and requantization), channel blocks outermost, each thread a
// contiguous share.
void loop(void* arg) {
    Layer& L = *static_cast<Layer*>(arg);
#pragma omp parallel
    {
        if (!L.emulate) amx_tiles_begin();
        const auto item = L.emulate ? amx_item_emulated : amx_item_tiles;
        const auto store = L.emulate ? amx_store_emulated : amx_store_tiles;
        alignas(64) int32_t acc[kAmxPos * kAmxOc];
        alignas(64) uint8_t stage[kAmxOc * kAmxPos];
        AmxWindow win[2];  // the whole item to stage, channel rows of kAmxPos
        for (int h = 0; h < 2; ++h) amx_window(16 * h, kAmxPos, kAmxPos, kAmxPos, win[h]);
#pragma omp for schedule(static)
        for (int64_t it = 0; it < L.items; ++it) {
            const int64_t ob = it / (L.n * L.vblocks), pos = it % (L.n * L.vblocks);
            const int64_t img = pos / L.vblocks, v0 = pos % L.vblocks * kAmxPos;
            const uint8_t* a = L.planes.data + (img * L.image + v0) * L.c;
            item(a, a + 16 * L.c, L.c, L.soff.data(), 9 * L.chunks,
                 L.w.data + ob * 9 * L.chunks * 2048, nullptr);
            store(acc);
            if (L.requant) {
                const RowParams q{L.bias.data() + ob * kAmxOc, L.mult.data() + ob * kAmxOc,
                                  L.shift.data() + ob * kAmxOc};
                amx_requant(AmxPending{acc, q, &L.r, stage, kAmxPos, win});
            }
        }
        if (!L.emulate) amx_tiles_end();
    }
}

void whole(void* arg) {
    Layer& L = *static_cast<Layer*>(arg);
    conv2d_amx(L.x.data, 0, 128, L.g, L.w.data, L.bias.data(), L.r, L.out.data, L.emulate);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const char* env = std::getenv("AMX_ITEM_EMULATE");
    const bool emulate = env && std::atoi(env);
    if (!emulate && !cpu_features().os_amx) {
        std::fprintf(stderr, "amx_item: this CPU (or its OS) grants no AMX tiles\n");
        return 1;
    }
    std::vector<int64_t> shapes = {64, 56, 16, 128, 28, 16, 256, 14, 16, 512, 7, 16};
    if (argc > 1) {
        if ((argc - 1) % 3) {
            std::fprintf(stderr, "amx_item: give C HW N triples (C a multiple of 64)\n");
            return 2;
        }
        shapes.clear();
        for (int i = 1; i < argc; ++i) shapes.push_back(std::atoll(argv[i]));
    }
    const int threads = omp_get_max_threads();
    if (emulate) {
        std::printf("%d threads, EMULATED tiles (the times mean nothing)\n", threads);
    } else {
        std::printf("%d threads; AMX peak %.1f TOP/s\n", threads, amx_peak(200000) / 1e12);
    }
    std::printf("%5s %4s %4s %8s %12s %12s %12s  (ns per item and thread)\n", "C", "HW", "N",
                "items", "loop", "+requant", "whole conv");
    for (size_t i = 0; i + 2 < shapes.size(); i += 3) {
        if (shapes[i] % kAmxK) {
            std::fprintf(stderr, "amx_item: C %lld is not a multiple of 64\n",
                         static_cast<long long>(shapes[i]));
            return 2;
        }
        Layer L(shapes[i], shapes[i + 1], shapes[i + 2]);
        L.emulate = emulate;
        std::vector<double> t[3];
        for (int round = 0; round < 7; ++round) {
            for (int stage = 0; stage < 3; ++stage) {
                L.requant = stage == 1;
                t[stage].push_back(seconds(stage == 2 ? whole : loop, &L));
            }
        }
        const double per = 1e9 * threads / static_cast<double>(L.items);
        std::printf("%5lld %4lld %4lld %8lld %12.1f %12.1f %12.1f\n",
                    static_cast<long long>(L.c), static_cast<long long>(L.hw),
                    static_cast<long long>(L.n), static_cast<long long>(L.items),
                    per * median(t[0]), per * median(t[1]), per * median(t[2]));
    }
    return 0;
}
