// int8 convolution on AMX tiles, the driver (layouts in int8_amx.h): the NHWC phase planes,
// the work split, the staging copy into NCHW and the weight packing (the once-per-process
// check of the real tiles against the emulated ones: int8_amx_check.cpp).
#include "int8_amx/int8_amx.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

bool amx_takes(const ConvGeom& g) {
    return g.groups == 1 && g.c % kAmxK == 0 && g.oc % kAmxOc == 0;
}

bool amx_wins(const ConvGeom& g) { return amx_takes(g) && g.kh * g.kw > 1; }

// 1x1 layers of 32 or more output channels: over 2048 or more output positions (the batch's),
// 784 or more (a 7x7 map at batch 16) with C >= 64, 64 or fewer, or where OC <= 2 C. Not 16
// or 24 output channels (one chunk of tiles, half of it wasted, against a VNNI tile of 6
// channels), nor 24 input channels, nor the other expansions at batch 1 (the store, not the
// products, is their work): bench/RESULTS.md, int8 kernels: AMX (1x1 layers).
bool amx_gemm_wins(const ConvGeom& g) {
    if (!amx_gemm_may_win(g.oc, g.c, g.kh * g.kw, g.groups)) return false;
    if (g.kh * g.kw > 1) return true;
    const int64_t positions = g.n * g.oh * g.ow;
    return positions >= 2048 || (positions >= 784 && g.c >= 64) ||
           positions <= 64 || g.oc <= 2 * g.c;
}

void amx_gemm_weights(const int8_t* packed, int64_t oc, int64_t kp, int8_t* wa) {
    const int64_t chunks = amx_gemm_chunks(kp);
    std::memset(wa, 0, static_cast<size_t>(amx_gemm_size(oc, kp)));
    for (int64_t j = 0; j < oc; ++j) {
        // row j's k-quads: rb consecutive words apart in its block of kOcBlock rows
        const int64_t b = j / kOcBlock, rb = std::min(kOcBlock, oc - b * kOcBlock);
        const int8_t* src = packed + b * kOcBlock * kp + j % kOcBlock * kGroup;
        int8_t* dst = wa + (j / kAmxOc * chunks * 2 + j % kAmxOc / 16) * 1024 + j % 16 * 64;
        for (int64_t k = 0; k < chunks * kAmxK; ++k) {
            dst[k / kAmxK * 2048 + k % kAmxK] =
                k < kp ? src[k / kGroup * rb * kGroup + k % kGroup] : 0;
        }
    }
}

int64_t amx_packed_size(int64_t oc, int64_t c, int64_t taps) { return oc * c * taps; }

void amx_pack_weights(const int8_t* w, int64_t oc, int64_t c, int64_t taps, int8_t* dst) {
    const int64_t chunks = c / kAmxK;
    for (int64_t j = 0; j < oc; ++j) {
        const int64_t ob = j / kAmxOc, h = j % kAmxOc / 16, o = j % 16;
        for (int64_t ch = 0; ch < c; ++ch) {
            const int64_t cc = ch / kAmxK, q = ch % kAmxK / 4, i = ch % 4;
            for (int64_t t = 0; t < taps; ++t) {
                dst[((ob * taps + t) * chunks + cc) * 2048 + h * 1024 + q * 64 + o * 4 + i] =
                    w[(j * c + ch) * taps + t];
            }
        }
    }
}

