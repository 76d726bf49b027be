// int8 convolution, direct algorithm (layouts in int8_cgemm.h): the input is rewritten once
// into quad planes (4 channels per 32-bit lane, one plane per phase of the stride; with whole
// images a thread, an image at a time into the thread's own, direct_images), then per
// (image, group, block of kPos virtual positions) the weight blocks run the register tile
// with one offset per kernel tap; the tile requantizes into NCHW, dropping the columns past
// the output row: the VNNI tile by a masked store per row segment (StoreSeg), the others into
// a staging tile whose row segments are copied.
// The packed algorithm's blocks of kernels with 2 or more taps copy from the same quad
// planes (quad_input, fill_quad_planes and pack_quads here); direct saves that copy where
// its virtual positions' extra lanes cost less than it (direct_wins).
#include <omp.h>

#include <cstring>
#include <vector>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_cgemm/int8_cgemm_blocks.h"
#include "int8_conv/int8_conv_kernels.h"
#include "int8_gemm/int8_ops.h"

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

// The phase planes' shape (z and flip unset). At unit stride a row's right padding is the next
// row's left padding (pr <= pl): reads past a row's end wrap onto the next row's first
// columns, which are padding, and the last row's onto one more row of padding. 3x3 layers
// with padding 1 lose one column a row, not two: direct's virtual positions a row 57 for 56
// (ResNet-18's 56x56 layers), 29 for 28. Only where a row's outputs fit the shared row
// (ow <= wph: pr <= (kw - 1) * dw), or direct's virtual positions would run into the next
// row's (a 1x1 conv padded, a 3x3 padded by 3).
namespace {
QuadPlanes plane_geometry(const ConvGeom& g) {
    const bool shared = g.sh == 1 && g.sw == 1 && g.pr > 0 && g.pr <= g.pl &&
                        g.pr <= (g.kw - 1) * g.dw;
    const int64_t hp = g.h + g.pt + g.pb + (shared ? 1 : 0);
    const int64_t wp = g.w + g.pl + (shared ? 0 : g.pr);
    QuadPlanes p{g.h, g.w, g.pt, g.pl, g.sh, g.sw, (hp + g.sh - 1) / g.sh, (wp + g.sw - 1) / g.sw,
                 0, 0, 0};
    p.plane = p.hph * p.wph;
    return p;
}
}  // namespace

// Output lanes each algorithm computes: packed blocks run over the whole batch; direct ones
// over one image's virtual positions, wph - ow of every wph dropped and the last block short.
// The packed blocks copy from the same quad planes (int8_cgemm_plan.cpp), so all the direct
// algorithm saves is that copy: it takes the shapes where its lanes are at most packed's plus
// the copy, counted as kPackChannels output channels' tile work. The lanes count the VNNI
// tile's extras (vnni_lanes) and the packed blocks' threads' shares (block_starts). 1x1
// layers run packed (the gather is one pass anyway, and direct's staging copy is a large part
// of a short depth); so do strided layers of fewer than 576 k-quads, and everything below the
// vnni level (the AVX2 tiles step 8 positions at a block's end, so packed wastes fewer lanes).
// The measurements behind each bound: bench/RESULTS.md, int8 kernels (the NCHW engine).
constexpr int64_t kPackChannels = 6;

// A planning decision on the ISA: the lanes counted below are the VNNI tile's; below the vnni
// level (conv_kernels().direct false) the packed algorithm runs.
bool direct_wins(const ConvGeom& g) {
    if (!direct_takes(g) || g.kh * g.kw == 1 || !conv_kernels().direct) return false;
    const int64_t ocg = g.oc / g.groups, kq = g.c / g.groups * g.kh * g.kw / kGroup;
    if ((g.sh != 1 || g.sw != 1) && kq < 576) return false;
    const int64_t v = (g.oh - 1) * plane_geometry(g).wph + g.ow;  // an image's positions
    const int64_t direct = g.n * (v - v % kPos + vnni_lanes(v % kPos));
    const std::vector<int64_t> start = block_starts(g.n * g.oh * g.ow, omp_get_max_threads());
    int64_t packed = 0;
    for (size_t b = 1; b < start.size(); ++b) packed += vnni_lanes(start[b] - start[b - 1]);
    return direct * ocg <= packed * (ocg + kPackChannels);
}

