// Separable resize; see imgproc.h and the spec framework/ops/resize_cv_ref.py. Each thread
// takes a contiguous block of output rows; a row is the column pass over k row-pass results,
// kept in a small per-thread cache tagged by source row, so neighbouring output rows reuse
// the source rows they share (as OpenCV's resizeGeneric does).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "imgproc/imgproc_kernels.h"
#include "imgproc/imgproc_round.h"

namespace tianyuan {
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // output elements below which one thread runs

// Row pass of one source row: out[o * c + ch] = sum_t w[o, t] * src[index[o, t] * c + ch],
// the sum in tap order from 0. C and K known at compile time for the common cases (C 1/3/4,
// K 2/4): the loops unroll and the gathers are all that is left.
template <int C, int K, typename S, typename A, typename W>
void row_pass_fixed(const S* src, int64_t ow, const int32_t* index, const W* weight, A* out) {
    for (int64_t o = 0; o < ow; ++o) {
        const int32_t* idx = index + o * K;
        const W* w = weight + o * K;
        for (int ch = 0; ch < C; ++ch) {
            A acc = 0;
            for (int t = 0; t < K; ++t)
                acc += static_cast<A>(src[idx[t] * C + ch]) * static_cast<A>(w[t]);
            out[o * C + ch] = acc;
        }
    }
}

template <typename S, typename A, typename W>
void row_pass_any(const S* src, int64_t ow, int64_t c, const int32_t* index, const W* weight,
                  int64_t k, A* out) {
    for (int64_t o = 0; o < ow; ++o) {
        const int32_t* idx = index + o * k;
        const W* w = weight + o * k;
        for (int64_t ch = 0; ch < c; ++ch) {
            A acc = 0;
            for (int64_t t = 0; t < k; ++t)
                acc += static_cast<A>(src[idx[t] * c + ch]) * static_cast<A>(w[t]);
            out[o * c + ch] = acc;
        }
    }
}

template <int K, typename S, typename A, typename W>
bool row_pass_k(const S* src, int64_t ow, int64_t c, const int32_t* index, const W* weight,
                A* out) {
    switch (c) {
        case 1: row_pass_fixed<1, K>(src, ow, index, weight, out); return true;
        case 3: row_pass_fixed<3, K>(src, ow, index, weight, out); return true;
        case 4: row_pass_fixed<4, K>(src, ow, index, weight, out); return true;
        default: return false;
    }
}

template <typename S, typename A, typename W>
void row_pass(const S* src, int64_t ow, int64_t c, const int32_t* index, const W* weight,
              int64_t k, A* out) {
    if (k == 2 && row_pass_k<2>(src, ow, c, index, weight, out)) return;
    if (k == 4 && row_pass_k<4>(src, ow, c, index, weight, out)) return;
    row_pass_any(src, ow, c, index, weight, k, out);
}

// Column passes over n = ow * c elements from k cached rows.
void columns_linear(const int32_t* const* rows, const int16_t* beta, int64_t n, uint8_t* out) {
    const int32_t* r0 = rows[0];
    const int32_t* r1 = rows[1];
    const int32_t b0 = beta[0], b1 = beta[1];
    for (int64_t j = 0; j < n; ++j) {  // OpenCV's SIMD arithmetic (mulhi of 16-bit halves)
        const int32_t v = (((r0[j] >> 4) * b0) >> 16) + (((r1[j] >> 4) * b1) >> 16);
        out[j] = saturate_u8((v + 2) >> 2);
    }
}

void columns_cubic(const int32_t* const* rows, const int16_t* beta, int64_t n, uint8_t* out) {
    const float s = 1.f / static_cast<float>(1 << 22);
    const float b0 = beta[0] * s, b1 = beta[1] * s, b2 = beta[2] * s, b3 = beta[3] * s;
    for (int64_t j = 0; j < n; ++j) {
        const float h0 = static_cast<float>(rows[0][j]), h1 = static_cast<float>(rows[1][j]);
        const float h2 = static_cast<float>(rows[2][j]), h3 = static_cast<float>(rows[3][j]);
        const float v = h0 * b0 + (h1 * b1 + (h2 * b2 + h3 * b3));
        out[j] = saturate_u8(v);
    }
}

void columns_box(const int32_t* const* rows, int64_t k, float scale, int64_t n, uint8_t* out) {
    for (int64_t j = 0; j < n; ++j) {
        int32_t sum = 0;
        for (int64_t t = 0; t < k; ++t) sum += rows[t][j];
        out[j] = saturate_u8(static_cast<float>(sum) * scale);
    }
}

template <typename Out>
void columns_float(const float* const* rows, const float* beta, int64_t k, int64_t n, Out* out) {
    for (int64_t j = 0; j < n; ++j) {
        float acc = 0.f;
        for (int64_t t = 0; t < k; ++t) acc += rows[t][j] * beta[t];
        if constexpr (sizeof(Out) == 1) {
            out[j] = saturate_u8(acc);
        } else {
            out[j] = acc;
        }
    }
}

// A thread's cache of row-pass results: slot s holds source row tag[s] (b * H + row).
template <typename A>
struct RowCache {
    std::vector<A> data;
    std::vector<int64_t> tag;
    std::vector<int64_t> wanted;  // the current output row's source rows
    std::vector<const A*> rows;   // and where they are
    int64_t n;
    RowCache(int64_t slots, int64_t n_)
        : data(slots * n_), tag(slots, -1), wanted(slots), rows(slots), n(n_) {}

