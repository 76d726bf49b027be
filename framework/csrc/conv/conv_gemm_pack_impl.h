// The direct GEMM's activation-panel packer, its ISA-independent part, shared by
// conv_gemm_avx2.cpp and conv_gemm_avx512.cpp: each includes this file (into its own
// anonymous namespace, as im2col_impl.h) and passes its own pack_row to pack_panel.
// A panel row is one channel's reads for one kernel tap; which lanes read what does not
// depend on the channel, so a panel plans each tap once (plan_tap) and every channel's row
// then follows the plan.
#pragma once

#include <cstdint>

#include "conv/conv_gemm.h"

namespace tianyuan {
namespace {

// The reads of one panel row for one kernel tap (i, j): per segment whose input row exists,
// its in-image lanes (bit L: lane L; an AVX-512 row splits them into two 16-lane masks), for
// stride 2 the input columns they read (bit m: column m past lane 0's), and where lane 0
// would read, relative to the channel's plane.
struct TapReads {
    int64_t offset[kConvGemmNr];
    uint32_t lanes[kConvGemmNr];
    uint64_t span[kConvGemmNr];
    int64_t count;
};

// Lane L of a segment reads column ix = (ox + L - lane) * sw + off of input row iy.
inline void plan_tap(const Conv2dGeometry& g, const ConvGemmSegment* seg, int64_t nseg,
                     int64_t i, int64_t j, TapReads* t) {
    const int64_t off = j * g.dw - g.pl;
    t->count = 0;
    for (int64_t s = 0; s < nseg; ++s) {
        const int64_t iy = seg[s].oy * g.sh - g.pt + i * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        const int64_t base = (seg[s].ox - seg[s].lane) * g.sw + off;  // ix = L * sw + base
        int64_t first = seg[s].lane, last = seg[s].lane + seg[s].len;
        while (first < last && first * g.sw + base < 0) ++first;
        while (last > first && (last - 1) * g.sw + base >= g.w) --last;
        if (first >= last) continue;
        t->lanes[t->count] =
            static_cast<uint32_t>(((uint64_t(1) << last) - 1) & ~((uint64_t(1) << first) - 1));
        // stride 2: columns 2 * first .. 2 * last - 2 (none past the last lane's)
        const uint64_t below_end = (uint64_t(1) << (2 * last - 1)) - 1;
        t->span[t->count] = below_end & ~((uint64_t(1) << (2 * first)) - 1);
        t->offset[t->count++] = (seg[s].n * g.c * g.h + iy) * g.w + base;
    }
}

using PackRow = void (*)(const float* plane, const TapReads& t, int64_t sw, float* dst);

constexpr int64_t kMaxTaps = 49;  // wider kernels plan each row as it comes

// Rows [k0, k0 + kc) of the panel (row k = c * kh * kw + tap), as conv_gemm.h's ConvGemmPack.
template <PackRow kRow>
void pack_panel(const float* xn, const Conv2dGeometry& g, const ConvGemmSegment* seg,
                int64_t nseg, int64_t k0, int64_t kc, float* panel) {
    const int64_t khw = g.kh * g.kw, plane_size = g.h * g.w;
    const bool planned = khw <= kMaxTaps;
    TapReads taps[kMaxTaps];
    if (planned)
        for (int64_t t = 0; t < khw; ++t) plan_tap(g, seg, nseg, t / g.kw, t % g.kw, &taps[t]);
    int64_t c = k0 / khw, tap = k0 % khw;
    for (int64_t kk = 0; kk < kc; ++kk, ++tap) {
        if (tap == khw) tap = 0, ++c;
        TapReads now;
        if (!planned) plan_tap(g, seg, nseg, tap / g.kw, tap % g.kw, &now);
        kRow(xn + c * plane_size, planned ? taps[tap] : now, g.sw, panel + kk * kConvGemmNr);
    }
}

}  // namespace
}  // namespace tianyuan