namespace {

struct AmxPlan {
    int64_t hph, wph, plane, phases, image, nv, vblocks, oblocks, chunks, taps;
    int64_t group;   // channel blocks whose weights stay in L2 while the positions pass
    int64_t window;  // position blocks that each block of the group passes in turn
    std::vector<int64_t> toff;  // (taps,) positions from a block's first
    std::vector<int64_t> soff;  // (taps * chunks,) the item's steps: bytes from a block's first
    std::vector<int64_t> used;  // the phases some tap reads (a 1x1 stride-2 layer: one of 4)
    // The phases the NHWC copy visits, and whether each visit writes the next phase too
    // (stride 2 with both column phases read: one transposing pass splits a row's columns).
    std::vector<int64_t> passes;
    std::vector<char> paired;
};

AmxPlan amx_plan(const ConvGeom& g) {
    AmxPlan p;
    p.hph = (g.h + g.pt + g.pb + g.sh - 1) / g.sh;
    p.wph = (g.w + g.pl + g.pr + g.sw - 1) / g.sw;
    p.plane = p.hph * p.wph;
    p.phases = g.sh * g.sw;
    p.image = p.phases * p.plane + kAmxPos;  // a block's junk rows read up to kAmxPos past
    p.nv = (g.oh - 1) * p.wph + g.ow;
    p.vblocks = (p.nv + kAmxPos - 1) / kAmxPos;
    p.oblocks = g.oc / kAmxOc;
    p.chunks = g.c / kAmxK;
    p.taps = g.kh * g.kw;
    // Work items run a group of channel blocks over every (image, position block) before the
    // next group: a block's weights are taps * C * 32 bytes (147 KB at 512 channels 3x3), and
    // with the channel blocks innermost every position block streamed all of them from L3
    // (bench/RESULTS.md, int8 kernels: AMX).
    constexpr int64_t kWeightBudget = 512 * 1024;
    const int64_t per_block = p.taps * g.c * kAmxOc;
    p.group = std::max<int64_t>(1, std::min(p.oblocks, kWeightBudget / per_block));
    // Where a block's weights (taps > 1) fit half of L1 (48 KB here) but the group's exceed
    // 2/3 of it, each block passes a window of 16 position blocks before the next does: its
    // weights stay in L1, the window's rows in L2 (ResNet-18's 64-channel 3x3 layers). Larger
    // blocks gain nothing from it and 1x1 layers lose: they keep one position block a window
    // (bench/RESULTS.md, int8 kernels: AMX windows).
    constexpr int64_t kWindow = 16;
    p.window = p.taps > 1 && per_block <= 24 * 1024 && p.group * per_block > 32 * 1024
                   ? kWindow : 1;
    p.toff.resize(static_cast<size_t>(p.taps));
    for (int64_t t = 0; t < p.taps; ++t) {
        const int64_t di = t / g.kw * g.dh, dj = t % g.kw * g.dw;
        const int64_t ph = di % g.sh * g.sw + dj % g.sw;
        p.toff[t] = ph * p.plane + di / g.sh * p.wph + dj / g.sw;
        if (std::find(p.used.begin(), p.used.end(), ph) == p.used.end()) p.used.push_back(ph);
        for (int64_t cc = 0; cc < p.chunks; ++cc) p.soff.push_back(p.toff[t] * g.c + cc * kAmxK);
    }
    const auto used = [&p](int64_t ph) {
        return std::find(p.used.begin(), p.used.end(), ph) != p.used.end();
    };
    for (int64_t ph = 0; ph < p.phases; ++ph) {
        const bool pair = g.sw == 2 && ph % 2 == 0 && used(ph) && used(ph + 1);
        if (used(ph) && !(g.sw == 2 && ph % 2 == 1 && used(ph - 1))) {
            p.passes.push_back(ph);
            p.paired.push_back(pair);
        }
    }
    return p;
}

// Image n, phase row (ph, y) of the NHWC planes, c bytes per position (paired: phase ph + 1's
// row too). At stride 1, and at stride 2 paired, the source rows of 16 channels at a time go
// straight into the byte transpose, which at stride 2 sends the even and odd padded columns
// to the two phases; otherwise the phase row of every channel is gathered into tmp (c x wph)
// first, then transposed. Stride 2 had gathered, and lost to PyTorch where stride 1 did not
// (bench/RESULTS.md, int8 kernels: AMX stride-2 planes).
void nhwc_row(const uint8_t* x, uint8_t flip, uint8_t z, const ConvGeom& g, const AmxPlan& p,
              int64_t n, int64_t ph, bool paired, int64_t y, uint8_t* tmp, uint8_t* planes) {
    const int64_t a = ph / g.sw, b = ph % g.sw, row = g.sh * y + a - g.pt;
    uint8_t* dst = planes + (n * p.image + ph * p.plane + y * p.wph) * g.c;
    const int64_t phase = paired ? p.plane * g.c : 0;  // to phase ph + 1's row
    if (row < 0 || row >= g.h) {
        std::memset(dst, z, static_cast<size_t>(p.wph * g.c));
        if (paired) std::memset(dst + phase, z, static_cast<size_t>(p.wph * g.c));
        return;
    }
    const int64_t plane_in = g.h * g.w;
    if (g.sw == 1 || paired) {  // one pass: 16 channels' rows straight into the transpose
        // padded columns [0, cols) (a phase row's worth of each phase); [lo, hi) are inside
        const int64_t cols = g.sw * p.wph, lo = g.pl, hi = g.pl + g.w;
        const uint8_t* src = x + (n * g.c * g.h + row) * g.w - g.pl;
        for (int64_t ch = 0; ch < g.c; ++ch) {  // two phase rows on, as below
            for (int64_t k = 0; k < g.w; k += 64) {
                _mm_prefetch(reinterpret_cast<const char*>(src + ch * plane_in + 2 * g.sh * g.w +
                                                           g.pl + k), _MM_HINT_T0);
            }
        }
        for (int64_t x0 = 0; x0 < cols; x0 += 64) {
            // columns [lo, hi) of this block of 64, as bits from x0
            const int64_t a0 = std::max(lo, x0) - x0, a1 = std::min(hi, x0 + 64) - x0;
            const uint64_t valid = a1 > a0 ? low_mask64(a1) & ~low_mask64(a0) : 0;
            for (int64_t c0 = 0; c0 < g.c; c0 += 16) {
                amx_transpose_rows(src + c0 * plane_in + x0, plane_in, valid, z, flip,
                                   std::min<int64_t>(64, cols - x0),
                                   dst + x0 / g.sw * g.c + c0, g.c, phase);
            }
        }
        return;
    }
    // output columns [lo, hi) read input columns sw * xx + b - pl inside the row
    int64_t lo = 0, hi = p.wph;
    while (lo < hi && g.sw * lo + b - g.pl < 0) ++lo;
    while (hi > lo && g.sw * (hi - 1) + b - g.pl >= g.w) --hi;
    const __m512i vflip = _mm512_set1_epi8(static_cast<char>(flip));
    for (int64_t ch = 0; ch < g.c; ++ch) {
        const uint8_t* src = x + ((n * g.c + ch) * g.h + row) * g.w + b - g.pl;
        uint8_t* t = tmp + ch * p.wph;
        // this channel's row two phase rows on (a thread's rows run in order): the channels
        // are more streams than the hardware prefetchers follow
        for (int64_t k = 0; k < g.w; k += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(src + 2 * g.sh * g.w + g.pl - b + k),
                         _MM_HINT_T0);
        }
        std::memset(t, z, static_cast<size_t>(lo));
        if (g.sw == 2) {  // the even bytes of 2 * 32: the low bytes of 32 words
            for (int64_t xx = lo; xx < hi; xx += 32) {
                const int64_t len = hi - xx < 32 ? hi - xx : 32;
                const __m512i v = _mm512_maskz_loadu_epi8(low_mask64(2 * len - 1), src + 2 * xx);
                _mm256_mask_storeu_epi8(t + xx, static_cast<__mmask32>(low_mask64(len)),
                                        _mm256_xor_si256(_mm512_cvtepi16_epi8(v),
                                                         _mm512_castsi512_si256(vflip)));
            }
        } else {
            for (int64_t xx = lo; xx < hi; ++xx) t[xx] = src[g.sw * xx] ^ flip;
        }
        std::memset(t + hi, z, static_cast<size_t>(p.wph - hi));
    }
    amx_transpose(tmp, g.c, p.wph, dst);
}

