// pybind11 glue: optimizer updates (framework/csrc/optim.h).
#include <string>

#include "optim.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {

void bind_optim(py::module_& m) {
    m.def("sgd_momentum_update", [](py::array& p, const py::array& g, py::array& buf, double lr,
                                    double momentum, double dampening, double weight_decay,
                                    bool nesterov) {
        const auto check = [&](const py::array& a, const char* what) {
            if (!a.dtype().is(py::dtype::of<float>()) || !(a.flags() & py::array::c_style))
                throw py::value_error(std::string("sgd_momentum_update: ") + what +
                                      " must be a contiguous float32 array, got " +
                                      std::string(py::str(a.dtype())) + " " + shape_str(a));
            if (a.size() != p.size())
                throw py::value_error(std::string("sgd_momentum_update: ") + what + " " +
                                      shape_str(a) + " must have the parameter's size " +
                                      shape_str(p));
        };
        check(p, "param");
        check(g, "grad");
        check(buf, "momentum_buffer");
        if (!p.writeable() || !buf.writeable())
            throw py::value_error("sgd_momentum_update: param and momentum_buffer must be "
                                  "writeable");
        // the scalars as numpy rounds them against float32 arrays (1 - dampening in double)
        const SgdStep s{static_cast<float>(lr), static_cast<float>(momentum),
                        static_cast<float>(1.0 - dampening), static_cast<float>(weight_decay),
                        weight_decay != 0.0, dampening != 0.0, nesterov};
        auto* pp = static_cast<float*>(p.mutable_data());
        auto* bp = static_cast<float*>(buf.mutable_data());
        const auto* gp = static_cast<const float*>(g.data());
        py::gil_scoped_release release;
        sgd_momentum_update(pp, gp, bp, p.size(), s);
    }, py::arg("param"), py::arg("grad"), py::arg("momentum_buffer"), py::arg("lr"),
       py::arg("momentum"), py::arg("dampening"), py::arg("weight_decay"), py::arg("nesterov"),
       "one SGD step with momentum in place (after the first: the buffer exists), float32");
}

}  // namespace bind
}  // namespace tianyuan
