// RoIAlign, generic C++ with OpenMP; see roi_align.h. The forward splits the RoIs among the
// threads (each writes only its RoIs' outputs); the backward splits the channels (each thread
// adds into its channels' planes only, so no two threads touch one gradient element).
#include "roi_align/roi_align.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tianyuan {
namespace {

// Below this many output values a call runs on one thread.
constexpr int64_t kParallelMin = 1 << 12;

// One sample's position along an axis: taps lo and hi with weights wl = 1 - frac (for lo)
// and wh = frac (for hi), torchvision's bilinear_interpolate per axis. `valid` false: the
// sample lies outside [-1, size] and contributes nothing.
template <typename T>
struct Tap {
    int64_t lo, hi;
    T wl, wh;
    bool valid;
};

// pooled x grid samples along an axis of `size` pixels, bin-major.
template <typename T>
void axis_taps(T start, T bin, int64_t grid, int64_t pooled, int64_t size,
               std::vector<Tap<T>>& taps) {
    taps.resize(static_cast<size_t>(pooled * std::max<int64_t>(grid, 0)));
    size_t k = 0;
    for (int64_t p = 0; p < pooled; ++p) {
        for (int64_t i = 0; i < grid; ++i) {
            T v = start + static_cast<T>(p) * bin +
                  static_cast<T>(static_cast<float>(i) + .5f) * bin / static_cast<T>(grid);
            Tap<T>& t = taps[k++];
            t.valid = !(v < -1.0 || v > static_cast<T>(size));
            if (!t.valid) {
                t.lo = t.hi = 0;
                t.wl = t.wh = 0;
                continue;
            }
            if (v <= 0) v = 0;
            t.lo = static_cast<int64_t>(v);
            if (t.lo >= size - 1) {
                t.lo = t.hi = size - 1;
                v = static_cast<T>(t.lo);
            } else {
                t.hi = t.lo + 1;
            }
            t.wh = v - static_cast<T>(t.lo);
            t.wl = static_cast<T>(1.) - t.wh;
        }
    }
}

// A sample's four taps (plane offsets) and weights, torchvision's PreCalc: a sample outside
// the map has weights 0 at offset 0.
template <typename T>
struct Sample {
    int64_t p1, p2, p3, p4;
    T w1, w2, w3, w4;
};

// Every sample of a RoI, bin-major (ph, pw, iy, ix), from its per-axis taps.
template <typename T>
void roi_samples(const std::vector<Tap<T>>& ys, const std::vector<Tap<T>>& xs, int64_t pooled_h,
                 int64_t pooled_w, int64_t gh, int64_t gw, int64_t w,
                 std::vector<Sample<T>>& out) {
    out.resize(static_cast<size_t>(pooled_h * pooled_w * gh * gw));
    size_t k = 0;
    for (int64_t ph = 0; ph < pooled_h; ++ph)
        for (int64_t pw = 0; pw < pooled_w; ++pw)
            for (int64_t iy = 0; iy < gh; ++iy)
                for (int64_t ix = 0; ix < gw; ++ix) {
                    const Tap<T>& y = ys[ph * gh + iy];
                    const Tap<T>& x = xs[pw * gw + ix];
                    Sample<T>& s = out[k++];
                    if (!y.valid || !x.valid) {
                        s = Sample<T>{0, 0, 0, 0, 0, 0, 0, 0};
                        continue;
                    }
                    s.p1 = y.lo * w + x.lo;
                    s.p2 = y.lo * w + x.hi;
                    s.p3 = y.hi * w + x.lo;
                    s.p4 = y.hi * w + x.hi;
                    s.w1 = y.wl * x.wl;
                    s.w2 = y.wl * x.wh;
                    s.w3 = y.wh * x.wl;
                    s.w4 = y.wh * x.wh;
                }
}

template <typename T>
void bin_gradient(T* plane, int64_t w, const Tap<T>* ys, const Tap<T>* xs, int64_t gh,
                  int64_t gw, T grad, T count) {
    for (int64_t iy = 0; iy < gh; ++iy) {
        const Tap<T>& y = ys[iy];
        if (!y.valid) continue;
        T* lo = plane + y.lo * w;
        T* hi = plane + y.hi * w;
        for (int64_t ix = 0; ix < gw; ++ix) {
            const Tap<T>& x = xs[ix];
            if (!x.valid) continue;
            lo[x.lo] += grad * (y.wl * x.wl) / count;
            lo[x.hi] += grad * (y.wl * x.wh) / count;
            hi[x.lo] += grad * (y.wh * x.wl) / count;
            hi[x.hi] += grad * (y.wh * x.wh) / count;
        }
    }
}

}  // namespace

