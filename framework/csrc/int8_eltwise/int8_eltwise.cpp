// int8 add (+relu), concat requantization, float -> int8 quantization and max/average
// pooling: generic C++ loops of the reference formulas (concat through a table of its
// formula), and the family's one ISA choice (fill_int8_eltwise, int8_eltwise.h): add, concat,
// quantization and max pooling (column strides 1, 2) take int8_eltwise_avx512.cpp's or
// int8_eltwise_avx2.cpp's kernels where the ISA allows, concat int8_lut_vbmi.cpp's from the
// vnni level up where the CPU has VBMI.
#include "int8_eltwise/int8_eltwise.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/cpu.h"
#include "runtime/dispatch.h"

namespace tianyuan {
namespace int8 {
namespace {

inline int32_t value(const QIn& x, int64_t i) {
    return x.is_signed ? static_cast<int32_t>(static_cast<int8_t>(x.data[i]))
                       : static_cast<int32_t>(x.data[i]);
}

inline int64_t round_shift(int64_t p, int32_t shift) {
    return (p + (int64_t{1} << (shift - 1))) >> shift;
}

inline uint8_t clamp_zp(int64_t y, int32_t zp, int32_t lo, int32_t hi) {
    y = y < lo - zp ? lo - zp : (y > hi - zp ? hi - zp : y);
    return static_cast<uint8_t>(static_cast<int32_t>(y) + zp);
}

// floor(a / b) for b > 0
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

void quantize_generic(const float* x, int64_t size, float scale, int32_t zp, bool out_signed,
                      uint8_t* out);
void fake_quantize_run(const FakeQuantRows& f, int64_t r, int64_t i0, int64_t i1, float* y,
                       uint8_t* inside);
void concat_lut_generic(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                        int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner);
void concat_lut_vbmi(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                     int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner);

// The family's one ISA decision. Concat takes VBMI's table lookup from the vnni level up, so
// that this machine's avx512 level still runs (and the tests check) the arithmetic kernel of
// AVX-512 CPUs without VBMI; the channels-last transpose of 3 channels likewise.
void fill_int8_eltwise(EltwiseKernels& k, Isa isa) {
    const bool vbmi = isa >= Isa::vnni && cpu_features().avx512vbmi;
    if (isa >= Isa::avx512) {
        k = {add_avx512, quantize_avx512, fake_quantize_run_avx512, concat_part_avx512,
             max_pool2d_avx512, avg_pool_runs_avx512, channels_last3_generic,
             max_pool2d_nhwc_avx512, avg_pool_global_nhwc_avx512};
    } else if (isa >= Isa::avx2) {
        k = {add_avx2, quantize_avx2, fake_quantize_run_avx2, concat_part_avx2,
             max_pool2d_avx2, avg_pool_inside_generic, channels_last3_generic,
             max_pool_nhwc_generic, avg_pool_global_nhwc_generic};
    } else {
        k = {add_generic, quantize_generic, fake_quantize_run, concat_lut_generic,
             max_pool_generic, avg_pool_inside_generic, channels_last3_generic,
             max_pool_nhwc_generic, avg_pool_global_nhwc_generic};
    }
    if (vbmi) {
        k.concat_part = concat_lut_vbmi;
        k.channels_last3 = channels_last3_vbmi;
    }
}

Dispatch<EltwiseKernels> kernels(fill_int8_eltwise);

}  // namespace

const EltwiseKernels& eltwise_kernels() { return kernels(); }

void add(const QIn& a, const QIn& b, int64_t size, const AddParams& p, uint8_t* out) {
    (a.is_signed == b.is_signed ? kernels().add : add_generic)(a, b, size, p, out);
}

void add_generic(const QIn& a, const QIn& b, int64_t size, const AddParams& p, uint8_t* out) {
#pragma omp parallel for schedule(static) if (size > (1 << 16))
    for (int64_t i = 0; i < size; ++i) {
        const int64_t s = static_cast<int64_t>(value(a, i) - a.zero_point) * p.m_a +
                          static_cast<int64_t>(value(b, i) - b.zero_point) * p.m_b;
        out[i] = clamp_zp(round_shift(s, p.shift), p.zero_point, p.lo, p.hi);
    }
}

void quantize(const float* x, int64_t size, float scale, int32_t zp, bool out_signed,
              uint8_t* out) {
    kernels().quantize(x, size, scale, zp, out_signed, out);
}

namespace {

void quantize_generic(const float* x, int64_t size, float scale, int32_t zp, bool out_signed,
                      uint8_t* out) {
    const float lo = static_cast<float>((out_signed ? -128 : 0) - zp);
    const float hi = static_cast<float>((out_signed ? 127 : 255) - zp);
#pragma omp parallel for schedule(static) if (size > (1 << 16))
    for (int64_t i = 0; i < size; ++i) {
        float q = std::nearbyint(x[i] / scale);  // the default rounding: half to even
        q = q >= lo ? q : lo;                    // NaN too
        q = q <= hi ? q : hi;
        out[i] = static_cast<uint8_t>(static_cast<int32_t>(q) + zp);
    }
}

void fake_quantize_run(const FakeQuantRows& f, int64_t r, int64_t i0, int64_t i1, float* y,
                       uint8_t* inside) {
    const int64_t c = r % f.c;
    const float s = f.scale[c];
    const float lo = static_cast<float>(f.lo - f.zp[c]), hi = static_cast<float>(f.hi - f.zp[c]);
    const float* x = f.x + r * f.inner;
    for (int64_t i = i0; i < i1; ++i) {
        const float q = std::nearbyint(x[i] / s);  // the default rounding: half to even
        const bool in = q >= lo && q <= hi;        // false for NaN
        float v = q >= lo ? q : lo;                // NaN too
        v = v <= hi ? v : hi;
        y[r * f.inner + i] = (v + 0.0f) * s;  // + 0: -0 as +0, the reference's int zero
        inside[r * f.inner + i] = in;
    }
}

}  // namespace

void fake_quantize(const FakeQuantRows& f, float* y, uint8_t* inside) {
    const auto run = kernels().fake_quantize_run;
    constexpr int64_t kRun = 1 << 14;  // elements per task
    const int64_t rows = f.outer * f.c, runs = (f.inner + kRun - 1) / kRun;
#pragma omp parallel for schedule(static) if (rows * f.inner > (1 << 16))
    for (int64_t t = 0; t < rows * runs; ++t) {
        const int64_t i0 = t % runs * kRun;
        run(f, t / runs, i0, i0 + kRun < f.inner ? i0 + kRun : f.inner, y, inside);
    }
}

void lsq_scale_grad(const FakeQuantRows& f, const float* g, const float* y,
                    const uint8_t* inside, double* ds) {
    constexpr int64_t kRun = 1 << 14;
    const int64_t rows = f.outer * f.c, runs = (f.inner + kRun - 1) / kRun;
    std::vector<double> part(static_cast<size_t>(rows * runs));
#pragma omp parallel for schedule(static) if (rows * f.inner > (1 << 16))
    for (int64_t t = 0; t < rows * runs; ++t) {
        const int64_t r = t / runs, i0 = t % runs * kRun;
        const int64_t i1 = i0 + kRun < f.inner ? i0 + kRun : f.inner, at = r * f.inner;
        const float s = f.scale[r % f.c];
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = at + i0; i < at + i1; ++i) {
            const float vs = y[i] / s;  // the level, off an integer by < 2^-16: round by
            const float v =             // truncating past the half
                static_cast<float>(static_cast<int32_t>(vs + (vs >= 0.0f ? 0.5f : -0.5f)));
            const double ratio = inside[i] ? static_cast<double>(f.x[i] / s) : 0.0;
            sum += static_cast<double>(g[i]) * (static_cast<double>(v) - ratio);
        }
        part[static_cast<size_t>(t)] = sum;
    }
    for (int64_t c = 0; c < f.c; ++c) {  // channel c's chunks in row order
        double sum = 0.0;
        for (int64_t o = 0; o < f.outer; ++o)
            for (int64_t k = 0; k < runs; ++k)
                sum += part[static_cast<size_t>((o * f.c + c) * runs + k)];
        ds[c] = sum;
    }
}

void concat_part(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                 int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner) {
    // The rescale is exactly 1 (mult * 2^-shift == 1, the zero points and types equal: a part
    // already on the output's grid, e.g. ShuffleNetV2's passed-through half): row copies
    if (x.is_signed == out_signed && x.zero_point == out_zp && shift <= 30 &&
        mult == (int32_t{1} << shift)) {
#pragma omp parallel for schedule(static) if (rows.outer * rows.inner > (1 << 18))
        for (int64_t o = 0; o < rows.outer; ++o)
            std::memcpy(out + o * out_inner, rows.row(x.data, o),
                        static_cast<size_t>(rows.inner));
        return;
    }
    kernels().concat_part(x, rows, mult, shift, out_zp, out_signed, out, out_inner);
}

namespace {

// The output is a function of the input byte: the formula for all 256 of them.
struct ByteTable {
    alignas(64) uint8_t at[256];
};

ByteTable concat_table(const QIn& x, int32_t mult, int32_t shift, int32_t out_zp,
                       bool out_signed) {
    const int32_t lo = out_signed ? -128 : 0, hi = out_signed ? 127 : 255;
    ByteTable table;
    for (int b = 0; b < 256; ++b) {
        const int64_t d = (x.is_signed ? static_cast<int8_t>(b) : b) - int64_t{x.zero_point};
        table.at[b] = clamp_zp(round_shift(d * mult, shift), out_zp, lo, hi);
    }
    return table;
}

void concat_lut_vbmi(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                     int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner) {
    const ByteTable table = concat_table(x, mult, shift, out_zp, out_signed);
    const int64_t outer = rows.outer, inner = rows.inner;
#pragma omp parallel if (outer * inner > (1 << 16))
    {
        const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t per = (outer + threads - 1) / threads;
        const int64_t r0 = t * per < outer ? t * per : outer;
        map_rows_vbmi(table.at, x.data, rows, r0, r0 + per < outer ? r0 + per : outer, out,
                      out_inner);
    }
}

void concat_lut_generic(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                        int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner) {
    const ByteTable table = concat_table(x, mult, shift, out_zp, out_signed);
    const int64_t outer = rows.outer, inner = rows.inner;
#pragma omp parallel for schedule(static) if (outer * inner > (1 << 16))
    for (int64_t o = 0; o < outer; ++o) {
        const uint8_t* in = rows.row(x.data, o);
        uint8_t* dst = out + o * out_inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] = table.at[in[i]];
    }
}

}  // namespace

