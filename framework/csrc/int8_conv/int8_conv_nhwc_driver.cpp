// The channels-last int8 convolution's driver (conv2d_nhwc, int8_conv_nhwc.h). It splits the output
// positions into one contiguous share a thread (or, with fewer positions than 8 tiles a thread and
// 2 or more weight blocks a thread, the blocks), runs a group of weight blocks over all of a
// thread's tiles before the next group (up to 4 blocks, as many as keep their weights in L2: 36 KB
// a block of a 64-channel 3x3 layer, 288 KB at 512 channels; each tile's pointers and border copies
// made once for the group), and steps the k-loop by kernel rows where the pixels lie side by side
// (column dilation 1), else by taps. A tile off the border gets its positions' base pointers (the
// steps' offsets are shared); one on the border a table of each step's pointer: the zero-point row
// for a step wholly in the padding, a copy for a row in part in it. Positions are stepped as
// (image, row, column) counters, not divided out a position. Each block's sums of 4 tiles are
// requantized together, not in the tile, where the requantization's latency shows
// (bench/RESULTS.md, int8 kernels: the channels-last engine).
#include <omp.h>

#include <cstring>
#include <vector>

#include "int8_conv/int8_conv_kernels.h"
#include "int8_conv/int8_conv_nhwc.h"

