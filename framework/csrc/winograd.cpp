// Winograd F(2x2, 3x3) input and output transforms; see winograd.h.
#include "winograd.h"

namespace tianyuan {
namespace {

constexpr int64_t kParallelMin = 1 << 15;

// One 4x4 input tile, zero outside the (h, w) plane.
template <typename T>
void load_tile(const T* plane, int64_t h, int64_t w, int64_t y0, int64_t x0, T d[4][4]) {
    for (int r = 0; r < 4; ++r) {
        const int64_t y = y0 + r;
        for (int q = 0; q < 4; ++q) {
            const int64_t x = x0 + q;
            d[r][q] = (y >= 0 && y < h && x >= 0 && x < w) ? plane[y * w + x] : T(0);
        }
    }
}

// V = B^T d B, written as v[e * stride] for e = 4 * row + col.
template <typename T>
void transform_tile(const T d[4][4], T* v, int64_t stride) {
    T t[4][4];
    for (int q = 0; q < 4; ++q) {  // t = B^T d (columns)
        t[0][q] = d[0][q] - d[2][q];
        t[1][q] = d[1][q] + d[2][q];
        t[2][q] = d[2][q] - d[1][q];
        t[3][q] = d[1][q] - d[3][q];
    }
    for (int r = 0; r < 4; ++r) {  // (B^T d) B (rows)
        v[(4 * r + 0) * stride] = t[r][0] - t[r][2];
        v[(4 * r + 1) * stride] = t[r][1] + t[r][2];
        v[(4 * r + 2) * stride] = t[r][2] - t[r][1];
        v[(4 * r + 3) * stride] = t[r][1] - t[r][3];
    }
}

}  // namespace

template <typename T>
void winograd_weight_transform(const T* w, int64_t co, int64_t c, T* u) {
    const int64_t stride = co * c;
#pragma omp parallel for schedule(static) if (16 * stride >= kParallelMin)
    for (int64_t f = 0; f < stride; ++f) {
        const T* g = w + f * 9;
        T t[4][3];  // G g (columns)
        for (int q = 0; q < 3; ++q) {
            t[0][q] = g[q];
            t[1][q] = T(0.5) * (g[q] + g[3 + q] + g[6 + q]);
            t[2][q] = T(0.5) * (g[q] - g[3 + q] + g[6 + q]);
            t[3][q] = g[6 + q];
        }
        for (int r = 0; r < 4; ++r) {  // (G g) G^T (rows)
            u[(4 * r + 0) * stride + f] = t[r][0];
            u[(4 * r + 1) * stride + f] = T(0.5) * (t[r][0] + t[r][1] + t[r][2]);
            u[(4 * r + 2) * stride + f] = T(0.5) * (t[r][0] - t[r][1] + t[r][2]);
            u[(4 * r + 3) * stride + f] = t[r][2];
        }
    }
}

template <typename T>
void winograd_input_transform(const T* x, const WinogradGeometry& g, T* v) {
    const int64_t th = g.th(), tw = g.tw(), tiles = g.tiles();
    const int64_t stride = g.c * tiles;  // between the 16 transformed positions
#pragma omp parallel for collapse(2) schedule(static) if (16 * stride >= kParallelMin)
    for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t c = 0; c < g.c; ++c) {
            const T* plane = x + (n * g.c + c) * g.h * g.w;
            T* dst = v + c * tiles + n * th * tw;
            T d[4][4];
            for (int64_t ty = 0; ty < th; ++ty) {
                for (int64_t tx = 0; tx < tw; ++tx) {
                    load_tile(plane, g.h, g.w, 2 * ty - g.pt, 2 * tx - g.pl, d);
                    transform_tile(d, dst + ty * tw + tx, stride);
                }
            }
        }
    }
}

template <typename T>
void winograd_output_transform(const T* m, const WinogradGeometry& g, int64_t co, T* out) {
    const int64_t th = g.th(), tw = g.tw(), tiles = g.tiles();
    const int64_t stride = co * tiles;
#pragma omp parallel for collapse(2) schedule(static) if (16 * stride >= kParallelMin)
    for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t o = 0; o < co; ++o) {
            const T* src = m + o * tiles + n * th * tw;
            T* plane = out + (n * co + o) * g.oh * g.ow;
            for (int64_t ty = 0; ty < th; ++ty) {
                for (int64_t tx = 0; tx < tw; ++tx) {
                    const T* s = src + ty * tw + tx;
                    T t[2][4];  // A^T M (columns)
                    for (int q = 0; q < 4; ++q) {
                        const T m0 = s[q * stride], m1 = s[(4 + q) * stride];
                        const T m2 = s[(8 + q) * stride], m3 = s[(12 + q) * stride];
                        t[0][q] = m0 + m1 + m2;
                        t[1][q] = m1 - m2 - m3;
                    }
                    for (int r = 0; r < 2; ++r) {  // (A^T M) A, cropped at the edges
                        const int64_t y = 2 * ty + r;
                        if (y >= g.oh) continue;
                        plane[y * g.ow + 2 * tx] = t[r][0] + t[r][1] + t[r][2];
                        if (2 * tx + 1 >= g.ow) continue;
                        plane[y * g.ow + 2 * tx + 1] = t[r][1] - t[r][2] - t[r][3];
                    }
                }
            }
        }
    }
}

template void winograd_weight_transform<float>(const float*, int64_t, int64_t, float*);
template void winograd_weight_transform<double>(const double*, int64_t, int64_t, double*);
template void winograd_input_transform<float>(const float*, const WinogradGeometry&, float*);
template void winograd_input_transform<double>(const double*, const WinogradGeometry&, double*);
template void winograd_output_transform<float>(const float*, const WinogradGeometry&, int64_t,
                                               float*);
template void winograd_output_transform<double>(const double*, const WinogradGeometry&, int64_t,
                                                double*);

}  // namespace tianyuan