void max_pool2d(const QIn& x, const PoolGeom& g, uint8_t* out) {
    // the SIMD kernels pad the plane and read every tap: a kernel larger than the image (its
    // padding up to half of it) takes the generic loops, which read only the taps inside
    const bool simd = g.kh <= g.h && g.kw <= g.w && (g.sw == 1 || g.sw == 2);
    (simd ? kernels().max_pool : max_pool_generic)(x, g, out);
}

void max_pool_generic(const QIn& x, const PoolGeom& g, uint8_t* out) {
    const uint8_t flip = x.is_signed ? 0x80 : 0;  // signed order == unsigned order of x ^ 0x80
#pragma omp parallel for schedule(static) if (g.planes * g.oh * g.ow > (1 << 14))
    for (int64_t pl = 0; pl < g.planes; ++pl) {
        const uint8_t* in = x.data + pl * g.h * g.w;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
            const WindowSpan r = window_span(oy * g.sh - g.pt, g.kh, g.h);
            for (int64_t ox = 0; ox < g.ow; ++ox) {
                const WindowSpan c = window_span(ox * g.sw - g.pl, g.kw, g.w);
                uint8_t best = 0;
                for (int64_t iy = r.lo; iy < r.hi; ++iy) {
                    for (int64_t ix = c.lo; ix < c.hi; ++ix) {
                        const uint8_t v = in[iy * g.w + ix] ^ flip;
                        best = v > best ? v : best;
                    }
                }
                out[(pl * g.oh + oy) * g.ow + ox] = best ^ flip;
            }
        }
    }
}

