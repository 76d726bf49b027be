// int8 linear on packed weights: the dispatched GEMM into s32 (M, Np) and requantization
// with the zero-point correction folded into the bias; the generic depthwise convolution
// (direct loops: one channel's K is tiny). Convolution itself lives in int8_cgemm.cpp.
#include <cstring>
#include <memory>
#include <vector>

#include "cpu.h"
#include "int8_cgemm.h"
#include "int8_ops.h"

namespace tianyuan {
namespace int8 {
namespace {

uint8_t flip_of(const QIn& x) { return x.is_signed ? 0x80 : 0; }
int32_t zero_of(const QIn& x) { return x.zero_point + (x.is_signed ? 128 : 0); }

// bias - z * row_sums, modulo 2^32: exact whenever the corrected result fits int32.
std::vector<int32_t> corrected_bias(const int32_t* bias, const int32_t* row_sums, int64_t n,
                                    int32_t z) {
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
        const uint32_t b = bias ? static_cast<uint32_t>(bias[j]) : 0u;
        out[j] = static_cast<int32_t>(b - static_cast<uint32_t>(z) * static_cast<uint32_t>(row_sums[j]));
    }
    return out;
}

// x (M, K) as GEMM rows (M, kp) u8: x itself when it is u8 and K % 4 == 0, else a copy
// in `buf` with the sign bit flipped for signed input and zeros past K.
const uint8_t* as_rows(const QIn& x, int64_t m, int64_t k, int64_t kp,
                       std::vector<uint8_t>& buf) {
    if (!x.is_signed && k == kp) return x.data;
    buf.assign(static_cast<size_t>(m * kp), 0);
    const uint8_t flip = flip_of(x);
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t q = 0; q < k; ++q) buf[i * kp + q] = x.data[i * k + q] ^ flip;
    }
    return buf.data();
}

// Uninitialised s32 scratch (value-initialising a std::vector would touch it twice).
std::unique_ptr<int32_t[]> scratch(int64_t size) {
    return std::unique_ptr<int32_t[]>(new int32_t[static_cast<size_t>(size)]);
}

}  // namespace

void gemm_s32(const QIn& x, int64_t m, int64_t k, const int8_t* packed, const int32_t* row_sums,
              int64_t n, int32_t* c) {
    const int64_t kp = round_up(k, kGroup);
    const int64_t np = round_up(n, kPanel);
    std::vector<uint8_t> buf;
    const uint8_t* rows = as_rows(x, m, k, kp, buf);
    const std::unique_ptr<int32_t[]> acc = scratch(m * np);
    gemm_u8s8s32(rows, kp, m, packed, n, k, acc.get(), np);
    const std::vector<int32_t> fix = corrected_bias(nullptr, row_sums, n, zero_of(x));
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            c[i * n + j] = static_cast<int32_t>(static_cast<uint32_t>(acc[i * np + j]) +
                                                static_cast<uint32_t>(fix[j]));
        }
    }
}

void linear(const QIn& x, int64_t m, int64_t k, const int8_t* packed, const int32_t* row_sums,
            int64_t n, const int32_t* bias, const Requant& r, uint8_t* out) {
    const int64_t kp = round_up(k, kGroup);
    const int64_t np = round_up(n, kPanel);
    std::vector<uint8_t> buf;
    const uint8_t* rows = as_rows(x, m, k, kp, buf);
    const std::unique_ptr<int32_t[]> acc = scratch(m * np);
    gemm_u8s8s32(rows, kp, m, packed, n, k, acc.get(), np);
    const std::vector<int32_t> b = corrected_bias(bias, row_sums, n, zero_of(x));
    Requant rq = r;
    rq.bias = b.data();
    rq.step = 1;
    requantize(acc.get(), np, m, n, rq, false, out, n);
}

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

// SIMD path: per (image, output channel) plane, pad, then the VNNI plane kernel where it
// applies (and the ISA allows), else the AVX-512 one.
void depthwise_simd(const QIn& x, const ConvGeom& g, const int8_t* w, const int32_t* bias,
                    const Requant& r, uint8_t* out) {
    const int64_t p = g.oh * g.ow, mult = g.oc / g.c, taps = g.kh * g.kw;
    const int64_t wp = g.w + g.pl + g.pr, hp = g.h + g.pt + g.pb;
    const int32_t z = zero_of(x);
    const bool vnni = current_isa() >= Isa::vnni && depthwise_vnni_takes(g);
#pragma omp parallel for schedule(static) if (g.n * g.oc * p * taps > (1 << 15))
    for (int64_t t = 0; t < g.n * g.oc; ++t) {
        const int64_t n = t / g.oc, oc = t % g.oc;
        static thread_local std::vector<uint8_t> space;  // padded plane, then output scratch
        const int64_t need = hp * wp + kPadSlack + g.oh * wp + 64;
        if (static_cast<int64_t>(space.size()) < need) space.resize(static_cast<size_t>(need));
        pad_plane(x.data + (n * g.c + oc / mult) * g.h * g.w, g, flip_of(x),
                  static_cast<uint8_t>(z), wp, space.data());
        int32_t sum = 0;
        for (int64_t i = 0; i < taps; ++i) sum += w[oc * taps + i];
        const int32_t b = static_cast<int32_t>(static_cast<uint32_t>(bias[oc]) -
                                               static_cast<uint32_t>(z) * static_cast<uint32_t>(sum));
        const RowParams q{&b, r.multiplier + oc, r.shift + oc};
        uint8_t* scratch = space.data() + hp * wp + kPadSlack;
        if (vnni) {
            depthwise_plane_vnni(space.data(), wp, w + oc * taps, g, q, r, out + t * p, scratch);
        } else {
            depthwise_plane_avx512(space.data(), wp, w + oc * taps, g, q, r, out + t * p,
                                   scratch);
        }
    }
}

}  // namespace

void depthwise_conv2d(const QIn& x, const ConvGeom& g, const int8_t* w, const int32_t* bias,
                      const Requant& r, uint8_t* out) {
    if (current_isa() >= Isa::avx512 && (g.sw == 1 || g.sw == 2)) {
        depthwise_simd(x, g, w, bias, r, out);
        return;
    }
    const int64_t p = g.oh * g.ow, mult = g.oc / g.c;
    std::vector<int32_t> acc(static_cast<size_t>(g.oc * p));
    for (int64_t n = 0; n < g.n; ++n) {
#pragma omp parallel for schedule(static) if (g.oc * p * g.kh * g.kw > (1 << 16))
        for (int64_t oc = 0; oc < g.oc; ++oc) {
            const uint8_t* plane = x.data + (n * g.c + oc / mult) * g.h * g.w;
            depthwise_plane(plane, w + oc * g.kh * g.kw, g, flip_of(x), zero_of(x),
                            acc.data() + oc * p);
        }
        Requant rq = r;
        rq.bias = bias;
        rq.step = 1;
        requantize(acc.data(), p, g.oc, p, rq, true, out + n * g.oc * p, p);
    }
}

}  // namespace int8
}  // namespace tianyuan