namespace tianyuan {
namespace int8 {

namespace {

constexpr int64_t kGroup = 4, kHeld = 4, kL2Weights = 640 << 10;

// What a call's threads share.
struct Plan {
    const uint8_t* x;
    int64_t si, sy, sx;  // x's image, row and pixel strides (its channels': 1)
    const ConvGeom* g;
    uint8_t z;
    // the k-loop: `steps` steps of `sq` quads, step s at soff[s] from a position's base, kernel
    // row sky[s] and column skx[s] (-1: a whole kernel row, kw * C bytes)
    bool rows;
    int64_t steps, sq;
    std::vector<int64_t> soff, sky, skx;
    const int8_t* form;  // the weights in the steps' form, blocks wbytes apart
    int64_t wbytes, group;
    // the border: a step's quads may read past its bytes (`over`, zero weights), never past
    // `readable`; positions off it read at most `reach` past their base; zrow: the zero point
    bool over;
    const uint8_t* readable;
    int64_t reach, oy0, oy1, ox0, ox1;  // the output rows and columns off the border, [0, 1)
    std::vector<uint8_t> zrow;
    std::vector<int32_t> bias;  // corrected for the zero point, padded to whole blocks
    const NhwcBlockQ* q;
    const Requant* r;
    NhwcTileFn tile;
    NhwcRequantFn requant;
};

// The steps of the k-loop. Rows (pixels side by side, column dilation 1): kernel row ky, kw * C
// bytes, its taps' channels in the weights' order with C % 4 == 0 (else the rows' form). Else
// taps: C bytes each.
void plan_steps(Plan& p, const ConvGeom& g, const int8_t* wp) {
    p.rows = g.dw == 1 && p.sx == g.c;
    p.steps = p.rows ? g.kh : g.kh * g.kw;
    p.sq = p.rows ? nhwc_row_quads(g.c, g.kw) : nhwc_quads(g.c);
    p.form = wp + nhwc_form_offset(g.oc, g.c, g.kh, g.kw, p.rows);
    p.wbytes = kNhwcOc * p.steps * p.sq * 4;
    p.group = p.wbytes * kGroup <= kL2Weights ? kGroup
              : p.wbytes * 2 <= kL2Weights    ? kL2Weights / p.wbytes
                                              : 1;
    p.soff.resize(p.steps);
    p.sky.resize(p.steps);
    p.skx.resize(p.steps);
    for (int64_t s = 0; s < p.steps; ++s) {
        p.sky[s] = p.rows ? s : s / g.kw;
        p.skx[s] = p.rows ? -1 : s % g.kw;
        p.soff[s] = p.sky[s] * g.dh * p.sy + (p.rows ? 0 : p.skx[s] * g.dw * p.sx);
    }
}

// Where a step's quads hold more bytes than it reads (zero weights past them), a read could
// pass x's last byte: a tile that could takes the table, with a copy of such a step.
void plan_border(Plan& p, const ConvGeom& g) {
    p.over = 4 * p.sq > (p.rows ? g.kw * g.c : g.c);
    const auto up = [](int64_t v) { return v > 0 ? v : 0; };
    p.readable = p.x + (g.n - 1) * up(p.si) + (g.h - 1) * up(p.sy) + (g.w - 1) * up(p.sx) + g.c;
    p.reach = 0;
    for (int64_t s = 0; s < p.steps; ++s) {
        if (p.soff[s] + 4 * p.sq > p.reach) p.reach = p.soff[s] + 4 * p.sq;
    }
    const auto first_in = [](int64_t pad, int64_t s) { return (pad + s - 1) / s; };
    const auto end_in = [](int64_t last, int64_t s) { return last < 0 ? 0 : last / s + 1; };
    p.oy0 = first_in(g.pt, g.sh);
    p.ox0 = first_in(g.pl, g.sw);
    p.oy1 = end_in(g.h - 1 + g.pt - (g.kh - 1) * g.dh, g.sh);
    p.ox1 = end_in(g.w - 1 + g.pl - (g.kw - 1) * g.dw, g.sw);
    p.zrow.assign(static_cast<size_t>(4 * p.sq), p.z);
}

// Output positions as (image, row, column), stepped without divisions.
struct Cursor {
    int64_t n, oy, ox;
    void advance(const ConvGeom& g, int64_t k) {
        ox += k;
        while (ox >= g.ow) {
            ox -= g.ow;
            if (++oy == g.oh) {
                oy = 0;
                ++n;
            }
        }
    }
};

// The tile's npos positions at c, advanced past them: true, with base[m] set, where none reads
// the padding or past x's end; else false, with the positions' top-left input pixels
// (py, px, possibly outside x) and their addresses at0.
bool positions(const Plan& p, Cursor& c, int npos, const uint8_t** base, int64_t* py,
               int64_t* px, const uint8_t** at0) {
    const ConvGeom& g = *p.g;
    bool inner = true;
    for (int m = 0; m < npos; ++m) {
        py[m] = c.oy * g.sh - g.pt;
        px[m] = c.ox * g.sw - g.pl;
        at0[m] = p.x + c.n * p.si + py[m] * p.sy + px[m] * p.sx;
        inner = inner && c.oy >= p.oy0 && c.oy < p.oy1 && c.ox >= p.ox0 && c.ox < p.ox1 &&
                (!p.over || at0[m] + p.reach <= p.readable);
        c.advance(g, 1);
    }
    if (inner) {
        for (int m = 0; m < npos; ++m) base[m] = at0[m];
    }
    return inner;
}

// Position m's step pointers in tab (step s at s * kNhwcPos + m): the zero-point row for a step
// wholly in the padding, a copy in spill for a row in part in it or one that would read past
// x's end, else x itself.
void border_steps(const Plan& p, int m, int64_t py, int64_t px, const uint8_t* at0,
                  const uint8_t** tab, uint8_t* spill) {
    const ConvGeom& g = *p.g;
    for (int64_t s = 0; s < p.steps; ++s) {
        const int64_t iy = py + p.sky[s] * g.dh, k = s * kNhwcPos + m;
        const uint8_t* at = at0 + p.soff[s];
        uint8_t* copy = spill + k * p.sq * 4;
        tab[k] = at;
        if (iy < 0 || iy >= g.h) {
            tab[k] = p.zrow.data();
        } else if (p.skx[s] < 0) {  // a row: its taps in x, [lo, hi)
            const int64_t lo = px < 0 ? -px : 0, hi = px + g.kw > g.w ? g.w - px : g.kw;
            if (lo == 0 && hi == g.kw && (!p.over || at + 4 * p.sq <= p.readable)) continue;
            std::memset(copy, p.z, g.kw * g.c);
            if (hi > lo) std::memcpy(copy + lo * g.c, at + lo * g.c, (hi - lo) * g.c);
            tab[k] = copy;
        } else {
            const int64_t ix = px + p.skx[s] * g.dw;
            if (ix < 0 || ix >= g.w) {
                tab[k] = p.zrow.data();
            } else if (p.over && at + 4 * p.sq > p.readable) {
                std::memcpy(copy, at, g.c);
                tab[k] = copy;
            }
        }
    }
}

// The tile of npos positions at c, c advanced past them: most tiles lie within one output row and
// off the border, their positions' bases a column step apart (not each position's own:
// bench/RESULTS.md, the channels-last engine); else each position's base, or on the border each
// step's pointer in tab. Returns the table the tile reads, or null (base).
const uint8_t* const* place(const Plan& p, Cursor& c, int npos, const uint8_t** base,
                            const uint8_t** tab, uint8_t* spill) {
    const ConvGeom& g = *p.g;
    const int64_t xstep = g.sw * p.sx;  // between a row's consecutive positions
    const uint8_t* a =
        p.x + c.n * p.si + (c.oy * g.sh - g.pt) * p.sy + (c.ox * g.sw - g.pl) * p.sx;
    if (c.ox + npos <= g.ow && c.oy >= p.oy0 && c.oy < p.oy1 && c.ox >= p.ox0 &&
        c.ox + npos <= p.ox1 && (!p.over || a + (npos - 1) * xstep + p.reach <= p.readable)) {
        for (int m = 0; m < npos; ++m) base[m] = a + m * xstep;
        c.advance(g, npos);
        return nullptr;
    }
    const uint8_t* at0[kNhwcPos];
    int64_t py[kNhwcPos], px[kNhwcPos];
    if (positions(p, c, npos, base, py, px, at0)) return nullptr;
    for (int m = 0; m < npos; ++m) border_steps(p, m, py[m], px[m], at0[m], tab, spill);
    return tab;
}

// One thread's share: positions [p0, p1) x blocks [b0, b1).
void run_share(const Plan& p, int64_t p0, int64_t p1, int64_t b0, int64_t b1, uint8_t* out) {
    const ConvGeom& g = *p.g;
    const uint8_t* base[kNhwcPos];
    alignas(64) int32_t held[kGroup][kHeld * kNhwcPos * 64];
    std::vector<const uint8_t*> tab(p.steps * kNhwcPos);
    std::vector<uint8_t> spill(p.rows || p.over ? p.steps * kNhwcPos * p.sq * 4 : 0, 0);
    for (int64_t gb = b0; gb < b1; gb += p.group) {
        const int64_t ge = gb + p.group < b1 ? gb + p.group : b1;
        NhwcTile t{base, p.soff.data(), nullptr, p.steps, p.sq, nullptr, 0, 0, nullptr, nullptr};
        NhwcRequant rq[kGroup];
        for (int64_t b = gb; b < ge; ++b) {
            const int64_t left = g.oc - b * kNhwcOc < kNhwcOc ? g.oc - b * kNhwcOc : kNhwcOc;
            rq[b - gb] = {p.q + b, p.r, static_cast<int>((left + 15) / 16), left};
        }
        int64_t ph = p0;  // the first position whose sums are held
        Cursor c{p0 / (g.oh * g.ow), p0 % (g.oh * g.ow) / g.ow, p0 % g.ow};
        for (int64_t pos = p0; pos < p1; pos += kNhwcPos) {
            t.npos = static_cast<int>(p1 - pos < kNhwcPos ? p1 - pos : kNhwcPos);
            t.table = place(p, c, t.npos, base, tab.data(), spill.data());
            for (int64_t b = gb; b < ge; ++b) {
                t.w = p.form + b * p.wbytes;
                t.nv = rq[b - gb].nv;
                t.bias = p.bias.data() + b * kNhwcOc;
                t.sums = held[b - gb] + (pos - ph) * 64;
                p.tile(t);
            }
            if (pos + kNhwcPos - ph == kHeld * kNhwcPos || pos + kNhwcPos >= p1) {
                for (int64_t b = gb; b < ge; ++b) {
                    p.requant(held[b - gb], pos + t.npos - ph, rq[b - gb],
                              out + ph * g.oc + b * kNhwcOc, g.oc);
                }
                ph = pos + kNhwcPos;
            }
        }
    }
}

}  // namespace

void conv2d_nhwc(const uint8_t* x, const int64_t* stride, int32_t z, const ConvGeom& g,
                 const int8_t* wp, const int32_t* sums, const Requant& r, const NhwcBlockQ* q,
                 uint8_t* out) {
    Plan p{};
    p.x = x;
    p.si = stride[0];
    p.sy = stride[2];
    p.sx = stride[3];
    p.g = &g;
    p.z = static_cast<uint8_t>(z);
    p.q = q;
    p.r = &r;
    plan_steps(p, g, wp);
    plan_border(p, g);
    const int64_t nb = nhwc_blocks(g.oc), all = g.n * g.oh * g.ow;
    p.bias.assign(static_cast<size_t>(nb * kNhwcOc), 0);
    for (int64_t j = 0; j < g.oc; ++j) {  // bias - z * row sums, wrapping like the sums
        p.bias[j] = static_cast<int32_t>(static_cast<uint32_t>(r.bias[j]) -
                                         static_cast<uint32_t>(z) * static_cast<uint32_t>(sums[j]));
    }
    p.tile = conv_kernels().nhwc_tile;
    p.requant = conv_kernels().nhwc_requant;
    const int64_t threads = omp_get_max_threads();
    const bool by_block = all < 8 * kNhwcPos * threads && nb >= 2 * threads;
#pragma omp parallel num_threads(threads)
    {
        const int64_t me = omp_get_thread_num(), nt = omp_get_num_threads();
        if (by_block) {
            run_share(p, 0, all, nb * me / nt, nb * (me + 1) / nt, out);
        } else {
            const int64_t p0 = all * me / nt / kNhwcPos * kNhwcPos;
            const int64_t p1 = me + 1 == nt ? all : all * (me + 1) / nt / kNhwcPos * kNhwcPos;
            run_share(p, p0, p1, 0, nb, out);
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
