// pybind11 glue: the AMX tiles' helpers (framework/csrc/int8_amx/int8_amx.h): their peak, the store's
// windows and offsets and the real tiles' check against their emulation (in _C.testing, for
// the tests and benchmarks), and the planes kernel's weight packer. The convolutions themselves are
// bind_int8_conv.cpp's Int8Conv. (Not named *_amx.cpp: setup.py would build it with AMX flags.)
#include <stdexcept>
#include <string>
#include <vector>

#include "int8_amx/int8_amx.h"

#include "int8_gemm/bind_int8_common.h"

namespace tianyuan {
namespace bind {

void bind_int8_tiles(py::module_& m) {
    py::module_ testing = testing_of(m);
    testing.def("int8_amx_peak", &int8::amx_peak, py::arg("steps"),
          py::call_guard<py::gil_scoped_release>(),
          "int8 operations per second of a register-only TDPBUSD loop (steps x 4 "
          "instructions on every thread): the AMX peak; RuntimeError without AMX");
    testing.def("int8_amx_window", [](int64_t v, int64_t wph, int64_t ow, int64_t nv) {
        if (wph < 1 || ow < 1 || ow > wph || v < 0) {
            throw std::invalid_argument("int8_amx_window: needs v >= 0 and 1 <= ow <= wph, got "
                                        "v=" + std::to_string(v) + ", ow=" +
                                        std::to_string(ow) + ", wph=" + std::to_string(wph));
        }
        int8::AmxWindow w;
        int8::amx_window(v, wph, ow, nv, w);
        py::list runs;
        for (int k = 0; k < w.segs; ++k) runs.append(py::make_tuple(w.off[k], w.mask[k]));
        return runs;
    }, py::arg("v"), py::arg("wph"), py::arg("ow"), py::arg("nv"),
       "the AMX store's runs of virtual positions [v, v + 16): [(offset, 16-bit mask)] "
       "(int8_amx.h, AmxWindow); for the tests, on CPUs with AVX-512");
    testing.def("int8_amx_offsets", [](int64_t v, int64_t wph, int64_t ow, int64_t nv, int64_t oc) {
        if (wph < 1 || ow < 1 || ow > wph || v < 0 || oc < 1) {
            throw std::invalid_argument("int8_amx_offsets: needs v >= 0, 1 <= ow <= wph and "
                                        "oc >= 1, got v=" + std::to_string(v) + ", ow=" +
                                        std::to_string(ow) + ", wph=" + std::to_string(wph) +
                                        ", oc=" + std::to_string(oc));
        }
        std::vector<int64_t> offs(int8::kAmxPos);
        int8::amx_offsets(v, wph, ow, nv, oc, offs.data());
        return offs;
    }, py::arg("v"), py::arg("wph"), py::arg("ow"), py::arg("nv"), py::arg("oc"),
       "the AMX channels-last store's offsets of virtual positions [v, v + 32) (-1: "
       "dropped); int8_amx.h, amx_offsets; for the tests");
    testing.def("int8_amx_verified", &int8::amx_verified,
          "whether the real AMX tiles gave the emulated ones' bits (both conv algorithms "
          "and the rows form), "
          "checked once per process; False where the OS grants no AMX");
    m.def("int8_pack_conv_weights_amx", [](const Array<int8_t>& w) {
        if (w.ndim() != 4) {
            throw std::invalid_argument("int8_pack_conv_weights_amx: w must be (OC, C, kh, kw)");
        }
        const int64_t oc = w.shape(0), c = w.shape(1), taps = w.shape(2) * w.shape(3);
        if (c % int8::kAmxK || oc % int8::kAmxOc) {
            throw std::invalid_argument("int8_pack_conv_weights_amx: C must be a multiple of 64"
                                        " and OC of 32, got w " + shape_str(w));
        }
        Array<int8_t> out(int8::amx_packed_size(oc, c, taps));
        int8::amx_pack_weights(w.data(), oc, c, taps, out.mutable_data());
        return out;
    }, py::arg("w"), "w s8 (OC, C, kh, kw) -> the AMX tiles' weight layout (int8_amx.h)");
}

}  // namespace bind
}  // namespace tianyuan