// The same row from a channels-last x (byte strides xs, xs[1] == 1): each position's c bytes
// copied as they lie (one run at stride 1 where the pixels are packed), z outside the input.
void nhwc_row_cl(const uint8_t* x, const int64_t* xs, uint8_t z, const ConvGeom& g,
                 const AmxPlan& p, int64_t n, int64_t ph, int64_t y, uint8_t* planes) {
    const int64_t a = ph / g.sw, b = ph % g.sw, row = g.sh * y + a - g.pt;
    uint8_t* dst = planes + (n * p.image + ph * p.plane + y * p.wph) * g.c;
    int64_t lo = 0, hi = 0;  // the columns whose input column sw * xx + b - pl lies inside
    if (row >= 0 && row < g.h) {
        hi = p.wph;
        while (lo < hi && g.sw * lo + b - g.pl < 0) ++lo;
        while (hi > lo && g.sw * (hi - 1) + b - g.pl >= g.w) --hi;
    }
    std::memset(dst, z, static_cast<size_t>(lo * g.c));
    if (hi > lo) {
        const uint8_t* src = x + n * xs[0] + row * xs[2] + (g.sw * lo + b - g.pl) * xs[3];
        if (g.sw == 1 && xs[3] == g.c) {
            std::memcpy(dst + lo * g.c, src, static_cast<size_t>((hi - lo) * g.c));
        } else {
            for (int64_t xx = lo; xx < hi; ++xx) {
                std::memcpy(dst + xx * g.c, src + (xx - lo) * g.sw * xs[3],
                            static_cast<size_t>(g.c));
            }
        }
    }
    std::memset(dst + hi * g.c, z, static_cast<size_t>((p.wph - hi) * g.c));
}

}  // namespace

