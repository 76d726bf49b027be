// int8 convolution on AMX tiles for layers of few input channels (the stem), the rows form
// (int8_amx.h, conv2d_amx_rows): C-contiguous x in, channels-last out.
//
// A tile row (64 u8 of k for one position) is read straight from a copy of the input, the
// row planes: per image, plane row r and padded column xc hold P = R * C bytes, (j, c) at
// byte j * C + c being xpad[c][r + j][xc] (R consecutive padded rows of every channel). Then
// output position (oy, ox) over kernel rows [g R, g R + R) is the 64 bytes at plane row
// sh * oy + g * R, column sw * ox: kernel column kx of kernel row g R + j, channel c at byte
// kx * P + j * C + c (kw * P <= 64; the bytes past kw * P, and the rows past kh, meet zero
// weights), and a tile's 16 positions of one output row lie sw * P bytes apart: the tile loads
// read the copy as it lies, no block of k-quads is packed. The stem (3 channels, 7x7, stride
// 2): R = 3, P = 9, 3 chunks of 64 (147 k of 192: the packed blocks' count too).
// The copy is a 9-way interleave (64 columns at a time: each of the P output vectors takes
// its bytes from the P source rows by masked byte permutes, vpermb). Work items: 2 units
// (16 positions of an output row) x 32 output channels, the accumulator rows (positions)
// requantized and stored as each position's run of channels (int8_requant_amx.h).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "int8_amx/int8_amx.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

namespace {

struct RowsPlan {
    int64_t r, p, chunks;  // padded rows a plane row holds, its bytes a column, chunks of 64 k
    int64_t hz, wz;        // plane rows and columns per image
    int64_t image;         // bytes per image (and slack at the end of the batch's planes)
    int64_t upr, units, pairs, oblocks;  // units of 16 positions a row, an image; items
};

int64_t rows_r(const ConvGeom& g) { return std::min(g.kh, kAmxK / (g.kw * g.c)); }

RowsPlan rows_plan(const ConvGeom& g) {
    RowsPlan p;
    p.r = rows_r(g);
    p.p = p.r * g.c;
    p.chunks = (g.kh + p.r - 1) / p.r;
    p.hz = g.sh * (g.oh - 1) + (p.chunks - 1) * p.r + 1;
    p.wz = g.sw * (g.ow - 1) + (kAmxK + p.p - 1) / p.p;
    p.image = p.hz * p.wz * p.p;
    p.upr = (g.ow + 15) / 16;
    p.units = g.oh * p.upr;
    p.pairs = (p.units + 1) / 2;
    p.oblocks = g.oc / kAmxOc;
    return p;
}

// The interleave's permutes: output vector o of a 64-column block takes byte b from source row
// s = (64 o + b) % P at lane (64 o + b) / P.
struct RowsTables {
    std::vector<__m512i> idx;
    std::vector<__mmask64> mask;
    explicit RowsTables(int64_t p) : idx(p * p), mask(p * p, 0) {
        alignas(64) uint8_t lanes[64];
        for (int64_t o = 0; o < p; ++o) {
            for (int64_t s = 0; s < p; ++s) {
                __mmask64 m = 0;
                for (int64_t b = 0; b < 64; ++b) {
                    const int64_t at = 64 * o + b;
                    lanes[b] = static_cast<uint8_t>(at / p);
                    if (at % p == s) m |= __mmask64{1} << b;
                }
                idx[o * p + s] = _mm512_load_si512(lanes);
                mask[o * p + s] = m;
            }
        }
    }
};

// Every P's tables (P <= 16, amx_rows_takes), made once per process: per call they had cost
// 5184 byte steps at P = 9.
const RowsTables& rows_tables(int64_t p) {
    static const std::vector<RowsTables> all = [] {
        std::vector<RowsTables> v;
        for (int64_t q = 1; q <= 16; ++q) v.emplace_back(q);
        return v;
    }();
    return all[static_cast<size_t>(p - 1)];
}

// Plane row r of image n: source row s = (j, c) is xpad[c][r + j], z outside the input.
void rows_plane_row(const uint8_t* x, uint8_t z, const ConvGeom& g, const RowsPlan& p,
                    const RowsTables& t, int64_t n, int64_t r, uint8_t* dst) {
    const __m512i vz = _mm512_set1_epi8(static_cast<char>(z));
    __m512i src[16];
    for (int64_t x0 = 0; x0 < p.wz; x0 += 64) {
        // input columns x0 + l - pl inside [0, w)
        const int64_t a0 = std::max<int64_t>(0, g.pl - x0), a1 = std::min<int64_t>(64, g.pl +
                                                                                      g.w - x0);
        const __mmask64 in = a1 > a0 ? low_mask64(a1) & ~low_mask64(a0) : 0;
        for (int64_t s = 0; s < p.p; ++s) {
            const int64_t c = s % g.c, iy = r + s / g.c - g.pt;
            src[s] = iy >= 0 && iy < g.h
                         ? _mm512_mask_loadu_epi8(vz, in,
                                                  x + ((n * g.c + c) * g.h + iy) * g.w + x0 - g.pl)
                         : vz;
        }
        const int64_t bytes = std::min<int64_t>(64, p.wz - x0) * p.p;
        uint8_t* out = dst + x0 * p.p;
        for (int64_t o = 0; 64 * o < bytes; ++o) {
            __m512i v = _mm512_setzero_si512();
            for (int64_t s = 0; s < p.p; ++s) {
                v = _mm512_mask_permutexvar_epi8(v, t.mask[o * p.p + s], t.idx[o * p.p + s],
                                                 src[s]);
            }
            _mm512_mask_storeu_epi8(out + 64 * o, low_mask64(bytes - 64 * o), v);
        }
    }
}

}  // namespace

