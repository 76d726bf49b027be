// int8 depthwise convolution (groups == C): the dispatch between the VNNI kernels, the AVX-512,
// AVX-VNNI and AVX2 ones (VNNI's and AVX2's two: per plane, and with the channels in the
// lanes) and the generic direct loops (one channel's K is tiny, so no GEMM), and the lane
// masks of the VNNI plane kernel's unpadded path, worked out once per geometry and kept. The
// ISA's kernels are chosen once into the family's table (fill_int8_depthwise), in the order
// they are tried on a geometry.
#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include <omp.h>

#include "runtime/cpu.h"
#include "runtime/dispatch.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

namespace {

// One output plane (oh, ow) s32 of channel oc: sum over the window of (x - z) * w, where the
// padding contributes nothing (it is the zero point). x plane (H, W) as u8 with flip.
void depthwise_plane(const uint8_t* x, const int8_t* w, const ConvGeom& g, uint8_t flip,
                     int32_t z, int32_t* acc) {
    std::memset(acc, 0, static_cast<size_t>(g.oh * g.ow) * sizeof(int32_t));
    for (int64_t i = 0; i < g.kh; ++i) {
        for (int64_t j = 0; j < g.kw; ++j) {
            const int32_t wv = w[i * g.kw + j];
            const int64_t off = j * g.dw - g.pl;
            // valid ox: 0 <= ox*sw + off < W
            const int64_t ox0 = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
            const int64_t ox1 = g.w - off <= 0 ? 0 : (g.w - off - 1) / g.sw + 1;
            const int64_t oxe = ox1 < g.ow ? ox1 : g.ow;
            for (int64_t oy = 0; oy < g.oh; ++oy) {
                const int64_t iy = oy * g.sh - g.pt + i * g.dh;
                if (iy < 0 || iy >= g.h) continue;
                const uint8_t* xr = x + iy * g.w + off;
                int32_t* ar = acc + oy * g.ow;
                for (int64_t ox = ox0; ox < oxe; ++ox) {
                    ar[ox] += (static_cast<int32_t>(xr[ox * g.sw] ^ flip) - z) * wv;
                }
            }
        }
    }
}

// One (image, channel) plane of x padded with the zero point into xp (hp, wp) + slack.
void pad_plane(const uint8_t* src, const ConvGeom& g, uint8_t flip, uint8_t z, int64_t wp,
               uint8_t* xp) {
    // locals: stores through uint8_t* may alias g, which would stop vectorisation
    const int64_t h = g.h, w = g.w, top = g.pt, left = g.pl, hp = g.h + g.pt + g.pb;
    std::memset(xp, z, static_cast<size_t>(hp * wp + kPadSlack));
    for (int64_t y = 0; y < h; ++y) {
        uint8_t* row = xp + (top + y) * wp + left;
        const uint8_t* in = src + y * w;
        if (!flip) {
            std::memcpy(row, in, static_cast<size_t>(w));
            continue;
        }
        for (int64_t i = 0; i < w; ++i) row[i] = in[i] ^ flip;
    }
}

using PlaneFn = void (*)(const uint8_t*, int64_t, const int8_t*, const ConvGeom&,
                        const RowParams&, const Requant&, uint8_t*, uint8_t*);

// AVX-512 and AVX2 paths: per (image, output channel) plane, pad, then the plane kernel.
void depthwise_simd(const QIn& x, const ConvGeom& g, const int8_t* w, const int32_t* bias,
                    const Requant& r, PlaneFn plane_fn, uint8_t* out) {
    const int64_t p = g.oh * g.ow, mult = g.oc / g.c, taps = g.kh * g.kw;
    const int64_t wp = g.w + g.pl + g.pr, hp = g.h + g.pt + g.pb;
    const int32_t z = zero_of(x);
#pragma omp parallel if (g.n * g.oc * p * taps > (1 << 15))
    {
        // padded plane, then output scratch
        uint8_t* space = thread_space(Space::depthwise, hp * wp + kPadSlack + g.oh * wp + 64);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < g.n * g.oc; ++t) {
            const int64_t n = t / g.oc, oc = t % g.oc;
            pad_plane(x.data + (n * g.c + oc / mult) * g.h * g.w, g, flip_of(x),
                      static_cast<uint8_t>(z), wp, space);
            int32_t sum = 0;
            for (int64_t i = 0; i < taps; ++i) sum += w[oc * taps + i];
            const int32_t b = static_cast<int32_t>(
                static_cast<uint32_t>(bias[oc]) -
                static_cast<uint32_t>(z) * static_cast<uint32_t>(sum));
            const RowParams q{&b, r.multiplier + oc, r.shift + oc};
            plane_fn(space, wp, w + oc * taps, g, q, r, out + t * p,
                     space + hp * wp + kPadSlack);
        }
    }
}