namespace {

// Sum of a window that lies inside the plane (no bounds to check), minus count * zp.
template <typename T>
int64_t window_sum(const T* p, int64_t w, int64_t kh, int64_t kw, int32_t zp) {
    int64_t sum = 0;
    for (int64_t i = 0; i < kh; ++i) {
        for (int64_t j = 0; j < kw; ++j) sum += p[i * w + j];
    }
    return sum - static_cast<int64_t>(zp) * kh * kw;
}

}  // namespace

void avg_pool_inside_generic(const QIn& x, const PoolGeom& g, uint8_t* out) {
    const int64_t count = g.kh * g.kw;
    // windows as wide as the plane are one contiguous run (one vectorisable loop)
    const int64_t kh = g.kw == g.w ? 1 : g.kh, kw = g.kw == g.w ? count : g.kw;
#pragma omp parallel for schedule(static) if (g.planes * g.h * g.w > (1 << 16))
    for (int64_t pl = 0; pl < g.planes; ++pl) {
        for (int64_t oy = 0; oy < g.oh; ++oy) {
            for (int64_t ox = 0; ox < g.ow; ++ox) {
                const int64_t at = pl * g.h * g.w + oy * g.sh * g.w + ox * g.sw;
                const int64_t sum =
                    x.is_signed ? window_sum(reinterpret_cast<const int8_t*>(x.data) + at,
                                             g.w, kh, kw, x.zero_point)
                                : window_sum(x.data + at, g.w, kh, kw, x.zero_point);
                out[(pl * g.oh + oy) * g.ow + ox] =
                    static_cast<uint8_t>(floor_div(2 * sum + count, 2 * count) + x.zero_point);
            }
        }
    }
}

