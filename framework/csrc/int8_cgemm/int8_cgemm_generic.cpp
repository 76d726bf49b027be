// int8 convolution (layouts in int8_cgemm.h), the parts every ISA shares: the weight packer
// (run once, at quantize() time), the generic activation pack, pad and register tile (the
// reference the SIMD twins in int8_cgemm_avx2.cpp, int8_pack_avx2.cpp, int8_cgemm_avx512.cpp
// and int8_cgemm_vnni.cpp match bit for bit), the tile's reader of the family's table
// (int8_conv_kernels.h), and the per-thread scratch
// (here, in a generic unit, because ISA units must not instantiate STL templates). The driver
// is int8_cgemm.cpp.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_conv/int8_conv_kernels.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

void pack_conv_weights(const int8_t* w, int64_t oc, int64_t cg, int64_t taps, int8_t* packed,
                       int32_t* row_sums) {
    const int64_t k = cg * taps, kp = round_up(k, kGroup);
    std::memset(packed, 0, static_cast<size_t>(oc * kp));
    for (int64_t j = 0; j < oc; ++j) {
        const int64_t b = j / kOcBlock, r = j % kOcBlock;
        const int64_t rb = oc - b * kOcBlock < kOcBlock ? oc - b * kOcBlock : kOcBlock;
        int8_t* block = packed + b * kOcBlock * kp;
        int32_t sum = 0;
        for (int64_t q = 0; q < k; ++q) {
            int64_t c, tap;
            k_row(q, cg, taps, &c, &tap);
            const int8_t v = w[j * k + c * taps + tap];
            block[(q / kGroup) * rb * kGroup + r * kGroup + q % kGroup] = v;
            sum += v;
        }
        row_sums[j] = sum;
    }
}

void split_narrow(const int8_t* packed, int64_t groups, int64_t ocg, int64_t kp, int8_t* narrow,
                  std::vector<int32_t>* res_ptr, std::vector<int32_t>* res) {
    const int64_t nq = kp / kGroup;
    std::memcpy(narrow, packed, static_cast<size_t>(groups * ocg * kp));
    res_ptr->assign(1, 0);
    res->clear();
    for (int64_t j = 0; j < groups * ocg; ++j) {
        const int64_t gi = j / ocg, jg = j % ocg, b = jg / kOcBlock, r = jg % kOcBlock;
        const int64_t rb = ocg - b * kOcBlock < kOcBlock ? ocg - b * kOcBlock : kOcBlock;
        int8_t* block = narrow + gi * ocg * kp + b * kOcBlock * kp;
        for (int64_t q = 0; q < nq; ++q) {
            int8_t* w = block + q * rb * kGroup + r * kGroup;
            uint8_t rest[kGroup] = {};
            bool any = false;
            for (int64_t t = 0; t < kGroup; t += 2) {
                if (std::abs(w[t]) + std::abs(w[t + 1]) <= 128) continue;
                for (int64_t u = t; u < t + 2; ++u) {
                    const int clamped = w[u] < -64 ? -64 : (w[u] > 64 ? 64 : w[u]);
                    rest[u] = static_cast<uint8_t>(w[u] - clamped);
                    w[u] = static_cast<int8_t>(clamped);
                }
                any = true;
            }
            if (!any) continue;
            int32_t word;
            std::memcpy(&word, rest, sizeof(word));
            res->push_back(static_cast<int32_t>(q));
            res->push_back(word);
        }
        res_ptr->push_back(static_cast<int32_t>(res->size() / 2));
    }
}

void pad_plane_generic(const uint8_t* src, const PadPlane& p, uint8_t* dst) {
    const int64_t wp = p.pl + p.w + p.pr;
    std::memset(dst, p.z, static_cast<size_t>(p.pt * wp));
    for (int64_t y = 0; y < p.h; ++y) {
        uint8_t* row = dst + (p.pt + y) * wp;
        std::memset(row, p.z, static_cast<size_t>(p.pl));
        for (int64_t x = 0; x < p.w; ++x) row[p.pl + x] = src[y * p.w + x] ^ p.flip;
        std::memset(row + p.pl + p.w, p.z, static_cast<size_t>(p.pr));
    }
    std::memset(dst + (p.pt + p.h) * wp, p.z, static_cast<size_t>(p.pb * wp));
}

void pack_block_generic(const uint8_t* xpad, const uint8_t*, const int64_t* koff, int64_t k,
                        int64_t kp, const Run* runs, int64_t nruns, int64_t sw, uint8_t* buf) {
    for (int64_t q = 0; q < kp; ++q) {
        uint8_t* dst = buf + (q / kGroup) * kPos * kGroup + q % kGroup;
        if (q >= k) {
            for (int64_t p = 0; p < kPos; ++p) dst[p * kGroup] = 0;
            continue;
        }
        const uint8_t* src = xpad + koff[q];
        for (int64_t i = 0; i < nruns; ++i) {
            const Run& u = runs[i];
            for (int64_t t = 0; t < u.len; ++t) dst[(u.dst + t) * kGroup] = src[u.src + t * sw];
        }
    }
}