bool amx_rows_takes(const ConvGeom& g) {
    return g.groups == 1 && g.oc % kAmxOc == 0 && g.kh * g.kw > 1 && g.dh == 1 && g.dw == 1 &&
           g.kw * g.c <= kAmxK && rows_r(g) * g.c <= 16;
}

bool amx_rows_wins(const ConvGeom& g) { return amx_rows_takes(g) && g.c <= 4; }

int64_t amx_rows_size(int64_t oc, int64_t c, int64_t kh, int64_t kw) {
    ConvGeom g{};
    g.c = c;
    g.kh = kh;
    g.kw = kw;
    const int64_t r = rows_r(g);
    return oc * (kh + r - 1) / r * kAmxK;
}

void amx_rows_weights(const int8_t* packed, int64_t oc, int64_t c, int64_t kh, int64_t kw,
                      int8_t* dst) {
    ConvGeom g{};
    g.c = c;
    g.kh = kh;
    g.kw = kw;
    const int64_t r = rows_r(g), p = r * c, chunks = (kh + r - 1) / r;
    const int64_t taps = kh * kw, kp = round_up(c * taps, kGroup);
    for (int64_t j = 0; j < oc; ++j) {
        // row j of the packed layout (int8_cgemm.h): its k-quads rb words apart in its block
        const int64_t blk = j / kOcBlock, rb = std::min(kOcBlock, oc - blk * kOcBlock);
        const int8_t* row = packed + blk * kOcBlock * kp + j % kOcBlock * kGroup;
        const int64_t ob = j / kAmxOc, h = j % kAmxOc / 16, o = j % 16;
        for (int64_t cc = 0; cc < chunks; ++cc) {
            for (int64_t b = 0; b < kAmxK; ++b) {
                // byte b of a tile row: kernel column b / P, row cc R + (b % P) / C, channel
                const int64_t kx = b / p, ky = cc * r + b % p / c, ch = b % c;
                int8_t v = 0;
                if (kx < kw && ky < kh) {  // k: (c, i, j) order, or (c / 4, i, j, c % 4)
                    const int64_t t = ky * kw + kx;
                    const int64_t k = c % 4 ? ch * taps + t : (ch / 4 * taps + t) * 4 + ch % 4;
                    v = row[k / kGroup * rb * kGroup + k % kGroup];
                }
                dst[(ob * chunks + cc) * 2048 + h * 1024 + b / 4 * 64 + o * 4 + b % 4] = v;
            }
        }
    }
}