// Byte masks of the VNNI kernel's unpadded stride-1 path (int8_depthwise_vnni.cpp): for
// each step of 64 outputs, kernel row i, phase s and tap word d, bit b is set when byte b of
// that load is a real input (row and column inside the plane, tap < kw). Index
// ((step * kh + i) * 4 + s) * nd + d.
std::vector<uint64_t> build_masks(const ConvGeom& g, int nd) {
    const int64_t total = g.oh * g.ow, steps = (total + 63) / 64;
    std::vector<uint64_t> masks(static_cast<size_t>(steps * g.kh * 4 * nd), 0);
    for (int64_t st = 0; st < steps; ++st) {
        for (int64_t i = 0; i < g.kh; ++i) {
            for (int64_t s = 0; s < 4; ++s) {
                for (int d = 0; d < nd; ++d) {
                    uint64_t m = 0;
                    for (int64_t b = 0; b < 64; ++b) {
                        const int64_t o = st * 64 + b / 4 * 4 + s, j = 4 * d + b % 4;
                        const int64_t iy = o / g.ow - g.pt + i * g.dh, ix = o % g.ow - g.pl + j;
                        const bool in = o < total && j < g.kw && iy >= 0 && iy < g.h &&
                                        ix >= 0 && ix < g.w;
                        m |= static_cast<uint64_t>(in) << b;
                    }
                    masks[((st * g.kh + i) * 4 + s) * nd + d] = m;
                }
            }
        }
    }
    return masks;
}

// The masks for g, built on first use and kept for the process (a network has a handful of
// depthwise geometries; past kMaxPlans, `local` holds a per-call copy).
const uint64_t* masks_for(const ConvGeom& g, int nd, std::vector<uint64_t>& local) {
    constexpr size_t kMaxPlans = 256;
    using Key = std::array<int64_t, 9>;
    static std::mutex lock;
    static std::map<Key, std::vector<uint64_t>> plans;
    const Key key{g.h, g.w, g.kh, g.kw, g.pt, g.pb, g.pl, g.pr, g.dh};
    std::lock_guard<std::mutex> hold(lock);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second.data();
    if (plans.size() >= kMaxPlans) {
        local = build_masks(g, nd);
        return local.data();
    }
    return plans.emplace(key, build_masks(g, nd)).first->second.data();
}

// Whether the AVX2 kernel with channels in the lanes runs g: where its blocks of 16
// channels fill the lanes and give every thread work, at stride 2 or on maps up to 28x28; at
// stride 1 on larger maps the plane kernel's rows fill its lanes (bench/RESULTS.md, int8
// kernels: depthwise).
bool lanes_wins(const ConvGeom& g) {
    return g.c >= 16 && g.n * ((g.c + 15) / 16) >= omp_get_max_threads() &&
           (g.sw >= 2 || g.oh * g.ow <= 28 * 28);
}

// Whether the VNNI kernel with channels in the lanes runs g (where it takes g): maps of up to
// 14x14 at stride 2, 7x7 at stride 1; on larger maps (14x14 at stride 1, 28x28, stride 2 to
// 28x28) the plane kernel's rows fill its lanes and it keeps them, on Zen 4 and on Emerald
// Rapids alike (bench/RESULTS.md, int8 kernels: depthwise).
bool lanes_vnni_wins(const ConvGeom& g) {
    return g.c >= 16 && g.n * ((g.c + 15) / 16) >= omp_get_max_threads() &&
           g.oh * g.ow <= (g.sw >= 2 ? 14 * 14 : 7 * 7);
}

// Input position (y, x)'s byte in the padded position-major plane of the kernels with channels
// in the lanes.
std::vector<int64_t> lanes_at(const ConvGeom& g) {
    const int64_t wp = g.w + g.pl + g.pr;
    std::vector<int64_t> at(static_cast<size_t>(g.h * g.w));
    for (int64_t y = 0; y < g.h; ++y) {
        for (int64_t i = 0; i < g.w; ++i) at[y * g.w + i] = ((y + g.pt) * wp + i + g.pl) * 16;
    }
    return at;
}

// One call's arguments, as every kernel of the family takes them.
struct DwCall {
    const QIn& x;
    const ConvGeom& g;
    const int8_t* w;
    const int32_t* bias;
    const Requant& r;
    uint8_t* out;
    const int32_t* words;
    const int32_t* sums;
};

// A kernel and the geometries the automatic choice gives it.
struct DwKernel {
    bool (*runs)(const ConvGeom& g, const Requant& r);
    void (*call)(const DwCall& c);
};

// The ISA's kernels in the order they are tried; the generic loops take what none runs.
struct DepthwiseKernels {
    DwKernel tries[5];
    int count;
};

void lanes_vnni_call(const DwCall& c) {
    depthwise_lanes_vnni(c.x, c.g, c.words, c.sums, c.bias, c.r, lanes_at(c.g).data(), c.out);
}