QuadInput quad_input(const ConvGeom& g, uint8_t flip, uint8_t z) {
    QuadInput in;
    in.qp = plane_geometry(g);
    in.qp.z = z;
    in.qp.flip = flip;
    // Reads of the last block run up to kPos quads past the last phase; rows are written
    // in whole panels, up to kPos quads past it too.
    in.span = round_up(g.sh * g.sw * in.qp.plane + 2 * kPos, 16);
    in.cq = g.c / g.groups / kGroup;
    in.group_quads = in.cq * in.span;
    const int64_t taps = g.kh * g.kw;
    in.qoff.resize(static_cast<size_t>(in.cq * taps));
    for (int64_t c = 0; c < in.cq; ++c) {
        for (int64_t tap = 0; tap < taps; ++tap) {
            const int64_t di = tap / g.kw * g.dh, dj = tap % g.kw * g.dw;
            const int64_t phase = di % g.sh * g.sw + dj % g.sw;
            in.qoff[c * taps + tap] =
                (c * in.span + phase * in.qp.plane + di / g.sh * in.qp.wph + dj / g.sw) * kGroup;
        }
    }
    in.planes = nullptr;
    if (g.sh == 1 && g.sw == 1 && conv_kernels().quad_lanes) in.lanes = plane_lanes(in.qp);
    return in;
}

std::vector<uint64_t> plane_lanes(const QuadPlanes& p) {
    std::vector<uint64_t> lanes(static_cast<size_t>((p.hph * p.wph + 63) / 64), 0);
    for (int64_t y = p.pt; y < p.pt + p.h && y < p.hph; ++y) {
        for (int64_t x = p.pl; x < p.pl + p.w && x < p.wph; ++x) {
            const int64_t at = y * p.wph + x;
            lanes[at / 64] |= uint64_t{1} << (at % 64);
        }
    }
    return lanes;
}

uint8_t* batch_planes(const ConvGeom& g, const QuadInput& in) {
    // Grow-only (no page faults once warm); the slack past the planes, read only for dropped
    // positions, stays defined: resize zero-fills.
    return thread_space(Space::quads, g.n * g.groups * in.group_quads * kGroup);
}

namespace {
// Channel quad t (= gi * cq + c, over the groups) of image n into dst.
void fill_plane(QuadPlanesFn quads, const uint8_t* x, const ConvGeom& g, const QuadInput& in,
                int64_t n, int64_t t, uint8_t* dst) {
    const uint8_t* rows4[kGroup];
    for (int64_t i = 0; i < kGroup; ++i) rows4[i] = x + (n * g.c + t * kGroup + i) * g.h * g.w;
    if (in.lanes.empty()) {
        quads(rows4, in.qp, dst);
    } else {
        quad_planes_vbmi2(rows4, in.qp, in.lanes.data(), static_cast<int64_t>(in.lanes.size()),
                          dst);
    }
}
}  // namespace

void fill_quad_planes(const uint8_t* x, const ConvGeom& g, const QuadInput& in) {
    const QuadPlanesFn quads = conv_kernels().quad_planes;
    const int64_t per_image = g.groups * in.cq;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < g.n * per_image; ++t) {  // t = (n * groups + gi) * cq + c
        fill_plane(quads, x, g, in, t / per_image, t % per_image,
                   in.planes + t * in.span * kGroup);
    }
}

void fill_image_planes(const uint8_t* x, const ConvGeom& g, const QuadInput& in, int64_t n,
                       uint8_t* dst) {
    const QuadPlanesFn quads = conv_kernels().quad_planes;
    for (int64_t t = 0; t < g.groups * in.cq; ++t)
        fill_plane(quads, x, g, in, n, t, dst + t * in.span * kGroup);
}

void pack_quads_generic(const uint8_t* src, const int64_t* qoff, int64_t nq, const Run* runs,
                        int64_t nruns, uint8_t* buf) {
    for (int64_t q = 0; q < nq; ++q) {
        for (int64_t i = 0; i < nruns; ++i) {
            std::memcpy(buf + (q * kPos + runs[i].dst) * kGroup,
                        src + qoff[q] + runs[i].src * kGroup,
                        static_cast<size_t>(runs[i].len * kGroup));
        }
    }
}

