// int8 convolution, direct algorithm (layouts in int8_cgemm.h): the input is rewritten once
// into quad planes (4 channels per 32-bit lane, one plane per phase of the stride), then per
// (image, group, block of kPos virtual positions) the weight blocks run the register tile
// with one offset per kernel tap; the tile requantizes into a staging tile whose row
// segments are copied into NCHW, dropping the columns past the output row.
// It saves the packed algorithm's per-block gather, which a 3x3 layer pays 9 times per input
// byte: that gather had been 15 % of ResNet-18's 64-channel 3x3 layer at batch 16.
#include <omp.h>

#include <cstring>
#include <vector>

#include "cpu.h"
#include "int8_cgemm.h"
#include "int8_ops.h"

namespace tianyuan {
namespace int8 {

void quad_planes_generic(const uint8_t* const* rows4, const QuadPlanes& p, uint8_t* dst) {
    for (int64_t a = 0; a < p.sh; ++a) {
        for (int64_t b = 0; b < p.sw; ++b) {
            uint8_t* plane = dst + (a * p.sw + b) * p.plane * kGroup;
            for (int64_t y = 0; y < p.hph; ++y) {
                const int64_t row = p.sh * y + a - p.pt;
                for (int64_t x = 0; x < p.wph; ++x) {
                    const int64_t col = p.sw * x + b - p.pl;
                    const bool in = row >= 0 && row < p.h && col >= 0 && col < p.w;
                    for (int64_t t = 0; t < kGroup; ++t) {
                        plane[(y * p.wph + x) * kGroup + t] =
                            in ? static_cast<uint8_t>(rows4[t][row * p.w + col] ^ p.flip) : p.z;
                    }
                }
            }
        }
    }
}

bool direct_takes(const ConvGeom& g) { return quad_order(g.c / g.groups); }

// Output lanes each algorithm computes: packed blocks run over the whole batch; direct ones
// over one image's virtual positions, wph - ow of every wph dropped and the last block short.
// Measured on ResNet-18's layers, all 20 in one run per algorithm as in a forward pass
// (2 threads, 7-15 alternating rounds): at batch 1 direct is 0.75-0.97x packed's time on
// every 3x3 layer (lanes level: a 7x7 or 14x14 map wastes a block's tail either way); at
// batch 16 0.88-0.97x at 56x56 (direct computes 1.04x the lanes), 0.96-1.11x at 28x28
// (1.14x), 1.03-1.21x at 14x14 and 7x7 (1.3x). 1x1 layers lose 1.3-2.4x in isolation: the
// gather they save is one pass anyway, and the staging copy is a large part of a short depth.
bool direct_wins(const ConvGeom& g) {
    if (!direct_takes(g) || g.kh * g.kw == 1) return false;
    const int64_t wph = (g.w + g.pl + g.pr + g.sw - 1) / g.sw;
    const int64_t direct = g.n * round_up((g.oh - 1) * wph + g.ow, kPos);
    const int64_t packed = round_up(g.n * g.oh * g.ow, kPos);
    return 10 * packed >= 9 * direct;
}

namespace {

struct DirectPlan {
    QuadPlanes qp;
    int64_t cq, span, nv, vblocks, chunks, ob_per_chunk, ocg, kp;
    std::vector<int64_t> qoff;  // (kp / 4,) k-quad (c / 4, tap) -> bytes from the block
};

DirectPlan direct_plan(const ConvGeom& g, uint8_t flip, uint8_t z) {
    DirectPlan d;
    const int64_t hp = g.h + g.pt + g.pb, wp = g.w + g.pl + g.pr;
    d.qp = {g.h, g.w, g.pt, g.pl, g.sh, g.sw, (hp + g.sh - 1) / g.sh, (wp + g.sw - 1) / g.sw,
            0, z, flip};
    d.qp.plane = d.qp.hph * d.qp.wph;
    // Reads of the last block run up to kPos quads past the last phase; rows are written
    // in whole panels, up to kPos quads past it too.
    d.span = round_up(g.sh * g.sw * d.qp.plane + 2 * kPos, 16);
    d.cq = g.c / g.groups / kGroup;
    d.ocg = g.oc / g.groups;
    d.kp = d.cq * kGroup * g.kh * g.kw;
    d.nv = (g.oh - 1) * d.qp.wph + g.ow;
    d.vblocks = (d.nv + kPos - 1) / kPos;
    const int64_t taps = g.kh * g.kw;
    d.qoff.resize(static_cast<size_t>(d.kp / kGroup));
    for (int64_t c = 0; c < d.cq; ++c) {
        for (int64_t tap = 0; tap < taps; ++tap) {
            const int64_t di = tap / g.kw * g.dh, dj = tap % g.kw * g.dw;
            const int64_t phase = di % g.sh * g.sw + dj % g.sw;
            d.qoff[c * taps + tap] =
                (c * d.span + phase * d.qp.plane + di / g.sh * d.qp.wph + dj / g.sw) * kGroup;
        }
    }
    const int64_t oblocks = (d.ocg + kOcBlock - 1) / kOcBlock;
    const int64_t tasks = g.n * g.groups * d.vblocks, want = 2 * omp_get_max_threads();
    d.chunks = tasks >= want ? 1 : (want + tasks - 1) / tasks;
    d.chunks = d.chunks < oblocks ? d.chunks : oblocks;
    d.ob_per_chunk = (oblocks + d.chunks - 1) / d.chunks;
    return d;
}

// Where the lanes of a block of virtual positions go: lanes [lane, lane + len) are output
// row oy's columns [ox, ox + len).
struct Segment {
    int64_t lane, oy, ox, len;
};

int64_t block_segments(const DirectPlan& d, const ConvGeom& g, int64_t v0, int64_t npos,
                       Segment* segs) {
    int64_t count = 0;
    for (int64_t v = v0; v < v0 + npos;) {
        const int64_t oy = v / d.qp.wph, ox = v % d.qp.wph;
        const int64_t row_end = v - ox + d.qp.wph;
        if (ox < g.ow) {
            const int64_t end = v0 + npos < v - ox + g.ow ? v0 + npos : v - ox + g.ow;
            segs[count++] = {v - v0, oy, ox, end - v};
        }
        v = row_end;
    }
    return count;
}

// Weight blocks [ob0, ob1) of group gi of image n over virtual block vb.
void direct_tiles(const DirectPlan& d, const ConvGeom& g, CTileFn tile, const uint8_t* planes,
                  const int8_t* packed, const int32_t* bias, const Requant& r, int64_t n,
                  int64_t gi, int64_t vb, int64_t ob0, int64_t ob1, uint8_t* out) {
    const int64_t v0 = vb * kPos, npos = d.nv - v0 < kPos ? d.nv - v0 : kPos;
    Segment segs[kPos + 1];
    const int64_t nseg = block_segments(d, g, v0, npos, segs);
    const uint8_t* acts = planes + ((n * g.groups + gi) * d.cq * d.span + v0) * kGroup;
    const int64_t c0 = gi * d.ocg, plane = g.oh * g.ow;
    alignas(64) uint8_t stage[kOcBlock * kPos];
    for (int64_t ob = ob0; ob < ob1; ++ob) {
        const int64_t j = ob * kOcBlock;
        if (j >= d.ocg) break;
        const int64_t rows = d.ocg - j < kOcBlock ? d.ocg - j : kOcBlock;
        const RowParams q{bias + c0 + j, r.multiplier + c0 + j, r.shift + c0 + j};
        tile(acts, d.qoff.data(), packed + (gi * d.ocg + j) * d.kp, d.kp, rows, npos, q, r,
             stage, kPos);
        for (int64_t i = 0; i < rows; ++i) {
            uint8_t* o = out + (n * g.oc + c0 + j + i) * plane;
            for (int64_t s = 0; s < nseg; ++s) {
                std::memcpy(o + segs[s].oy * g.ow + segs[s].ox, stage + i * kPos + segs[s].lane,
                            static_cast<size_t>(segs[s].len));
            }
        }
    }
}

}  // namespace

void conv2d_direct(const uint8_t* x, uint8_t flip, uint8_t z, const ConvGeom& g,
                   const int8_t* packed, const int32_t* bias, const Requant& r, uint8_t* out) {
    const DirectPlan d = direct_plan(g, flip, z);
    const int64_t nplanes = g.n * g.groups * d.cq;
    // Grow-only (no page faults once warm); the slack past the planes, read only for dropped
    // positions, stays defined: resize zero-fills.
    static thread_local std::vector<uint8_t> space;
    if (static_cast<int64_t>(space.size()) < nplanes * d.span * kGroup) {
        space.resize(static_cast<size_t>(nplanes * d.span * kGroup));
    }
    uint8_t* planes = space.data();
    const auto quads = current_isa() >= Isa::avx512 ? quad_planes_avx512 : quad_planes_generic;
    const CTileFn tile = cgemm_tile();
    const int64_t tasks = g.n * g.groups * d.vblocks;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < nplanes; ++t) {  // t = (n * groups + gi) * cq + c
            const int64_t image = t / (g.groups * d.cq), c = t % (g.groups * d.cq) * kGroup;
            const uint8_t* rows4[kGroup];
            for (int64_t i = 0; i < kGroup; ++i) {
                rows4[i] = x + (image * g.c + c + i) * g.h * g.w;
            }
            quads(rows4, d.qp, planes + t * d.span * kGroup);
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks * d.chunks; ++t) {
            const int64_t ch = t % d.chunks, task = t / d.chunks;
            const int64_t vb = task % d.vblocks, ng = task / d.vblocks;
            direct_tiles(d, g, tile, planes, packed, bias, r, ng / g.groups, ng % g.groups, vb,
                         ch * d.ob_per_chunk, (ch + 1) * d.ob_per_chunk, out);
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
