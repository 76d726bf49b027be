// pybind11 glue: batch norm (framework/csrc/norm/batch_norm.h) and the clamp of the activations
// that follow it (clamp.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "norm/batch_norm.h"
#include "norm/clamp.h"
#include "quant/histogram.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {
namespace {

std::vector<py::ssize_t> shape_of(const py::array& a) {
    return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

BnShape bn_shape(const char* op, const py::array& x) {
    if (x.ndim() < 2) throw py::value_error(std::string(op) + ": x must be (N, C, ...), got " +
                                            std::to_string(x.ndim()) + "-D");
    int64_t s = 1;
    for (py::ssize_t i = 2; i < x.ndim(); ++i) s *= x.shape(i);
    return {x.shape(0), x.shape(1), s};
}

template <typename T>
void check_vector(const char* op, const char* what, const Array<T>& v, int64_t c) {
    if (v.ndim() != 1 || v.shape(0) != c)
        throw py::value_error(std::string(op) + ": " + what + " must be (" + std::to_string(c) +
                              ",), got " + std::to_string(v.size()) + " values");
}

template <typename T>
py::tuple stats_typed(const py::array& x_any, bool extremes) {
    Array<T> x = Array<T>::ensure(x_any);
    const BnShape b = bn_shape("batch_norm_stats", x);
    if (extremes && b.n * b.s == 0)
        throw py::value_error("batch_norm_stats: extremes need values, got shape " +
                              shape_str(x));
    Array<T> mean(b.c), var(b.c), lo(extremes ? b.c : 0), hi(extremes ? b.c : 0);
    {
        py::gil_scoped_release release;
        batch_norm_stats<T>(x.data(), b, mean.mutable_data(), var.mutable_data(),
                            extremes ? lo.mutable_data() : nullptr,
                            extremes ? hi.mutable_data() : nullptr);
    }
    if (!extremes) return py::make_tuple(mean, var);
    Array<T> ends(std::vector<py::ssize_t>{1, static_cast<py::ssize_t>(b.c), 2});
    T* e = ends.mutable_data();
    for (int64_t c = 0; c < b.c; ++c) {
        e[2 * c] = lo.data()[c];
        e[2 * c + 1] = hi.data()[c];
    }
    return py::make_tuple(mean, var, ends);
}

// The fused clamp's bounds, (lo, hi) or None (check: lo <= hi).
template <typename T>
bool clamp_bounds(const char* op, const py::object& bounds, BnClamp<T>* act) {
    if (bounds.is_none()) return false;
    const auto pair = bounds.cast<std::pair<double, double>>();
    if (!(pair.first <= pair.second))
        throw py::value_error(std::string(op) + ": clamp needs lo <= hi, got (" +
                              std::to_string(pair.first) + ", " + std::to_string(pair.second) +
                              ")");
    act->lo = T(pair.first);
    act->hi = T(pair.second);
    return true;
}

template <typename T>
py::object affine_typed(const py::array& x_any, const py::array& scale_any,
                        const py::array& shift_any, const py::object& clamp,
                        const py::object& fake_quant) {
    const char* op = "batch_norm_affine";
    Array<T> x = Array<T>::ensure(x_any);
    Array<T> scale = Array<T>::ensure(scale_any), shift = Array<T>::ensure(shift_any);
    const BnShape b = bn_shape(op, x);
    check_vector(op, "scale", scale, b.c);
    check_vector(op, "shift", shift, b.c);
    BnClamp<T> act{T(0), T(0), nullptr, nullptr};
    const bool fused = clamp_bounds(op, clamp, &act);
    Array<T> y(shape_of(x));
    if (fake_quant.is_none()) {
        py::gil_scoped_release release;
        batch_norm_affine<T>(x.data(), scale.data(), shift.data(), b, y.mutable_data(),
                             fused ? &act : nullptr);
        return std::move(y);
    }
    if (!std::is_same<T, float>::value)
        throw py::value_error(std::string(op) + ": fake_quant needs float32 x, got float64");
    const auto q = fake_quant.cast<std::tuple<float, float, float>>();
    if (!(std::get<0>(q) > 0.0f) || !std::isfinite(std::get<0>(q)) ||
        !(std::get<1>(q) <= std::get<2>(q)))
        throw py::value_error(std::string(op) + ": fake_quant needs (scale positive and finite, "
                              "lo <= hi), got (" +
                              std::to_string(std::get<0>(q)) + ", " +
                              std::to_string(std::get<1>(q)) + ", " +
                              std::to_string(std::get<2>(q)) + ")");
    py::array_t<bool> inside(shape_of(x));
    BnFakeQuant fq{std::get<0>(q), std::get<1>(q), std::get<2>(q),
                   reinterpret_cast<uint8_t*>(inside.mutable_data())};
    {
        py::gil_scoped_release release;
        batch_norm_affine<T>(x.data(), scale.data(), shift.data(), b, y.mutable_data(),
                             fused ? &act : nullptr, &fq);
    }
    return py::make_tuple(y, inside);
}

template <typename T>
py::tuple backward_typed(const py::array& gy_any, const py::array& x_any, const py::array& m_any,
                         const py::array& inv_any, const py::object& w_any, bool need_x,
                         const py::object& clamp, const py::object& affine,
                         const py::object& pass_any) {
    const char* op = "batch_norm_backward";
    Array<T> gy = Array<T>::ensure(gy_any), x = Array<T>::ensure(x_any);
    Array<T> mean = Array<T>::ensure(m_any), inv = Array<T>::ensure(inv_any);
    const BnShape b = bn_shape(op, x);
    if (gy.size() != x.size() || gy.ndim() != x.ndim())
        throw py::value_error(std::string(op) + ": grad must have the input's shape");
    BnClamp<T> act{T(0), T(0), nullptr, nullptr};
    const bool fused = clamp_bounds(op, clamp, &act);
    Array<T> scale, shift;
    if (fused) {
        if (affine.is_none())
            throw py::value_error(std::string(op) + ": a clamp needs affine, the forward's "
                                  "(scale, shift)");
        const auto pair = affine.cast<std::pair<py::array, py::array>>();
        scale = Array<T>::ensure(pair.first);
        shift = Array<T>::ensure(pair.second);
        check_vector(op, "scale", scale, b.c);
        check_vector(op, "shift", shift, b.c);
        act.scale = scale.data();
        act.shift = shift.data();
    }
    check_vector(op, "mean", mean, b.c);
    check_vector(op, "invstd", inv, b.c);
    Array<T> w;
    if (!w_any.is_none()) {
        w = Array<T>::ensure(w_any);
        check_vector(op, "weight", w, b.c);
    }
    const uint8_t* pass_ptr = nullptr;
    py::array pass;  // holds pass_ptr's array
    if (!pass_any.is_none()) {
        pass = py::array::ensure(pass_any, py::array::c_style);
        if (!pass || pass.dtype().itemsize() != 1 || pass.dtype().kind() == 'f' ||
            shape_of(pass) != shape_of(x))
            throw py::value_error(std::string(op) + ": pass_mask must be a bool or byte array of "
                                  "x's shape " + shape_str(x) + ", got " +
                                  (pass ? std::string(py::str(pass.dtype())) + " of shape " +
                                              shape_str(pass)
                                        : std::string("a non-array")));
        pass_ptr = static_cast<const uint8_t*>(pass.data());
    }
    py::object gx = py::none();
    T* gx_ptr = nullptr;
    if (need_x) {
        Array<T> g(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
        gx_ptr = g.mutable_data();
        gx = g;
    }
    Array<T> gw(b.c), gb(b.c);
    const T* w_ptr = w_any.is_none() ? nullptr : w.data();
    {
        py::gil_scoped_release release;
        batch_norm_backward<T>(gy.data(), x.data(), mean.data(), inv.data(), w_ptr, b, gx_ptr,
                               gw.mutable_data(), gb.mutable_data(), fused ? &act : nullptr,
                               pass_ptr);
    }
    return py::make_tuple(gx, gw, gb);
}

// The result array of an elementwise op: `out` where given (float32, C-contiguous,
// writeable, of x's shape: a planned graph's arena view or the input itself, as each value is
// read before its own place is written), else a new array.
Array<float> result_for(const char* op, const py::object& out, const py::array& like) {
    if (out.is_none()) return Array<float>(shape_of(like));
    const bool ok = py::isinstance<py::array>(out) && has_dtype<float>(out.cast<py::array>());
    const py::array o = ok ? out.cast<py::array>() : py::array();
    if (!ok || !(o.flags() & py::array::c_style) || !o.writeable() ||
        shape_of(o) != shape_of(like))
        throw py::value_error(std::string(op) + ": out must be a writeable C-contiguous "
                              "float32 array of shape " + shape_str(like));
    return py::reinterpret_borrow<Array<float>>(o);
}

py::array clamp(const py::array& x_any, float lo, float hi, const py::object& out) {
    if (!has_dtype<float>(x_any))
        throw py::value_error("clamp: x must be float32, got " +
                              std::string(py::str(x_any.dtype())) + " of shape " +
                              shape_str(x_any));
    if (!(lo <= hi)) throw py::value_error("clamp: need lo <= hi, got " + std::to_string(lo) +
                                           " and " + std::to_string(hi));
    Array<float> x = Array<float>::ensure(x_any);
    Array<float> y = result_for("clamp", out, x);
    py::gil_scoped_release release;
    clamp_forward(x.data(), x.size(), lo, hi, y.mutable_data());
    return std::move(y);
}

// Two float32 arrays of one shape, contiguous (copied where not); `names` ("a and b") and
// op in the errors.
std::pair<Array<float>, Array<float>> float_pair(const char* op, const char* names,
                                                 const py::array& a_any,
                                                 const py::array& b_any) {
    if (!has_dtype<float>(a_any) || !has_dtype<float>(b_any))
        throw py::value_error(std::string(op) + ": " + names + " must be float32, got " +
                              std::string(py::str(a_any.dtype())) + " and " +
                              std::string(py::str(b_any.dtype())));
    Array<float> a = Array<float>::ensure(a_any), b = Array<float>::ensure(b_any);
    if (shape_of(a) != shape_of(b))
        throw py::value_error(std::string(op) + ": " + names + " must have the same shape, got " +
                              shape_str(a) + " and " + shape_str(b));
    return {a, b};
}

py::array clamp_grad(const py::array& g_any, const py::array& y_any, float lo, float hi) {
    const auto [g, y] = float_pair("clamp_backward", "g and y", g_any, y_any);
    Array<float> gx(shape_of(y));
    py::gil_scoped_release release;
    clamp_backward(g.data(), y.data(), y.size(), lo, hi, gx.mutable_data());
    return std::move(gx);
}

py::array masked_grad_py(const py::array& g_any, const py::array& mask_any) {
    if (!has_dtype<float>(g_any) || mask_any.dtype().itemsize() != 1 ||
        mask_any.dtype().kind() == 'f')
        throw py::value_error("masked_grad: g must be float32 and mask bool or bytes, got " +
                              std::string(py::str(g_any.dtype())) + " and " +
                              std::string(py::str(mask_any.dtype())));
    Array<float> g = Array<float>::ensure(g_any);
    const auto mask = py::array::ensure(mask_any, py::array::c_style);
    if (shape_of(g) != shape_of(mask))
        throw py::value_error("masked_grad: g and mask must have the same shape, got " +
                              shape_str(g) + " and " + shape_str(mask));
    Array<float> gx(shape_of(g));
    const auto* m = static_cast<const uint8_t*>(mask.data());
    py::gil_scoped_release release;
    masked_grad(g.data(), m, g.size(), gx.mutable_data());
    return std::move(gx);
}

// A float32 (C,) vector, or null for None; `ok` turns false for anything else.
const float* vector_or_null(const py::object& o, py::ssize_t c, bool* ok) {
    if (o.is_none()) return nullptr;
    if (!py::isinstance<py::array>(o)) {
        *ok = false;
        return nullptr;
    }
    const auto a = py::reinterpret_borrow<py::array>(o);
    if (!has_dtype<float>(a) || a.ndim() != 1 || a.shape(0) != c ||
        !(a.flags() & py::array::c_style)) {
        *ok = false;
        return nullptr;
    }
    return static_cast<const float*>(a.data());
}

// eval_affine_arrays (functional/normalization.py) and Fused's conv-bias step in float32, op
// for op in numpy's order and rounding: scale = f32(1 / sqrt(f64(var) + eps)) * weight,
// shift = -scale * mean + bias, then shift + scale * conv_bias. This generic translation
// unit has no FMA to contract them into. None where an argument is not a float32 (C,) array.
py::object bn_fold(const py::object& mean, const py::object& var, const py::object& weight,
                   const py::object& bias, double eps, const py::object& conv_bias) {
    if (!py::isinstance<py::array>(var)) return py::none();
    const py::ssize_t c = py::reinterpret_borrow<py::array>(var).size();
    bool ok = true;
    const float* m = vector_or_null(mean, c, &ok);
    const float* v = vector_or_null(var, c, &ok);
    const float* w = vector_or_null(weight, c, &ok);
    const float* b = vector_or_null(bias, c, &ok);
    const float* cb = vector_or_null(conv_bias, c, &ok);
    if (!ok || m == nullptr || v == nullptr) return py::none();
    py::array_t<float> scale(c), shift(c);
    float* sc = scale.mutable_data();
    float* sh = shift.mutable_data();
    for (py::ssize_t i = 0; i < c; ++i) {
        float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v[i]) + eps));
        if (w != nullptr) s = s * w[i];
        float t = -s * m[i];
        if (b != nullptr) t = t + b[i];
        if (cb != nullptr) {
            const float moved = s * cb[i];
            t = t + moved;
        }
        sc[i] = s;
        sh[i] = t;
    }
    return py::make_tuple(scale, shift);
}

}  // namespace

