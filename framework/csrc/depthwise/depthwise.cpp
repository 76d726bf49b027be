// Depthwise convolution: generic row kernels (float32 and float64) and the ISA dispatch.
#include "depthwise/depthwise.h"

#include "runtime/cpu.h"
#include "runtime/dispatch.h"
#include "depthwise/depthwise_impl.h"

namespace tianyuan {
namespace {

template <typename T>
struct ScalarRows {
    static void axpy(T* y, const T* x, T a, int64_t n, int64_t sx) {
        for (int64_t k = 0; k < n; ++k) y[k] += a * x[k * sx];
    }
    static void scatter(T* y, const T* x, T a, int64_t n, int64_t sy) {
        for (int64_t k = 0; k < n; ++k) y[k * sy] += a * x[k];
    }
    static T dot(const T* a, const T* x, int64_t n, int64_t sx) {
        T s = T(0);
        for (int64_t k = 0; k < n; ++k) s += a[k] * x[k * sx];
        return s;
    }
};


// float32's kernels for the ISA in use (the family's one ISA decision)
struct DepthwiseKernels {
    void (*forward)(const float*, const float*, const float*, const Conv2dGeometry&, float*);
    void (*backward_input)(const float*, const float*, const Conv2dGeometry&, float*);
    void (*backward_weight)(const float*, const float*, const Conv2dGeometry&, float*);
};

void fill_depthwise(DepthwiseKernels& k, Isa isa) {
    if (isa >= Isa::avx512) {
        k = {depthwise_forward_avx512, depthwise_backward_input_avx512,
             depthwise_backward_weight_avx512};
    } else if (isa >= Isa::avx2) {
        k = {depthwise_forward_avx2, depthwise_backward_input_avx2,
             depthwise_backward_weight_avx2};
    } else {
        k = {dw_forward<float, ScalarRows<float>>, dw_backward_input<float, ScalarRows<float>>,
             dw_backward_weight<float, ScalarRows<float>>};
    }
}

Dispatch<DepthwiseKernels> kernels(fill_depthwise);

}  // namespace

template <typename T>
void depthwise_conv2d_forward(const T* x, const T* w, const T* bias, const Conv2dGeometry& g,
                              T* out) {
    dw_forward<T, ScalarRows<T>>(x, w, bias, g, out);
}

template <>
void depthwise_conv2d_forward(const float* x, const float* w, const float* bias,
                              const Conv2dGeometry& g, float* out) {
    kernels().forward(x, w, bias, g, out);
}

template <typename T>
void depthwise_conv2d_backward_input(const T* gy, const T* w, const Conv2dGeometry& g, T* gx) {
    dw_backward_input<T, ScalarRows<T>>(gy, w, g, gx);
}

template <>
void depthwise_conv2d_backward_input(const float* gy, const float* w, const Conv2dGeometry& g,
                                     float* gx) {
    kernels().backward_input(gy, w, g, gx);
}

template <typename T>
void depthwise_conv2d_backward_weight(const T* x, const T* gy, const Conv2dGeometry& g, T* gw) {
    dw_backward_weight<T, ScalarRows<T>>(x, gy, g, gw);
}

template <>
void depthwise_conv2d_backward_weight(const float* x, const float* gy, const Conv2dGeometry& g,
                                      float* gw) {
    kernels().backward_weight(x, gy, g, gw);
}

template void depthwise_conv2d_forward<double>(const double*, const double*, const double*,
                                               const Conv2dGeometry&, double*);
template void depthwise_conv2d_backward_input<double>(const double*, const double*,
                                                      const Conv2dGeometry&, double*);
template void depthwise_conv2d_backward_weight<double>(const double*, const double*,
                                                       const Conv2dGeometry&, double*);

}  // namespace tianyuan
