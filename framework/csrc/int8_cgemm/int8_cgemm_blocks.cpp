// The int8 drivers' shared pieces outside the kernels (declared and described in
// int8_cgemm_blocks.h): the bias's zero-point correction, padding, position blocks.
#include "int8_cgemm/int8_cgemm_blocks.h"

#include "int8_conv/int8_conv_kernels.h"

namespace tianyuan {
namespace int8 {

bool needs_padding(const QIn& x, const ConvGeom& g) {
    return g.pt || g.pb || g.pl || g.pr || x.is_signed;
}

namespace {
PadPlane pad_geometry(const QIn& x, const ConvGeom& g) {
    return {g.h, g.w, g.pt, g.pb, g.pl, g.pr, static_cast<uint8_t>(zero_of(x)), flip_of(x),
            x.data + g.n * g.c * g.h * g.w};
}
}  // namespace

const uint8_t* padded_input(const QIn& x, const ConvGeom& g, int64_t hp, int64_t wp,
                            const uint8_t** end) {
    if (!needs_padding(x, g)) {
        *end = x.data + g.n * g.c * g.h * g.w;
        return x.data;
    }
    uint8_t* xp = thread_space(Space::pad, g.n * g.c * hp * wp + 2 * kPos);
    *end = xp + g.n * g.c * hp * wp + 2 * kPos;
    const PadPlane p = pad_geometry(x, g);
    const PadPlaneFn pad = conv_kernels().pad_plane;
#pragma omp parallel for schedule(static) if (g.n * g.c * hp * wp > (1 << 16))
    for (int64_t plane = 0; plane < g.n * g.c; ++plane) {
        pad(x.data + plane * g.h * g.w, p, xp + plane * hp * wp);
    }
    return xp;
}

void pad_image(const QIn& x, const ConvGeom& g, int64_t hp, int64_t wp, int64_t n,
               uint8_t* dst) {
    const PadPlane p = pad_geometry(x, g);
    const PadPlaneFn pad = conv_kernels().pad_plane;
    for (int64_t c = 0; c < g.c; ++c)
        pad(x.data + (n * g.c + c) * g.h * g.w, p, dst + c * hp * wp);
}

int64_t block_spans(int64_t p, int64_t p0, int64_t npos, Span* spans) {
    int64_t count = 0;
    for (int64_t lane = 0; lane < npos;) {
        const int64_t n = (p0 + lane) / p, q = (p0 + lane) % p;
        const int64_t len = p - q < npos - lane ? p - q : npos - lane;
        spans[count++] = {n, q, lane, len};
        lane += len;
    }
    return count;
}

int64_t block_runs(const ConvGeom& g, int64_t image, int64_t row, int64_t col,
                   const Span* spans, int64_t nspans, Run* runs) {
    int64_t nr = 0;
    for (int64_t s = 0; s < nspans; ++s) {
        const Span& sp = spans[s];
        for (int64_t p = sp.q; p < sp.q + sp.len;) {
            const int64_t oy = p / g.ow, ox = p % g.ow;
            const int64_t len = g.ow - ox < sp.q + sp.len - p ? g.ow - ox : sp.q + sp.len - p;
            const int64_t src = sp.n * image + oy * row + ox * col;
            if (nr && runs[nr - 1].src + runs[nr - 1].len * col == src) {
                runs[nr - 1].len += len;
            } else {
                runs[nr++] = {sp.lane + p - sp.q, src, len};
            }
            p += len;
        }
    }
    return nr;
}

std::vector<int32_t> corrected_bias(const int32_t* bias, const int32_t* row_sums, int64_t n,
                                    int32_t z) {
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
        const uint32_t b = bias ? static_cast<uint32_t>(bias[j]) : 0u;
        out[j] = static_cast<int32_t>(b - static_cast<uint32_t>(z) *
                                              static_cast<uint32_t>(row_sums[j]));
    }
    return out;
}

// Blocks of at most kPos positions. With few blocks per thread, each thread's equal share of
// the positions is cut into whole blocks and one remainder, so that a static schedule gives
// every thread the same work: 196 positions (14x14, batch 1) on 2 threads had been 3 blocks
// of 64 and one of 4, and the thread with two full blocks had nearly twice the other's work.
// Positions that fit one block stay one block, whose
// output channels the threads share (plan's chunks): 49 positions (7x7, batch 1) cut 25 + 24
// had run 32 + 24 lanes (the tile steps 16 and 8 wide), and one thread waited for the other;
// one block is 56 lanes, halved.
// A share's last block of more positions than the VNNI tile's extras but at most 16 (one
// panel) takes 16 from the whole block before it: 48 + (16 + r) positions run the same lanes
// as 64 + r, in blocks of 3 and 2 panels, where a one-panel block's loop (6 accumulators)
// waits on vpdpbusd's latency (bench/RESULTS.md, int8 kernels: no one-panel block after a
// whole one); the AVX2 tile, which steps 8 positions, neither gains nor loses.
std::vector<int64_t> block_starts(int64_t all, int64_t threads) {
    if (all <= kPos) return {0, all};
    std::vector<int64_t> start{0};
    const int64_t uniform = (all + kPos - 1) / kPos;
    const int64_t share = uniform >= 32 * threads ? all : (all + threads - 1) / threads;
    for (int64_t s0 = 0; s0 < all; s0 += share) {
        const int64_t s1 = s0 + share < all ? s0 + share : all;
        for (int64_t p = s0 + kPos; p < s1; p += kPos) start.push_back(p);
        // a last block of 5 to 16 positions after a whole one: 48 + (16 + r) instead
        const int64_t r = s1 - start.back();
        if (r > kExtraMax && r <= 16 && start.back() - kPos >= s0) start.back() -= 16;
        start.push_back(s1);
    }
    return start;
}

}  // namespace int8
}  // namespace tianyuan
