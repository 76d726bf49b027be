// The channels-last int8 convolution's packing, driver and generic tile (int8_conv_nhwc.h).
// The driver splits the output positions into one contiguous share a thread (or, with fewer
// positions than 8 tiles a thread and 2 or more weight blocks a thread, the blocks), runs a
// group of weight blocks over all of a thread's tiles before the next group (up to 4 blocks,
// as many as keep their weights in L2: 36 KB a block of a 64-channel 3x3 layer, 288 KB at 512
// channels; each tile's pointers and border copies made once for the group: ResNet-18's
// layers 2-4 0.97-0.98x their time with one block a pass), and steps the k-loop by kernel rows
// where the pixels lie side by side (column dilation 1), else by taps.
// A tile off the border gets its positions' base pointers (the steps' offsets are shared); one
// on the border a table of each step's pointer: the zero-point row for a step wholly in the
// padding, a copy for a row in part in it. Positions are stepped as (image, row, column)
// counters: divisions a position had made the 56x56 layers' set-up cost 7 % of their time.
#include <omp.h>

#include <cstring>
#include <vector>

#include "cpu.h"
#include "int8_conv_nhwc.h"

namespace tianyuan {
namespace int8 {

namespace {

int64_t block_vectors(int64_t oc, int64_t b) {
    const int64_t n = oc - b * kNhwcOc < kNhwcOc ? oc - b * kNhwcOc : kNhwcOc;
    return (n + 15) / 16;
}

// One form of the weights: per block, `steps` steps of `quads` quads each; byte i of a step
// is weight `at(step, i)` of the output channel ((channel, tap) -> index into the channel's
// C * kh * kw weights), or -1 for a zero.
template <class At>
void pack_form(const int8_t* w, int64_t oc, int64_t k, int64_t steps, int64_t quads, At at,
               int8_t* out) {
    for (int64_t b = 0; b * kNhwcOc < oc; ++b) {
        const int64_t lanes = 16 * block_vectors(oc, b);
        int8_t* blk = out + b * kNhwcOc * steps * quads * 4;
        for (int64_t j = 0; j < lanes && b * kNhwcOc + j < oc; ++j) {
            const int8_t* row = w + (b * kNhwcOc + j) * k;
            for (int64_t t = 0; t < steps; ++t) {
                for (int64_t i = 0; i < 4 * quads; ++i) {
                    const int64_t src = at(t, i);
                    blk[((t * quads + i / 4) * lanes + j) * 4 + i % 4] = src < 0 ? 0 : row[src];
                }
            }
        }
    }
}

// The forms' offsets from the blob's start: by tap, then by pixel row (C % 4 != 0).
struct Forms {
    int64_t taps, rows, size;
};
Forms forms(int64_t oc, int64_t c, int64_t kh, int64_t kw) {
    const int64_t lanes = (oc + 15) / 16 * 16;
    Forms f{0, 0, lanes * kh * kw * nhwc_quads(c) * 4};
    f.rows = c % 4 ? f.size : 0;
    f.size += c % 4 ? lanes * kh * nhwc_row_quads(c, kw) * 4 : 0;
    return f;
}
}  // namespace

int64_t nhwc_packed_size(int64_t oc, int64_t c, int64_t kh, int64_t kw) {
    return forms(oc, c, kh, kw).size;
}

void nhwc_pack_weights(const int8_t* w, int64_t oc, int64_t c, int64_t kh, int64_t kw,
                       int8_t* out) {
    const Forms f = forms(oc, c, kh, kw);
    std::memset(out, 0, static_cast<size_t>(f.size));
    const int64_t taps = kh * kw, k = c * taps;
    // by tap: channel i of tap t (w's (o, i, t)), zero past C
    pack_form(w, oc, k, taps, nhwc_quads(c),
              [&](int64_t t, int64_t i) { return i < c ? i * taps + t : -1; }, out + f.taps);
    // by pixel row: byte i of row r is tap (r, i / C)'s channel i % C, zero past kw * C
    if (c % 4) {
        pack_form(w, oc, k, kh, nhwc_row_quads(c, kw), [&](int64_t r, int64_t i) {
            return i < kw * c ? i % c * taps + r * kw + i / c : -1;
        }, out + f.rows);
    }
}

void nhwc_tile_generic(const NhwcTile& t) {
    const int64_t lanes = 16 * t.nv;
    for (int m = 0; m < t.npos; ++m) {
        for (int64_t j = 0; j < lanes; ++j) {
            uint32_t acc = static_cast<uint32_t>(t.bias[j]);  // wraps like vpdpbusd
            for (int64_t k = 0; k < t.steps; ++k) {
                const uint8_t* a = t.table ? t.table[k * kNhwcPos + m] : t.base[m] + t.soff[k];
                const int8_t* b = t.w + k * t.quads * lanes * 4 + j * 4;
                for (int64_t q = 0; q < t.quads; ++q) {
                    for (int i = 0; i < 4; ++i) {
                        acc += static_cast<uint32_t>(static_cast<int32_t>(a[4 * q + i]) *
                                                     b[q * lanes * 4 + i]);
                    }
                }
            }
            t.sums[m * 64 + j] = static_cast<int32_t>(acc);
        }
    }
}

void nhwc_requant_generic(const int32_t* sums, int64_t npos, const NhwcRequant& q,
                          uint8_t* out, int64_t ldo) {
    for (int64_t p = 0; p < npos; ++p) {
        for (int64_t j = 0; j < q.nbytes; ++j) {
            out[p * ldo + j] =
                requant_one(sums[p * 64 + j], 0, q.q->mult[j], q.q->shift[j], *q.r);
        }
    }
}

void nhwc_block_q(const Requant& r, int64_t oc, NhwcBlockQ* q) {
    for (int64_t b = 0; b < nhwc_blocks(oc); ++b) {
        NhwcBlockQ& k = q[b];
        k.fold = true;
        for (int64_t j = 0; j < kNhwcOc; ++j) {
            const bool real = b * kNhwcOc + j < oc;
            k.mult[j] = real ? r.multiplier[b * kNhwcOc + j] : 0;
            k.shift[j] = real ? r.shift[b * kNhwcOc + j] : 33;
            k.fold = k.fold && k.shift[j] >= 33;
        }
        for (int64_t j = 0; j < kNhwcOc; ++j) {
            const int32_t s = k.shift[j];
            k.mult_odd[j] = j % 2 ? 0 : k.mult[j + 1];  // _mm512_srli_epi64(mult, 32)
            k.half_hi[j] = s >= 33 && s - 33 < 32 ? static_cast<int32_t>(1u << (s - 33)) : 0;
            k.shift_hi[j] = s - 32;
        }
    }
}

bool nhwc_fast() { return current_isa() >= Isa::vnni; }

void conv2d_nhwc(const uint8_t* x, const int64_t* stride, int32_t z, const ConvGeom& g,
                 const int8_t* wp, const int32_t* sums, const Requant& r, const NhwcBlockQ* q,
                 uint8_t* out) {
    const int64_t taps = g.kh * g.kw, nb = nhwc_blocks(g.oc);
    const int64_t si = stride[0], sy = stride[2], sx = stride[3];  // stride[1] (channels): 1
    const int64_t padded = nb * kNhwcOc, ohw = g.oh * g.ow, all = g.n * ohw;
    // the bias corrected for the input zero point, padded to whole blocks
    std::vector<int32_t> bias(padded, 0);
    for (int64_t j = 0; j < g.oc; ++j) {
        bias[j] = static_cast<int32_t>(static_cast<uint32_t>(r.bias[j]) -
                                       static_cast<uint32_t>(z) * static_cast<uint32_t>(sums[j]));
    }
    // The steps of the k-loop. Rows (pixels side by side, column dilation 1): kernel row ky,
    // kw * C bytes, its taps' channels in the weights' order with C % 4 == 0 (else the rows'
    // form). Else taps: C bytes each.
    const Forms f = forms(g.oc, g.c, g.kh, g.kw);
    const bool rows = g.dw == 1 && sx == g.c;
    const int64_t steps = rows ? g.kh : taps;
    const int64_t sq = rows ? nhwc_row_quads(g.c, g.kw) : nhwc_quads(g.c);
    const int8_t* form = wp + (rows && g.c % 4 ? f.rows : f.taps);
    std::vector<int64_t> soff(steps), sky(steps), skx(steps);  // skx -1: a row
    for (int64_t s = 0; s < steps; ++s) {
        sky[s] = rows ? s : s / g.kw;
        skx[s] = rows ? -1 : s % g.kw;
        soff[s] = sky[s] * g.dh * sy + (rows ? 0 : skx[s] * g.dw * sx);
    }
    const int64_t step_bytes = rows ? g.kw * g.c : g.c;
    std::vector<uint8_t> zrow(4 * sq, static_cast<uint8_t>(z));
    // Where a step's quads hold more bytes than it reads (zero weights past them), a read
    // could pass x's last byte: a tile that could takes the table, with a copy of such a step.
    const bool over = 4 * sq > step_bytes;
    const auto up = [](int64_t v) { return v > 0 ? v : 0; };
    const uint8_t* readable =
        x + (g.n - 1) * up(si) + (g.h - 1) * up(sy) + (g.w - 1) * up(sx) + g.c;
    int64_t reach = 0;  // the farthest a position's reads end past its base
    for (int64_t s = 0; s < steps; ++s) {
        if (soff[s] + 4 * sq > reach) reach = soff[s] + 4 * sq;
    }
    // the output rows and columns none of whose taps fall in the padding
    const auto first_in = [](int64_t pad, int64_t s) { return (pad + s - 1) / s; };
    const int64_t oy0 = first_in(g.pt, g.sh), ox0 = first_in(g.pl, g.sw);
    const auto end_in = [](int64_t last, int64_t s) { return last < 0 ? 0 : last / s + 1; };
    const int64_t oy1 = end_in(g.h - 1 + g.pt - (g.kh - 1) * g.dh, g.sh);  // exclusive
    const int64_t ox1 = end_in(g.w - 1 + g.pl - (g.kw - 1) * g.dw, g.sw);
    const bool fast = nhwc_fast();
    const NhwcTileFn tile = fast ? nhwc_tile_vnni : nhwc_tile_generic;
    const NhwcRequantFn requant = fast ? nhwc_requant_vnni : nhwc_requant_generic;
    const int64_t threads = omp_get_max_threads();
    const bool by_block = all < 8 * kNhwcPos * threads && nb >= 2 * threads;
#pragma omp parallel num_threads(threads)
    {
        const int64_t me = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t p0 = 0, p1 = all, b0 = 0, b1 = nb;
        if (by_block) {
            b0 = nb * me / nt;
            b1 = nb * (me + 1) / nt;
        } else {
            p0 = all * me / nt / kNhwcPos * kNhwcPos;
            p1 = me + 1 == nt ? all : all * (me + 1) / nt / kNhwcPos * kNhwcPos;
        }
        const uint8_t* base[kNhwcPos];
        const int64_t xstep = g.sw * sx;  // between a row's consecutive positions
        // The blocks of a pass over the positions: as many as keep their weights in L2 (up to
        // kGroup), so that a border tile's table and copies are made once for all of them.
        // Each block's sums of up to kHeld tiles are requantized together.
        constexpr int64_t kGroup = 4, kHeld = 4, kL2Weights = 640 << 10;
        const int64_t wbytes = kNhwcOc * steps * sq * 4;  // a block's weights
        const int64_t group = wbytes * kGroup <= kL2Weights ? kGroup
                              : wbytes * 2 <= kL2Weights  ? kL2Weights / wbytes
                                                          : 1;
        alignas(64) int32_t held[kGroup][kHeld * kNhwcPos * 64];
        std::vector<const uint8_t*> tab(steps * kNhwcPos);
        // copies of steps in part in the padding or at x's end
        std::vector<uint8_t> spill(rows || over ? steps * kNhwcPos * sq * 4 : 0, 0);
        for (int64_t gb = b0; gb < b1; gb += group) {
            const int64_t ge = gb + group < b1 ? gb + group : b1;
            NhwcTile t{base, soff.data(), nullptr, steps, sq, nullptr, 0, 0, nullptr, nullptr};
            NhwcRequant rq[kGroup];
            for (int64_t b = gb; b < ge; ++b) {
                const int64_t o0 = b * kNhwcOc;
                rq[b - gb] = {q + b, &r, static_cast<int>(block_vectors(g.oc, b)),
                              g.oc - o0 < kNhwcOc ? g.oc - o0 : kNhwcOc};
            }
            int64_t ph = p0;  // the first position whose sums are held
            const auto run = [&](int64_t p) {  // the tile at position p, for each block
                for (int64_t b = gb; b < ge; ++b) {
                    t.w = form + b * wbytes;
                    t.nv = rq[b - gb].nv;
                    t.bias = bias.data() + b * kNhwcOc;
                    t.sums = held[b - gb] + (p - ph) * 64;
                    tile(t);
                }
                if (p + kNhwcPos - ph == kHeld * kNhwcPos || p + kNhwcPos >= p1) {
                    for (int64_t b = gb; b < ge; ++b) {
                        requant(held[b - gb], p + t.npos - ph, rq[b - gb],
                                out + ph * g.oc + b * kNhwcOc, g.oc);
                    }
                    ph = p + kNhwcPos;
                }
            };
            // the tile's positions as (image, row, column), stepped without divisions
            int64_t n = p0 / ohw, oy = p0 % ohw / g.ow, ox = p0 % g.ow;
            for (int64_t p = p0; p < p1; p += kNhwcPos) {
                t.npos = static_cast<int>(p1 - p < kNhwcPos ? p1 - p : kNhwcPos);
                // most tiles: within one output row and off the border, the positions' bases
                // a column step apart (each position's own had cost the stem 4 %)
                const uint8_t* a = x + n * si + (oy * g.sh - g.pt) * sy + (ox * g.sw - g.pl) * sx;
                if (ox + t.npos <= g.ow && oy >= oy0 && oy < oy1 && ox >= ox0 &&
                    ox + t.npos <= ox1 && (!over || a + (t.npos - 1) * xstep + reach <= readable)) {
                    for (int m = 0; m < t.npos; ++m) base[m] = a + m * xstep;
                    t.table = nullptr;
                    ox += t.npos;
                    if (ox == g.ow) {
                        ox = 0;
                        if (++oy == g.oh) {
                            oy = 0;
                            ++n;
                        }
                    }
                    run(p);
                    continue;
                }
                const uint8_t* at0[kNhwcPos];
                int64_t py[kNhwcPos], px[kNhwcPos];
                bool inner = true;
                for (int m = 0; m < t.npos; ++m) {
                    py[m] = oy * g.sh - g.pt;
                    px[m] = ox * g.sw - g.pl;
                    at0[m] = x + n * si + py[m] * sy + px[m] * sx;
                    inner = inner && oy >= oy0 && oy < oy1 && ox >= ox0 && ox < ox1 &&
                            (!over || at0[m] + reach <= readable);
                    if (++ox == g.ow) {
                        ox = 0;
                        if (++oy == g.oh) {
                            oy = 0;
                            ++n;
                        }
                    }
                }
                t.table = inner ? nullptr : tab.data();
                for (int m = 0; m < t.npos; ++m) {
                    if (inner) {
                        base[m] = at0[m];
                        continue;
                    }
                    for (int64_t s = 0; s < steps; ++s) {
                        const int64_t iy = py[m] + sky[s] * g.dh, k = s * kNhwcPos + m;
                        const uint8_t* at = at0[m] + soff[s];
                        uint8_t* copy = spill.data() + k * sq * 4;
                        if (iy < 0 || iy >= g.h) {
                            tab[k] = zrow.data();
                        } else if (skx[s] < 0) {  // a row: its taps in x, [lo, hi)
                            const int64_t lo = px[m] < 0 ? -px[m] : 0;
                            const int64_t hi = px[m] + g.kw > g.w ? g.w - px[m] : g.kw;
                            if (lo == 0 && hi == g.kw && (!over || at + 4 * sq <= readable)) {
                                tab[k] = at;
                                continue;
                            }
                            std::memset(copy, z, g.kw * g.c);
                            if (hi > lo) {
                                std::memcpy(copy + lo * g.c, at + lo * g.c, (hi - lo) * g.c);
                            }
                            tab[k] = copy;
                        } else {
                            const int64_t ix = px[m] + skx[s] * g.dw;
                            if (ix < 0 || ix >= g.w) {
                                tab[k] = zrow.data();
                            } else if (over && at + 4 * sq > readable) {
                                std::memcpy(copy, at, g.c);
                                tab[k] = copy;
                            } else {
                                tab[k] = at;
                            }
                        }
                    }
                }
                run(p);
            }
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
