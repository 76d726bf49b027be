// pybind11 glue: Winograd F(2x2, 3x3) transforms (framework/csrc/winograd/winograd.h).
#include <stdexcept>
#include <string>

#include "winograd/winograd.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {
namespace {

// F(2x2, 3x3): a 3x3 window, stride 1, padding 0 to 2 a side, the bottom and right ones
// implied by out_size (out = in + top + bottom - 2); checked by window_2d.
WinogradGeometry wino_geometry(const char* op, const Dims& in, Pair pad, Pair out) {
    const auto [pt, pl] = pad;
    const auto [oh, ow] = out;
    if (pt < 0 || pl < 0 || pt > 2 || pl > 2 || oh < 1 || ow < 1 || oh > kMaxPlane ||
        ow > kMaxPlane)
        throw py::value_error(std::string(op) + ": need 0 <= padding (top, left) <= 2 and a "
                              "positive out_size, got padding (" + std::to_string(pt) + ", " +
                              std::to_string(pl) + "), out_size (" + std::to_string(oh) + ", " +
                              std::to_string(ow) + ")");
    const Window2d w = window_2d(op, in, {3, 3}, {1, 1}, {pt, oh + 2 - in.d[2] - pt, pl,
                                 ow + 2 - in.d[3] - pl}, {1, 1}, PadRule::below_extent);
    if (w.oh != oh || w.ow != ow) throw std::logic_error("wino_geometry: the sizes disagree");
    return {in.d[0], in.d[1], in.d[2], in.d[3], pt, pl, oh, ow};
}

template <typename T>
py::array input_typed(const py::array& x_any, Pair pad, Pair out) {
    Array<T> x = Array<T>::ensure(x_any);
    if (x.ndim() != 4) throw py::value_error("winograd_input_transform: x must be (N, C, H, W)");
    const WinogradGeometry g = wino_geometry("winograd_input_transform", dims_of(x), pad, out);
    Array<T> v({int64_t(16), g.c, g.tiles()});
    py::gil_scoped_release release;
    winograd_input_transform<T>(x.data(), g, v.mutable_data());
    return std::move(v);
}

template <typename T>
py::array output_typed(const py::array& m_any, int64_t n, Pair out) {
    Array<T> m = Array<T>::ensure(m_any);
    const char* op = "winograd_output_transform";
    const auto [oh, ow] = out;
    if (n < 0 || oh < 1 || ow < 1)
        throw py::value_error(std::string(op) + ": need batch >= 0 and out_size >= 1, got " +
                              std::to_string(n) + " and (" + std::to_string(oh) + ", " +
                              std::to_string(ow) + ")");
    check_plane(op, "out_size", oh, ow);
    const WinogradGeometry g{n, 0, 0, 0, 0, 0, oh, ow};
    checked_mul(n, checked_mul(g.th(), g.tw(), op, "the tiles"), op, "the batch's tiles");
    if (m.ndim() != 3 || m.shape(0) != 16 || m.shape(2) != g.tiles())
        throw py::value_error(std::string(op) + ": m must be (16, Co, " +
                              std::to_string(g.tiles()) + ") for batch " + std::to_string(n) +
                              ", got " + shape_str(m));
    const int64_t co = m.shape(1);
    Array<T> y({n, co, g.oh, g.ow});
    py::gil_scoped_release release;
    winograd_output_transform<T>(m.data(), g, co, y.mutable_data());
    return std::move(y);
}

template <typename T>
py::array weight_typed(const py::array& w_any) {
    Array<T> w = Array<T>::ensure(w_any);
    if (w.ndim() != 4 || w.shape(2) != 3 || w.shape(3) != 3)
        throw py::value_error("winograd_weight_transform: w must be (Co, C, 3, 3)");
    Array<T> u({int64_t(16), int64_t(w.shape(0)), int64_t(w.shape(1))});
    py::gil_scoped_release release;
    winograd_weight_transform<T>(w.data(), w.shape(0), w.shape(1), u.mutable_data());
    return std::move(u);
}

}  // namespace

void bind_winograd(py::module_& m) {
    m.def("winograd_weight_transform", [](const py::array& w) {
        return dispatch_float("winograd_weight_transform", "w", w,
                              [&] { return weight_typed<float>(w); },
                              [&] { return weight_typed<double>(w); });
    }, py::arg("w"), "w (Co, C, 3, 3) -> U (16, Co, C) = G w G^T, F(2x2, 3x3)");
    m.def("winograd_input_transform", [](const py::array& x, Pair pad, Pair out) {
        return dispatch_float("winograd_input_transform", "x", x,
                              [&] { return input_typed<float>(x, pad, out); },
                              [&] { return input_typed<double>(x, pad, out); });
    }, py::arg("x"), py::arg("padding"), py::arg("out_size"),
       "x (N, C, H, W), padding (top, left), out_size -> V (16, C, tiles), F(2x2, 3x3)");
    m.def("winograd_output_transform", [](const py::array& mm, int64_t n, Pair out) {
        return dispatch_float("winograd_output_transform", "m", mm,
                              [&] { return output_typed<float>(mm, n, out); },
                              [&] { return output_typed<double>(mm, n, out); });
    }, py::arg("m"), py::arg("batch"), py::arg("out_size"),
       "M (16, Co, tiles) -> (batch, Co, out_h, out_w), F(2x2, 3x3)");
}

}  // namespace bind
}  // namespace tianyuan