namespace {

struct DirectPlan {
    int64_t nv, vblocks, chunks, ob_per_chunk, ocg, kp;
};

// Few blocks (under 16 a thread): the output channels are split into one chunk per thread,
// and each thread runs its chunk over every block (the tasks in chunk-major order under a
// static schedule), so the threads compute the same positions. Split by blocks alone, a
// short last block had left one thread idle at the end: 14x14 at batch 1 is 3 blocks of 64
// and one of 30 (128 and 94 positions on 2 threads), a stride-2 28x28 one 12 of 64 and one
// of 43 (448 and 363).
DirectPlan direct_plan(const ConvGeom& g, const QuadInput& in) {
    DirectPlan d;
    d.ocg = g.oc / g.groups;
    d.kp = in.cq * kGroup * g.kh * g.kw;
    d.nv = (g.oh - 1) * in.qp.wph + g.ow;
    d.vblocks = (d.nv + kPos - 1) / kPos;
    const int64_t oblocks = (d.ocg + kOcBlock - 1) / kOcBlock;
    const int64_t tasks = g.n * g.groups * d.vblocks, threads = omp_get_max_threads();
    d.chunks = tasks >= 16 * threads ? 1 : threads;
    d.chunks = d.chunks < oblocks ? d.chunks : oblocks;
    d.ob_per_chunk = (oblocks + d.chunks - 1) / d.chunks;
    return d;
}

// Where the lanes of a block of virtual positions go: lanes [lane, lane + len) are output
// row oy's columns [ox, ox + len).
struct Segment {
    int64_t lane, oy, ox, len;
};

int64_t block_segments(int64_t wph, const ConvGeom& g, int64_t v0, int64_t npos,
                       Segment* segs) {
    int64_t count = 0;
    for (int64_t v = v0; v < v0 + npos;) {
        const int64_t oy = v / wph, ox = v % wph;
        const int64_t row_end = v - ox + wph;
        if (ox < g.ow) {
            const int64_t end = v0 + npos < v - ox + g.ow ? v0 + npos : v - ox + g.ow;
            segs[count++] = {v - v0, oy, ox, end - v};
        }
        v = row_end;
    }
    return count;
}

// Weight blocks [ob0, ob1) of group gi of image n over virtual block vb; planes: image n's.
void direct_tiles(const DirectPlan& d, const QuadInput& in, const uint8_t* planes,
                  const ConvGeom& g, CTileFn tile, const int8_t* packed, const NarrowWeights* nw,
                  const int32_t* bias, const uint8_t* chans, const Requant& r, int64_t n,
                  int64_t gi, int64_t vb, int64_t ob0, int64_t ob1, uint8_t* out) {
    const int64_t v0 = vb * kPos, npos = d.nv - v0 < kPos ? d.nv - v0 : kPos;
    Segment segs[kPos + 1];
    const int64_t nseg = block_segments(in.qp.wph, g, v0, npos, segs);
    const uint8_t* acts = planes + (gi * in.group_quads + v0) * kGroup;
    const int64_t c0 = gi * d.ocg, plane = g.oh * g.ow;
    // the VNNI tile stores each row's segments by masked stores, the others through a staging
    // tile
    const bool segmented = tile == cgemm_tile_vnni;
    StoreSeg ssegs[kPos + 1];
    for (int64_t s = 0; s < nseg && segmented; ++s)
        ssegs[s] = store_seg(segs[s].oy * g.ow + segs[s].ox, segs[s].lane, segs[s].len);
    const int64_t ahead = store_ahead(g.n * g.oc * plane);
    alignas(64) uint8_t stage[kOcBlock * kPos];
    for (int64_t ob = ob0; ob < ob1; ++ob) {
        const int64_t j = ob * kOcBlock;
        if (j >= d.ocg) break;
        const int64_t rows = d.ocg - j < kOcBlock ? d.ocg - j : kOcBlock;
        const RowParams q{bias + c0 + j, r.multiplier + c0 + j, r.shift + c0 + j,
                          nw ? nw->res_ptr + c0 + j : nullptr, nw ? nw->res : nullptr,
                          chans ? chans + (c0 + j) * kChanBytes : nullptr,
                          segmented ? ssegs : nullptr, segmented ? nseg : 0, ahead};
        const int8_t* w = packed + (gi * d.ocg + j) * d.kp;
        if (segmented) {
            tile(acts, in.qoff.data(), w, d.kp, rows, npos, q, r,
                 out + (n * g.oc + c0 + j) * plane, plane);
            continue;
        }
        tile(acts, in.qoff.data(), w, d.kp, rows, npos, q, r, stage, kPos);
        for (int64_t i = 0; i < rows; ++i) {
            uint8_t* o = out + (n * g.oc + c0 + j + i) * plane;
            for (int64_t s = 0; s < nseg; ++s) {
                std::memcpy(o + segs[s].oy * g.ow + segs[s].ox, stage + i * kPos + segs[s].lane,
                            static_cast<size_t>(segs[s].len));
            }
        }
    }
}

// Batches of a multiple of the threads, one channel chunk: each thread takes whole images, one
// at a time: it rewrites the image into planes of its own (the same bytes every image, so
// they stay in its L2 for the tiles' reads and the next image's writes) and runs the image's
// blocks, asking meanwhile for the next image's input a slice a block (prefetcht1). The
// planes of the whole batch, written first and shared, had gone through L3 both ways
// (bench/RESULTS.md, int8 kernels: the planes made one image at a time).
void direct_images(const uint8_t* x, const ConvGeom& g, const QuadInput& in,
                   const DirectPlan& d, CTileFn tile, const int8_t* packed,
                   const NarrowWeights* nw, const int32_t* bias, const uint8_t* table,
                   const Requant& r, uint8_t* out) {
    const int64_t me = omp_get_thread_num(), threads = omp_get_num_threads();
    const int64_t first = g.n * me / threads, end = g.n * (me + 1) / threads;
    uint8_t* planes = thread_space(Space::quads, g.groups * in.group_quads * kGroup);
    const int64_t tasks = g.groups * d.vblocks, bytes = g.c * g.h * g.w;  // an image's input
    for (int64_t n = first; n < end; ++n) {
        fill_image_planes(x, g, in, n, planes);
        const uint8_t* next = n + 1 < end ? x + (n + 1) * bytes : nullptr;
        for (int64_t t = 0; t < tasks; ++t) {  // t = gi * vblocks + vb
            if (next) prefetch_input(next, t * bytes / tasks, (t + 1) * bytes / tasks);
            direct_tiles(d, in, planes, g, tile, packed, nw, bias, table, r, n, t / d.vblocks,
                         t % d.vblocks, 0, d.ob_per_chunk, out);
        }
    }
}

}  // namespace