void avg_pool2d(const QIn& x, const PoolGeom& g, bool count_include_pad, uint8_t* out) {
    if (!(g.pt || g.pb || g.pl || g.pr)) {  // every window inside: ResNet's global pooling
        // a window as wide as the plane is one run: the ISA's kernel (bench/RESULTS.md, int8
        // pooling); other widths the generic loop
        (g.kw == g.w ? kernels().avg_pool_runs : avg_pool_inside_generic)(x, g, out);
        return;
    }
    // Padded windows (ShuffleNetV1's 3x3 stride-2 shortcut), separably: per output row, the
    // column sums of its input rows inside the plane (padding adds 0 to a sum of x - zp),
    // then per output the column sums of its columns inside; count as the formula's. The
    // quotient's floor through double is exact (numerator and denominator are integers exact
    // in double; a quotient that is no integer lies at least 1 / (2 count) from one, far past
    // the division's rounding). Not each window's taps checked against the plane's bounds
    // and summed one by one, then divided as int64 (bench/RESULTS.md, other int8 ops).
    const int64_t oh = g.oh, ow = g.ow;
    std::vector<int64_t> c0(static_cast<size_t>(ow)), c1(static_cast<size_t>(ow));
    for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t left = ox * g.sw - g.pl;
        c0[ox] = left < 0 ? 0 : (left < g.w ? left : g.w);
        c1[ox] = left + g.kw < g.w ? (left + g.kw > c0[ox] ? left + g.kw : c0[ox]) : g.w;
    }
#pragma omp parallel if (g.planes * oh * ow > (1 << 14))
    {
        std::vector<int32_t> cols(static_cast<size_t>(g.w));
#pragma omp for schedule(static)
        for (int64_t pl = 0; pl < g.planes; ++pl) {
            const uint8_t* plane = x.data + pl * g.h * g.w;
            for (int64_t oy = 0; oy < oh; ++oy) {
                const int64_t top = oy * g.sh - g.pt;
                const int64_t r0 = top < 0 ? 0 : (top < g.h ? top : g.h);
                const int64_t r1 = top + g.kh < g.h ? (top + g.kh > r0 ? top + g.kh : r0) : g.h;
                const int32_t bias = static_cast<int32_t>(r1 - r0) * x.zero_point;
                for (int64_t ix = 0; ix < g.w; ++ix) cols[ix] = -bias;
                for (int64_t iy = r0; iy < r1; ++iy) {
                    const uint8_t* row = plane + iy * g.w;
                    if (x.is_signed) {
                        for (int64_t ix = 0; ix < g.w; ++ix)
                            cols[ix] += static_cast<int8_t>(row[ix]);
                    } else {
                        for (int64_t ix = 0; ix < g.w; ++ix) cols[ix] += row[ix];
                    }
                }
                uint8_t* dst = out + (pl * oh + oy) * ow;
                for (int64_t ox = 0; ox < ow; ++ox) {
                    int64_t sum = 0;
                    for (int64_t ix = c0[ox]; ix < c1[ox]; ++ix) sum += cols[ix];
                    const int64_t count =
                        count_include_pad ? g.kh * g.kw : (r1 - r0) * (c1[ox] - c0[ox]);
                    const double q = static_cast<double>(2 * sum + count) /
                                     static_cast<double>(2 * count);
                    const int64_t t = static_cast<int64_t>(q);  // toward zero, then down
                    dst[ox] = static_cast<uint8_t>(t - (static_cast<double>(t) > q) +
                                                   x.zero_point);
                }
            }
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