    // rows[t] for the k rows wanted[t] (tags), computing the missing ones with `fill`.
    template <typename Fill>
    void get(int64_t k, Fill fill) {
        for (int64_t t = 0; t < k; ++t) {
            int64_t slot = -1;
            for (size_t s = 0; s < tag.size() && slot < 0; ++s)
                if (tag[s] == wanted[t]) slot = static_cast<int64_t>(s);
            if (slot < 0) slot = free_slot(k);
            if (tag[slot] != wanted[t]) {
                fill(wanted[t], data.data() + slot * n);
                tag[slot] = wanted[t];
            }
            rows[t] = data.data() + slot * n;
        }
    }

    int64_t free_slot(int64_t k) const {
        for (size_t s = 0; s < tag.size(); ++s) {
            bool needed = false;
            for (int64_t t = 0; t < k; ++t) needed = needed || tag[s] == wanted[t];
            if (!needed) return static_cast<int64_t>(s);
        }
        return 0;  // unreachable: there are k slots and at most k distinct wanted rows
    }
};

// Runs body(b, dy, cache) over every output row, each thread with its own cache.
template <typename A, typename Body>
void for_rows(const ImageGeometry& g, int64_t k, Body body) {
    const int64_t rows = g.batch * g.oh;
    const int64_t n = g.ow * g.c;
#pragma omp parallel if (rows * n >= kParallelMin)
    {
        RowCache<A> cache(k, n);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) body(r / g.oh, r % g.oh, cache);
    }
}

template <typename T>
void nearest(const T* src, T* dst, const ImageGeometry& g, const ResizeTaps& x,
             const ResizeTaps& y) {
    const int64_t rows = g.batch * g.oh;
#pragma omp parallel for schedule(static) if (rows * g.ow * g.c >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t b = r / g.oh, dy = r % g.oh;
        const T* line = src + (b * g.h + y.index[dy]) * g.w * g.c;
        T* out = dst + r * g.ow * g.c;
        for (int64_t o = 0; o < g.ow; ++o)
            std::memcpy(out + o * g.c, line + x.index[o] * g.c, sizeof(T) * g.c);
    }
}

void resize_u8_fixed(const uint8_t* src, uint8_t* dst, const ImageGeometry& g,
                     const ResizeTaps& x, const ResizeTaps& y, ResizeKind kind, float scale) {
    const int64_t n = g.ow * g.c, k = y.k;
    for_rows<int32_t>(g, k, [&](int64_t b, int64_t dy, RowCache<int32_t>& cache) {
        for (int64_t t = 0; t < k; ++t) cache.wanted[t] = b * g.h + y.index[dy * k + t];
        cache.get(k, [&](int64_t tag, int32_t* out) {
            row_pass(src + tag * g.w * g.c, g.ow, g.c, x.index, x.fixed, x.k, out);
        });
        uint8_t* out = dst + (b * g.oh + dy) * n;
        const int32_t* const* rows = cache.rows.data();
        if (kind == ResizeKind::linear) columns_linear(rows, y.fixed + dy * k, n, out);
        else if (kind == ResizeKind::cubic) columns_cubic(rows, y.fixed + dy * k, n, out);
        else columns_box(rows, k, scale, n, out);
    });
}

template <typename S, typename Out>
void resize_float(const S* src, Out* dst, const ImageGeometry& g, const ResizeTaps& x,
                  const ResizeTaps& y) {
    const int64_t n = g.ow * g.c, k = y.k;
    for_rows<float>(g, k, [&](int64_t b, int64_t dy, RowCache<float>& cache) {
        for (int64_t t = 0; t < k; ++t) cache.wanted[t] = b * g.h + y.index[dy * k + t];
        cache.get(k, [&](int64_t tag, float* out) {
            row_pass(src + tag * g.w * g.c, g.ow, g.c, x.index, x.weight, x.k, out);
        });
        columns_float(cache.rows.data(), y.weight + dy * k, k, n, dst + (b * g.oh + dy) * n);
    });
}

}  // namespace

void resize_u8_generic(const uint8_t* src, uint8_t* dst, const ImageGeometry& g,
                       const ResizeTaps& x, const ResizeTaps& y, ResizeKind kind,
                       float box_scale) {
    if (kind == ResizeKind::nearest) nearest(src, dst, g, x, y);
    else if (kind == ResizeKind::area) resize_float(src, dst, g, x, y);
    else resize_u8_fixed(src, dst, g, x, y, kind, box_scale);
}

void resize_f32_generic(const float* src, float* dst, const ImageGeometry& g,
                        const ResizeTaps& x, const ResizeTaps& y, bool nearest_only) {
    if (nearest_only) nearest(src, dst, g, x, y);
    else resize_float(src, dst, g, x, y);
}

}  // namespace tianyuan
