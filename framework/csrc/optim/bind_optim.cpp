// pybind11 glue: optimizer updates (framework/csrc/optim/optim.h).
#include <cmath>
#include <string>

#include "optim/optim.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {

namespace {

// Contiguous float32 arrays of the parameter's size; the updated ones writeable.
void check_state(const char* op, const py::array& p, const py::array& a, const char* what,
                 bool written) {
    if (!has_dtype<float>(a) || !(a.flags() & py::array::c_style))
        throw py::value_error(std::string(op) + ": " + what +
                              " must be a contiguous float32 array, got " +
                              std::string(py::str(a.dtype())) + " " + shape_str(a));
    if (a.size() != p.size())
        throw py::value_error(std::string(op) + ": " + what + " " + shape_str(a) +
                              " must have the parameter's size " + shape_str(p));
    if (written && !a.writeable())
        throw py::value_error(std::string(op) + ": " + what + " must be writeable");
}

}  // namespace

void bind_optim(py::module_& m) {
    m.def("sgd_momentum_update", [](py::array& p, const py::array& g, py::array& buf, double lr,
                                    double momentum, double dampening, double weight_decay,
                                    bool nesterov) {
        const char* op = "sgd_momentum_update";
        check_state(op, p, p, "param", true);
        check_state(op, p, g, "grad", false);
        check_state(op, p, buf, "momentum_buffer", true);
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
    m.def("adam_update", [](py::array& p, const py::array& g, py::array& exp_avg,
                            py::array& exp_avg_sq, int64_t step, double lr, double beta1,
                            double beta2, double eps, double weight_decay, bool decoupled) {
        const char* op = "adam_update";
        check_state(op, p, p, "param", true);
        check_state(op, p, g, "grad", false);
        check_state(op, p, exp_avg, "exp_avg", true);
        check_state(op, p, exp_avg_sq, "exp_avg_sq", true);
        if (step < 1) throw py::value_error("adam_update: step must be >= 1");
        // the constants as adam.py computes them in Python (double), then float32
        const double t = static_cast<double>(step);
        const AdamStep s{static_cast<float>(1.0 - lr * weight_decay),
                         static_cast<float>(weight_decay),
                         static_cast<float>(1.0 - beta1),
                         static_cast<float>(beta2),
                         static_cast<float>(1.0 - beta2),
                         static_cast<float>(lr / (1.0 - std::pow(beta1, t))),
                         static_cast<float>(std::sqrt(1.0 - std::pow(beta2, t))),
                         static_cast<float>(eps),
                         weight_decay != 0.0 && decoupled,
                         weight_decay != 0.0 && !decoupled};
        auto* pp = static_cast<float*>(p.mutable_data());
        auto* mp = static_cast<float*>(exp_avg.mutable_data());
        auto* vp = static_cast<float*>(exp_avg_sq.mutable_data());
        const auto* gp = static_cast<const float*>(g.data());
        py::gil_scoped_release release;
        adam_update(pp, gp, mp, vp, p.size(), s);
    }, py::arg("param"), py::arg("grad"), py::arg("exp_avg"), py::arg("exp_avg_sq"),
       py::arg("step"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
       py::arg("weight_decay"), py::arg("decoupled"),
       "one Adam (decoupled: AdamW) step in place, without amsgrad, float32");
}

}  // namespace bind
}  // namespace tianyuan