void amx_offsets(int64_t v0, int64_t wph, int64_t ow, int64_t nv, int64_t oc, int64_t* offs) {
    int64_t oy = v0 / wph, ox = v0 % wph;
    for (int64_t i = 0; i < kAmxPos; ++i) {
        offs[i] = ox < ow && v0 + i < nv ? (oy * ow + ox) * oc : -1;
        if (++ox == wph) {
            ox = 0;
            ++oy;
        }
    }
}

void conv2d_amx(const uint8_t* x, uint8_t flip, uint8_t z, const ConvGeom& g,
                const int8_t* wamx, const int32_t* bias, const Requant& r, uint8_t* out,
                bool emulate, const int64_t* xs, bool out_nhwc) {
    const AmxPlan p = amx_plan(g);
    // the slack, read only for dropped positions, stays defined (grown bytes are zero)
    uint8_t* planes = thread_space(Space::amx, g.n * p.image * g.c);
    const auto item = emulate ? amx_item_emulated : amx_item_tiles;
    const auto store = emulate ? amx_store_emulated : amx_store_tiles;
    // the phases' rows to write: channels-last x, every phase a tap reads, one by one
    const std::vector<int64_t>& phs = xs ? p.used : p.passes;
    const int64_t passes = static_cast<int64_t>(phs.size());
    const int64_t rows = g.n * passes * p.hph, items = g.n * p.vblocks * p.oblocks;
    const int64_t plane_out = g.oh * g.ow, positions = g.n * p.vblocks;
    // out_nhwc: every position block's offsets in an image, made once, not per block
    std::vector<int64_t> offs(out_nhwc ? static_cast<size_t>(p.vblocks * kAmxPos) : 0);
    for (int64_t vb = 0; out_nhwc && vb < p.vblocks; ++vb) {
        amx_offsets(vb * kAmxPos, p.wph, g.ow, p.nv, g.oc, offs.data() + vb * kAmxPos);
    }
#pragma omp parallel
    {
        // the gathered phase rows of strides > 1 (stride 1 and paired passes go straight to
        // the transpose)
        const bool gather =
            !xs && g.sw > 1 && std::count(p.paired.begin(), p.paired.end(), 0) > 0;
        std::vector<uint8_t> tmp(gather ? static_cast<size_t>(g.c * p.wph) : 0);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < rows; ++t) {
            const int64_t i = t / p.hph % passes, n = t / (passes * p.hph);
            if (xs) {
                nhwc_row_cl(x, xs, z, g, p, n, phs[i], t % p.hph, planes);
            } else {
                nhwc_row(x, flip, z, g, p, n, phs[i], p.paired[i], t % p.hph, tmp.data(),
                         planes);
            }
        }
        if (!emulate) amx_tiles_begin();
        // Items in order: a group gi of channel blocks, then a window of p.window (image,
        // position block)s pos from win0 (the last may be smaller), then block k of the group
        // (the last group may be smaller), then pos = win0 + j in the window; each thread a
        // contiguous run, walked with counters, not divided out an item.
        const int64_t threads = omp_get_num_threads(), tid = omp_get_thread_num();
        const int64_t first = items * tid / threads, last = items * (tid + 1) / threads;
        const int64_t span = p.group * positions, wi = p.window;
        int64_t gi = first / span, size = std::min(p.group, p.oblocks - gi * p.group);
        const int64_t at = first % span, in_window = at % (wi * size);  // item of gi, of win0
        int64_t win0 = at / (wi * size) * wi, wsz = std::min(wi, positions - win0);
        int64_t k = in_window / wsz, j = in_window % wsz, pos = win0 + j;
        // Item i's tile loop runs item i - 1's requantizing store in pieces between its steps
        // (int8_requant_amx.h), so that the vector units store while the tiles multiply; acc:
        // the two items' sums.
        alignas(64) int32_t acc[2][kAmxPos * kAmxOc];
        AmxWindow win[2][2];  // the windows of the current and the previous position block
        int w = 0, slot = 0;
        int64_t win_pos = -1;
        AmxPending pending{nullptr, {}, &r, nullptr, plane_out, nullptr};
        for (int64_t it = first; it < last; ++it) {
            const int64_t ob = gi * p.group + k, vb = pos % p.vblocks, n = pos / p.vblocks;
            const int64_t v0 = vb * kAmxPos, c0 = ob * kAmxOc;
            const uint8_t* a = planes + (n * p.image + v0) * g.c;
            item(a, a + 16 * g.c, g.c, p.soff.data(), p.taps * p.chunks,
                 wamx + ob * p.taps * p.chunks * 2048, pending.acc ? &pending : nullptr);
            store(acc[slot]);
            if (!out_nhwc && pos != win_pos) {  // window 1: items share position blocks
                w ^= 1;
                amx_window(v0, p.wph, g.ow, p.nv, win[w][0]);
                amx_window(v0 + 16, p.wph, g.ow, p.nv, win[w][1]);
                win_pos = pos;
            }
            pending.acc = acc[slot];
            pending.q = RowParams{bias + c0, r.multiplier + c0, r.shift + c0};
            pending.base = out_nhwc ? out + n * plane_out * g.oc + c0
                                    : out + (n * g.oc + c0) * plane_out;
            pending.win = win[w];
            pending.offs = out_nhwc ? offs.data() + v0 : nullptr;
            slot ^= 1;
            if (++j == wsz) {
                j = 0;
                if (++k == size) {
                    k = 0;
                    win0 += wsz;
                    if (win0 == positions) {
                        win0 = 0;
                        ++gi;
                        size = std::min(p.group, p.oblocks - gi * p.group);
                    }
                    wsz = std::min(wi, positions - win0);
                }
            }
            pos = win0 + j;
        }
        if (pending.acc) amx_requant(pending);
        if (!emulate) amx_tiles_end();
    }
}

}  // namespace int8
}  // namespace tianyuan