void conv2d_direct(const uint8_t* x, uint8_t flip, uint8_t z, const ConvGeom& g,
                   const int8_t* packed, const NarrowWeights* nw, const int32_t* bias,
                   const Requant& r, uint8_t* out) {
    QuadInput in = quad_input(g, flip, z);
    const DirectPlan d = direct_plan(g, in);
    const CTileFn tile = cgemm_tile(nw != nullptr);
    if (nw) packed = nw->packed;
    uint8_t* table = chans_space(tile, g.n * d.vblocks, g.oc);
    const bool images = d.chunks == 1 && g.n % omp_get_max_threads() == 0;
    if (!images) in.planes = batch_planes(g, in);
    const int64_t tasks = g.n * g.groups * d.vblocks;
#pragma omp parallel
    {
        if (table) fill_chans(bias, r.multiplier, r.shift, g.oc, r, table);
        if (images) {
            direct_images(x, g, in, d, tile, packed, nw, bias, table, r, out);
        } else {
            fill_quad_planes(x, g, in);
#pragma omp for schedule(static)
            for (int64_t t = 0; t < tasks * d.chunks; ++t) {
                const int64_t ch = t / tasks, task = t % tasks;
                const int64_t vb = task % d.vblocks, ng = task / d.vblocks, n = ng / g.groups;
                const uint8_t* planes = in.planes + n * g.groups * in.group_quads * kGroup;
                direct_tiles(d, in, planes, g, tile, packed, nw, bias, table, r, n,
                             ng % g.groups, vb, ch * d.ob_per_chunk, (ch + 1) * d.ob_per_chunk,
                             out);
            }
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