void bind_norm(py::module_& m) {
    m.def("clamp", &clamp, py::arg("x"), py::arg("lo"), py::arg("hi"),
          py::arg("out") = py::none(),
          "float32 x -> min(max(x, lo), hi); NaN passes through (into out where given)");
    m.def("clamp_backward", &clamp_grad, py::arg("grad"), py::arg("y"), py::arg("lo"),
          py::arg("hi"), "g where lo < y < hi (y: the clamp's output), else 0");
    m.def("add_clamp", [](const py::array& a_any, const py::array& b_any, float lo, float hi,
                          const py::object& out) {
        const auto [a, b] = float_pair("add_clamp", "a and b", a_any, b_any);
        if (!(lo <= hi))
            throw py::value_error("add_clamp: need lo <= hi, got " + std::to_string(lo) +
                                  " and " + std::to_string(hi));
        Array<float> y = result_for("add_clamp", out, a);
        py::gil_scoped_release release;
        add_clamp(a.data(), b.data(), a.size(), lo, hi, y.mutable_data());
        return std::move(y);
    }, py::arg("a"), py::arg("b"), py::arg("lo"), py::arg("hi"), py::arg("out") = py::none(),
       "float32 min(max(a + b, lo), hi) of one shape; NaN passes through (into out where "
       "given)");
    m.def("min_max", [](const py::array& x_any) {
        if (!has_dtype<float>(x_any) || x_any.size() == 0)
            throw py::value_error("min_max: x must be a non-empty float32 array, got " +
                                  std::string(py::str(x_any.dtype())) + " of shape " +
                                  shape_str(x_any));
        Array<float> x = Array<float>::ensure(x_any);
        float lo = 0.0f, hi = 0.0f;
        {
            py::gil_scoped_release release;
            min_max(x.data(), x.size(), &lo, &hi);
        }
        return py::make_tuple(lo, hi);
    }, py::arg("x"), "(min, max) of float32 x in one parallel pass; NaN if any value is NaN");
    m.def("min_max_rows", [](const py::array& x_any) {
        if (!has_dtype<float>(x_any) || x_any.ndim() != 2 ||
            x_any.shape(0) == 0 || x_any.shape(1) == 0)
            throw py::value_error("min_max_rows: x must be a non-empty 2-D float32 array, got " +
                                  std::string(py::str(x_any.dtype())) + " of shape " +
                                  shape_str(x_any));
        Array<float> x = Array<float>::ensure(x_any);
        Array<float> lo(x.shape(0)), hi(x.shape(0));
        {
            py::gil_scoped_release release;
            min_max_rows(x.data(), x.shape(0), x.shape(1), lo.mutable_data(), hi.mutable_data());
        }
        return py::make_tuple(lo, hi);
    }, py::arg("x"), "each row's (min, max) of float32 x (rows, cols), rows in parallel; NaN "
       "for a row with a NaN");
    m.def("histogram", [](const py::array& x_any, int64_t bins, double lo, double hi) {
        if (!has_dtype<float>(x_any))
            throw py::value_error("histogram: x must be float32, got " +
                                  std::string(py::str(x_any.dtype())) + " of shape " +
                                  shape_str(x_any));
        Array<float> x = Array<float>::ensure(x_any);
        py::array_t<int64_t> counts(bins > 0 ? bins : 0);
        std::fill(counts.mutable_data(), counts.mutable_data() + counts.size(), int64_t(0));
        py::gil_scoped_release release;
        histogram_f32(x.data(), x.size(), bins, lo, hi, counts.mutable_data());
        return counts;
    }, py::arg("x"), py::arg("bins"), py::arg("lo"), py::arg("hi"),
       "int64 counts of float32 x in `bins` equal bins over [lo, hi], as numpy.histogram(x, "
       "bins, (lo, hi)) counts them under numpy 2 (histogram.h); one parallel pass");
    m.def("masked_grad", &masked_grad_py, py::arg("grad"), py::arg("mask"),
          "g where mask, else 0 (float32 g; bool or byte mask of its shape)");
    m.def("bn_fold", &bn_fold, py::arg("mean"), py::arg("var"), py::arg("weight"),
          py::arg("bias"), py::arg("eps"), py::arg("conv_bias"),
          "frozen BN (+ the conv bias before it) -> (scale, shift) float32 (C,), as numpy "
          "computes them in eval_affine_arrays; None unless every array is float32 (C,)");
    m.def("batch_norm_stats", [](const py::array& x, bool extremes) -> py::tuple {
        if (has_dtype<double>(x)) return stats_typed<double>(x, extremes);
        if (has_dtype<float>(x)) return stats_typed<float>(x, extremes);
        throw py::value_error("batch_norm_stats: x must be float32 or float64");
    }, py::arg("x"), py::arg("extremes") = false,
       "x (N, C, ...) -> (mean (C,), biased var (C,)), and with extremes each channel's min "
       "and max too, as (1, C, 2) (NaN where it has a NaN): an input for batch_norm_affine");
    m.def("batch_norm_affine", [](const py::array& x, const py::array& scale,
                                  const py::array& shift, const py::object& clamp,
                                  const py::object& fake_quant) -> py::object {
        if (has_dtype<float>(x))
            return affine_typed<float>(x, scale, shift, clamp, fake_quant);
        if (has_dtype<double>(x))
            return affine_typed<double>(x, scale, shift, clamp, fake_quant);
        throw py::value_error("batch_norm_affine: x must be float32 or float64, got " +
                              std::string(py::str(x.dtype())));
    }, py::arg("x"), py::arg("scale"), py::arg("shift"), py::arg("clamp") = py::none(),
       py::arg("fake_quant") = py::none(),
       "x * scale[c] + shift[c], clamped to clamp = (lo, hi) if given; with fake_quant = "
       "(scale, lo, hi) (float32) fake-quantized per tensor as fake_quantize (lo, hi: the "
       "integer range less the zero point) -> (y, inside)");
    m.def("batch_norm_backward", [](const py::array& gy, const py::array& x,
                                    const py::array& mean, const py::array& invstd,
                                    const py::object& weight, bool need_x,
                                    const py::object& clamp,
                                    const py::object& affine,
                                    const py::object& pass) -> py::tuple {
        if (has_dtype<double>(x))
            return backward_typed<double>(gy, x, mean, invstd, weight, need_x, clamp, affine,
                                          pass);
        if (has_dtype<float>(x))
            return backward_typed<float>(gy, x, mean, invstd, weight, need_x, clamp, affine,
                                         pass);
        throw py::value_error("batch_norm_backward: x must be float32 or float64");
    }, py::arg("grad"), py::arg("x"), py::arg("mean"), py::arg("invstd"), py::arg("weight"),
       py::arg("need_x"), py::arg("clamp") = py::none(), py::arg("affine") = py::none(),
       py::arg("pass_mask") = py::none(),
       "training-mode gradient -> (gx or None, gweight, gbias); with clamp = (lo, hi) and "
       "affine = the forward's (scale, shift), grad only where lo < x * scale + shift < hi; "
       "with pass_mask (bool or bytes of x's shape), only where it is set");
}

}  // namespace bind
}  // namespace tianyuan