void conv2d_amx_rows(const uint8_t* x, uint8_t z, const ConvGeom& g, const int8_t* wrows,
                     const int32_t* bias, const Requant& r, uint8_t* out, bool emulate) {
    const RowsPlan p = rows_plan(g);
    const RowsTables& tables = rows_tables(p.p);
    // slack: a tile's last rows read up to 16 sw P + 64 bytes past a plane row's end
    uint8_t* planes = thread_space(Space::amx, g.n * p.image + 16 * g.sw * p.p + kAmxK);
    const auto item = emulate ? amx_item_emulated : amx_item_tiles;
    const auto store = emulate ? amx_store_emulated : amx_store_tiles;
    const int64_t items = g.n * p.pairs * p.oblocks, lda = g.sw * p.p;
    const int64_t plane_out = g.oh * g.ow;
    std::vector<int64_t> soff(static_cast<size_t>(p.chunks));  // a chunk: R plane rows on
    for (int64_t cc = 0; cc < p.chunks; ++cc) soff[cc] = cc * p.r * p.wz * p.p;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < g.n * p.hz; ++t) {
            rows_plane_row(x, z, g, p, tables, t / p.hz, t % p.hz,
                           planes + t / p.hz * p.image + t % p.hz * p.wz * p.p);
        }
        if (!emulate) amx_tiles_begin();
        const int64_t threads = omp_get_num_threads(), tid = omp_get_thread_num();
        const int64_t first = items * tid / threads, last = items * (tid + 1) / threads;
        alignas(64) int32_t acc[2][kAmxPos * kAmxOc];
        int64_t offs[2][kAmxPos];
        int w = 0, slot = 0;
        int64_t offs_pair = -1;
        AmxPending pending{nullptr, {}, &r, nullptr, 0, nullptr};
        for (int64_t it = first; it < last; ++it) {
            // items: (image, pair of units, channel block), the channel blocks innermost
            const int64_t ob = it % p.oblocks, pair = it / p.oblocks % p.pairs;
            const int64_t n = it / (p.oblocks * p.pairs);
            const uint8_t* a[2];
            const int64_t at = n * p.pairs + pair;
            if (at != offs_pair) w ^= 1;
            for (int h = 0; h < 2; ++h) {
                const int64_t u = std::min(2 * pair + h, p.units - 1);  // a missing unit: junk
                const int64_t oy = u / p.upr, ox0 = u % p.upr * 16;
                a[h] = planes + n * p.image + (g.sh * oy * p.wz + g.sw * ox0) * p.p;
                if (at == offs_pair) continue;
                for (int64_t i = 0; i < 16; ++i) {
                    offs[w][16 * h + i] = 2 * pair + h < p.units && ox0 + i < g.ow
                                              ? (oy * g.ow + ox0 + i) * g.oc
                                              : -1;
                }
            }
            offs_pair = at;
            item(a[0], a[1], lda, soff.data(), p.chunks, wrows + ob * p.chunks * 2048,
                 pending.acc ? &pending : nullptr);
            store(acc[slot]);
            const int64_t c0 = ob * kAmxOc;
            pending.acc = acc[slot];
            pending.q = RowParams{bias + c0, r.multiplier + c0, r.shift + c0};
            pending.base = out + n * plane_out * g.oc + c0;
            pending.offs = offs[w];
            slot ^= 1;
        }
        if (pending.acc) amx_requant(pending);
        if (!emulate) amx_tiles_end();
    }
}

}  // namespace int8
}  // namespace tianyuan