void cgemm_tile_generic(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp,
                        int64_t rows, int64_t npos, const RowParams& q, const Requant& r,
                        uint8_t* out, int64_t ldo) {
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t p = 0; p < npos; ++p) {
            uint32_t acc = 0;  // wraps like vpdpbusd; the corrected sum fits int32
            for (int64_t g = 0; g < kp / kGroup; ++g) {
                const uint8_t* a = acts + qoff[g] + p * kGroup;
                const int8_t* b = w + g * rows * kGroup + i * kGroup;
                for (int64_t t = 0; t < kGroup; ++t) {
                    acc += static_cast<uint32_t>(static_cast<int32_t>(a[t]) * b[t]);
                }
            }
            out[i * ldo + p] = requant_one(static_cast<int32_t>(acc), q.bias[i],
                                           q.multiplier[i], q.shift[i], r);
        }
    }
}

namespace {

// Each scratch buffer is followed by kGuard canary bytes, placed after the size its last
// call asked for: a kernel that writes a little past its buffer writes into them, not into
// malloc's next chunk header (pack_quads' last k-quad had stored whole vectors up to 32
// bytes past the block: an abort in malloc hundreds of calls later, with nothing to name the
// kernel). The next call of the thread and use, or broken_spaces, finds the change; the
// tests ask broken_spaces after every int8 kernel on every ISA path.
constexpr int64_t kGuard = 64;
constexpr uint8_t kCanary = 0xA5;

struct Scratch {
    std::vector<uint8_t> bytes;
    int64_t size = -1;  // the last call's size; -1: never asked
};

thread_local Scratch scratch[static_cast<int>(Space::count)];
std::atomic<unsigned> breached{0};  // a bit per Space whose canary a later call found changed

uint8_t* start_of(Scratch& s) {
    return s.bytes.data() + (-reinterpret_cast<uintptr_t>(s.bytes.data()) & 63);
}

// Whether s's canary is unchanged; re-armed either way.
bool guard_intact(Scratch& s) {
    if (s.size < 0) return true;
    uint8_t* guard = start_of(s) + s.size;
    bool intact = true;
    for (int64_t i = 0; i < kGuard; ++i) intact = intact && guard[i] == kCanary;
    std::memset(guard, kCanary, kGuard);
    return intact;
}

}  // namespace

uint8_t* thread_space(Space use, int64_t size) {
    Scratch& s = scratch[static_cast<int>(use)];
    if (!guard_intact(s)) breached.fetch_or(1u << static_cast<int>(use));
    const int64_t need = size + 63 + kGuard;  // 63: the alignment's largest shift
    if (static_cast<int64_t>(s.bytes.size()) < need) s.bytes.assign(static_cast<size_t>(need), 0);
    s.size = size;
    uint8_t* data = start_of(s);
    std::memset(data + size, kCanary, kGuard);
    return data;
}

std::vector<std::string> broken_spaces() {
    static const char* const names[] = {"pad", "block", "blocks", "quads", "amx",
                                        "depthwise", "pool", "widened", "chans"};
    static_assert(sizeof(names) / sizeof(names[0]) == static_cast<int>(Space::count));
    std::atomic<unsigned> bits{breached.exchange(0)};
#pragma omp parallel
    for (int use = 0; use < static_cast<int>(Space::count); ++use) {
        if (!guard_intact(scratch[use])) bits.fetch_or(1u << use);
    }
    std::vector<std::string> out;
    for (int use = 0; use < static_cast<int>(Space::count); ++use) {
        if (bits.load() & (1u << use)) out.push_back(names[use]);
    }
    return out;
}

void scribble_spaces(uint8_t value) {
#pragma omp parallel
    for (int use = 0; use < static_cast<int>(Space::count); ++use) {
        Scratch& s = scratch[use];
        if (s.size > 0) std::memset(start_of(s), value, static_cast<size_t>(s.size));
    }
}

uint8_t* chans_space(CTileFn tile, int64_t visits, int64_t n) {
    // a grow-only buffer: a fresh allocation (mapped anew) shows on small layers' calls
    return tile_takes_chans(tile) && visits >= kChanMinVisits
               ? thread_space(Space::chans, n * kChanBytes) : nullptr;
}

void fill_chans(const int32_t* bias, const int32_t* multiplier, const int32_t* shift, int64_t n,
                const Requant& r, uint8_t* table) {
    constexpr int64_t kChunk = 16;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < n; c += kChunk) {
        make_chans_avx2(bias + c, multiplier + c, shift + c, n - c < kChunk ? n - c : kChunk, r,
                        table + c * kChanBytes);
    }
}

CTileFn cgemm_tile(bool narrow) {
    const ConvKernels& k = conv_kernels();
    return narrow && k.narrow_tile ? k.narrow_tile : k.tile;
}

}  // namespace int8
}  // namespace tianyuan
