// Affine warp; see imgproc.h and the spec framework/ops/imgproc_ref.py (warp_affine_ref).
// Float32 coordinates with one rounding per operation, as OpenCV's portable path: this
// translation unit is built without FMA flags, so nothing is fused.
#include <cmath>
#include <cstdint>

#include "imgproc/imgproc_kernels.h"
#include "imgproc/imgproc_round.h"

namespace tianyuan {
namespace {

constexpr int64_t kParallelMin = 1 << 14;

inline float round_store(float v, float) { return v; }
inline uint8_t round_store(float v, uint8_t) { return saturate_u8(v); }

// Far outside stays far outside (and NaN goes there), so that rounding and the integer casts
// below are exact (the binding refuses images of 4e6 pixels a side or more).
inline float clamp_coord(float v) {
    constexpr float kFar = 4e6f;
    return !(v > -kFar) ? -kFar : (v < kFar ? v : kFar);
}

// Pixel (iy, ix)'s channel ch, or the border's.
template <typename T>
struct Source {
    const T* data;
    int64_t h, w, c;
    const WarpParams* p;

    float at(int64_t iy, int64_t ix, int64_t ch) const {
        if (p->replicate) {
            iy = iy < 0 ? 0 : (iy >= h ? h - 1 : iy);
            ix = ix < 0 ? 0 : (ix >= w ? w - 1 : ix);
        } else if (iy < 0 || iy >= h || ix < 0 || ix >= w) {
            return p->value[ch];
        }
        return static_cast<float>(data[(iy * w + ix) * c + ch]);
    }
};

template <typename T>
void warp_row(const Source<T>& s, const WarpParams& p, int64_t y, int64_t ow, T* out) {
    const float* m = p.m;
    const float fy = static_cast<float>(y);
    const float mx = m[1] * fy + m[2];
    const float my = m[4] * fy + m[5];
    for (int64_t x = 0; x < ow; ++x) {
        const float fx = static_cast<float>(x);
        const float sx = clamp_coord(m[0] * fx + mx);
        const float sy = clamp_coord(m[3] * fx + my);
        T* dst = out + x * s.c;
        if (p.nearest) {
            const int64_t ix = static_cast<int64_t>(round_even(sx));
            const int64_t iy = static_cast<int64_t>(round_even(sy));
            for (int64_t ch = 0; ch < s.c; ++ch) dst[ch] = round_store(s.at(iy, ix, ch), T());
            continue;
        }
        const int32_t ix = floor_int(sx), iy = floor_int(sy);
        const float ax = sx - static_cast<float>(ix), ay = sy - static_cast<float>(iy);
        if (ix >= 0 && iy >= 0 && ix + 1 < s.w && iy + 1 < s.h) {  // all four inside
            const T* q0 = s.data + (iy * s.w + ix) * s.c;
            const T* q1 = q0 + s.w * s.c;
            for (int64_t ch = 0; ch < s.c; ++ch) {
                const float p00 = q0[ch], p01 = q0[s.c + ch], p10 = q1[ch], p11 = q1[s.c + ch];
                const float v0 = p00 + ax * (p01 - p00);
                const float v1 = p10 + ax * (p11 - p10);
                dst[ch] = round_store(v0 + ay * (v1 - v0), T());
            }
            continue;
        }
        for (int64_t ch = 0; ch < s.c; ++ch) {
            const float p00 = s.at(iy, ix, ch), p01 = s.at(iy, ix + 1, ch);
            const float p10 = s.at(iy + 1, ix, ch), p11 = s.at(iy + 1, ix + 1, ch);
            const float v0 = p00 + ax * (p01 - p00);
            const float v1 = p10 + ax * (p11 - p10);
            dst[ch] = round_store(v0 + ay * (v1 - v0), T());
        }
    }
}

template <typename T>
void warp(const T* src, T* dst, const ImageGeometry& g, const WarpParams& p) {
    const int64_t rows = g.batch * g.oh;
#pragma omp parallel for schedule(static) if (rows * g.ow * g.c >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t b = r / g.oh;
        const Source<T> s{src + b * g.h * g.w * g.c, g.h, g.w, g.c, &p};
        warp_row(s, p, r % g.oh, g.ow, dst + r * g.ow * g.c);
    }
}

}  // namespace

void warp_affine_u8_generic(const uint8_t* src, uint8_t* dst, const ImageGeometry& g,
                            const WarpParams& p) {
    warp(src, dst, g, p);
}

void warp_affine_f32_generic(const float* src, float* dst, const ImageGeometry& g,
                             const WarpParams& p) {
    warp(src, dst, g, p);
}

}  // namespace tianyuan