template <typename T>
RoiBins<T> roi_bins(const T* roi, const RoiAlignGeometry& g) {
    RoiBins<T> b;
    b.batch = static_cast<int64_t>(roi[0]);
    const T scale = static_cast<T>(g.spatial_scale);
    const T offset = g.aligned ? static_cast<T>(0.5) : static_cast<T>(0.0);
    b.start_w = roi[1] * scale - offset;
    b.start_h = roi[2] * scale - offset;
    T roi_w = roi[3] * scale - offset - b.start_w;
    T roi_h = roi[4] * scale - offset - b.start_h;
    if (!g.aligned) {
        roi_w = std::max(roi_w, static_cast<T>(1.));
        roi_h = std::max(roi_h, static_cast<T>(1.));
    }
    b.bin_h = roi_h / static_cast<T>(g.pooled_h);
    b.bin_w = roi_w / static_cast<T>(g.pooled_w);
    b.grid_h = g.sampling_ratio > 0
                   ? g.sampling_ratio
                   : static_cast<int64_t>(std::ceil(roi_h / static_cast<T>(g.pooled_h)));
    b.grid_w = g.sampling_ratio > 0
                   ? g.sampling_ratio
                   : static_cast<int64_t>(std::ceil(roi_w / static_cast<T>(g.pooled_w)));
    b.count = static_cast<T>(std::max<int64_t>(b.grid_h * b.grid_w, 1));
    return b;
}

template <typename T>
void roi_align_forward(const T* x, const T* rois, const RoiAlignGeometry& g, T* out) {
    const int64_t bins = g.pooled_h * g.pooled_w;
#pragma omp parallel if (g.rois * g.c * bins >= kParallelMin)
    {
        std::vector<Tap<T>> ys, xs;
        std::vector<Sample<T>> samples;
#pragma omp for schedule(dynamic, 1)
        for (int64_t r = 0; r < g.rois; ++r) {
            const RoiBins<T> b = roi_bins(rois + r * 5, g);
            axis_taps(b.start_h, b.bin_h, b.grid_h, g.pooled_h, g.h, ys);
            axis_taps(b.start_w, b.bin_w, b.grid_w, g.pooled_w, g.w, xs);
            const int64_t per_bin = std::max<int64_t>(b.grid_h, 0) * std::max<int64_t>(b.grid_w, 0);
            roi_samples(ys, xs, g.pooled_h, g.pooled_w, std::max<int64_t>(b.grid_h, 0),
                        std::max<int64_t>(b.grid_w, 0), g.w, samples);
            for (int64_t c = 0; c < g.c; ++c) {
                const T* plane = x + (b.batch * g.c + c) * g.h * g.w;
                T* o = out + (r * g.c + c) * bins;
                const Sample<T>* s = samples.data();
                for (int64_t bin = 0; bin < bins; ++bin) {
                    T acc = 0;
                    for (int64_t k = 0; k < per_bin; ++k, ++s)
                        acc += s->w1 * plane[s->p1] + s->w2 * plane[s->p2] +
                               s->w3 * plane[s->p3] + s->w4 * plane[s->p4];
                    o[bin] = acc / b.count;
                }
            }
        }
    }
}

template <typename T>
void roi_align_backward(const T* grad_out, const T* rois, const RoiAlignGeometry& g,
                        T* grad_x) {
    const int64_t bins = g.pooled_h * g.pooled_w;
    std::memset(grad_x, 0, sizeof(T) * static_cast<size_t>(g.n * g.c * g.h * g.w));
#pragma omp parallel if (g.rois * g.c * bins >= kParallelMin)
    {
        const int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
        const int64_t c0 = g.c * me / threads, c1 = g.c * (me + 1) / threads;
        std::vector<Tap<T>> ys, xs;
        for (int64_t r = 0; r < g.rois && c0 < c1; ++r) {
            const RoiBins<T> b = roi_bins(rois + r * 5, g);
            axis_taps(b.start_h, b.bin_h, b.grid_h, g.pooled_h, g.h, ys);
            axis_taps(b.start_w, b.bin_w, b.grid_w, g.pooled_w, g.w, xs);
            const int64_t gh = std::max<int64_t>(b.grid_h, 0);
            const int64_t gw = std::max<int64_t>(b.grid_w, 0);
            for (int64_t c = c0; c < c1; ++c) {
                T* plane = grad_x + (b.batch * g.c + c) * g.h * g.w;
                const T* go = grad_out + (r * g.c + c) * bins;
                for (int64_t ph = 0; ph < g.pooled_h; ++ph)
                    for (int64_t pw = 0; pw < g.pooled_w; ++pw)
                        bin_gradient(plane, g.w, ys.data() + ph * gh, xs.data() + pw * gw, gh,
                                     gw, go[ph * g.pooled_w + pw], b.count);
            }
        }
    }
}

#define TIANYUAN_ROI_ALIGN(T)                                                                  \
    template RoiBins<T> roi_bins<T>(const T*, const RoiAlignGeometry&);                        \
    template void roi_align_forward<T>(const T*, const T*, const RoiAlignGeometry&, T*);       \
    template void roi_align_backward<T>(const T*, const T*, const RoiAlignGeometry&, T*);
TIANYUAN_ROI_ALIGN(float)
TIANYUAN_ROI_ALIGN(double)
#undef TIANYUAN_ROI_ALIGN

}  // namespace tianyuan