void vnni_call(const DwCall& c) {
    std::vector<uint64_t> local;
    const int nd = depthwise_words_per_row(c.g.kw);
    const uint64_t* masks = depthwise_vnni_unpadded(c.g) ? masks_for(c.g, nd, local) : nullptr;
    depthwise_conv2d_vnni(c.x, c.g, c.words, c.sums, c.bias, c.r, masks, c.out);
}

void lanes_avx2_call(const DwCall& c) {
    depthwise_lanes_avx2(c.x, c.g, c.w, c.bias, c.r, lanes_at(c.g).data(), c.out);
}

template <PlaneFn plane>
void plane_call(const DwCall& c) {
    depthwise_simd(c.x, c.g, c.w, c.bias, c.r, plane, c.out);
}

bool unit_or_double_stride(const ConvGeom& g, const Requant&) { return g.sw == 1 || g.sw == 2; }

template <bool (*takes)(const ConvGeom&)>
bool takes_any_requant(const ConvGeom& g, const Requant&) {
    return takes(g);
}

// The family's one ISA decision: the kernels each level tries, fastest first; a level runs
// the kernels of those below it, but avxvnni's, which sits below avx512 and vnni, whose CPUs
// need not have it.
void fill_int8_depthwise(DepthwiseKernels& k, Isa isa) {
    const DwKernel lanes_vnni{[](const ConvGeom& g, const Requant& r) {
                                  return lanes_vnni_wins(g) && depthwise_lanes_vnni_takes(g, r);
                              },
                              lanes_vnni_call};
    const DwKernel vnni{takes_any_requant<depthwise_vnni_takes>, vnni_call};
    const DwKernel avx512{unit_or_double_stride, plane_call<depthwise_plane_avx512>};
    const DwKernel avxvnni{takes_any_requant<depthwise_avxvnni_takes>,
                           plane_call<depthwise_plane_avxvnni>};
    const DwKernel lanes_avx2{[](const ConvGeom& g, const Requant&) {
                                  return depthwise_lanes_avx2_takes(g) && lanes_wins(g);
                              },
                              lanes_avx2_call};
    const DwKernel avx2{takes_any_requant<depthwise_avx2_takes>, plane_call<depthwise_plane_avx2>};
    k.count = 0;
    const auto add = [&k](const DwKernel& kernel) { k.tries[k.count++] = kernel; };
    if (isa >= Isa::vnni) {
        add(lanes_vnni);
        add(vnni);
    }
    if (isa >= Isa::avx512) add(avx512);
    if (isa == Isa::avxvnni) add(avxvnni);
    if (isa >= Isa::avx2) {
        add(lanes_avx2);
        add(avx2);
    }
}

Dispatch<DepthwiseKernels> kernels(fill_int8_depthwise);

// Direct loops per output plane, then one requantization per image.
void depthwise_generic(const DwCall& c) {
    const QIn& x = c.x;
    const ConvGeom& g = c.g;
    const int64_t p = g.oh * g.ow, mult = g.oc / g.c;
    std::vector<int32_t> acc(static_cast<size_t>(g.oc * p));
    for (int64_t n = 0; n < g.n; ++n) {
#pragma omp parallel for schedule(static) if (g.oc * p * g.kh * g.kw > (1 << 16))
        for (int64_t oc = 0; oc < g.oc; ++oc) {
            const uint8_t* plane = x.data + (n * g.c + oc / mult) * g.h * g.w;
            depthwise_plane(plane, c.w + oc * g.kh * g.kw, g, flip_of(x), zero_of(x),
                            acc.data() + oc * p);
        }
        Requant rq = c.r;
        rq.bias = c.bias;
        rq.step = 1;
        requantize(acc.data(), p, g.oc, p, rq, true, c.out + n * g.oc * p, p);
    }
}

}  // namespace

void depthwise_consts(const int8_t* w, int64_t oc, int64_t kh, int64_t kw, int32_t* words,
                      int32_t* sums) {
    const int nd = depthwise_words_per_row(kw);
    for (int64_t c = 0; c < oc; ++c) {
        int32_t sum = 0;
        for (int64_t i = 0; i < kh; ++i) {
            for (int d = 0; d < nd; ++d) {
                int8_t b[4] = {0, 0, 0, 0};
                for (int j = 0; j < 4 && 4 * d + j < kw; ++j) {
                    b[j] = w[(c * kh + i) * kw + 4 * d + j];
                    sum += b[j];
                }
                std::memcpy(words + (c * kh + i) * nd + d, b, sizeof(int32_t));
            }
        }
        sums[c] = sum;
    }
}

void depthwise_conv2d(const QIn& x, const ConvGeom& g, const int8_t* w, const int32_t* bias,
                      const Requant& r, uint8_t* out, const int32_t* words,
                      const int32_t* sums) {
    const DwCall call{x, g, w, bias, r, out, words, sums};
    const DepthwiseKernels& k = kernels();
    for (int i = 0; i < k.count; ++i) {
        if (k.tries[i].runs(g, r)) return k.tries[i].call(call);
    }
    depthwise_generic(call);
}

}  // namespace int8
}  // namespace tianyuan
