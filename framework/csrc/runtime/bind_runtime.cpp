// pybind11 glue: CPU features, ISA selection, threads, build info.
#include <omp.h>

#include <stdexcept>
#include <string>

#include "runtime/cpu.h"
#include "int8_cgemm/int8_cgemm.h"
#include "runtime/threads.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {
#ifndef TIANYUAN_BUILD_FLAGS
#define TIANYUAN_BUILD_FLAGS ""
#endif

namespace {

Isa parse_isa(const std::string& name) {
    for (int i = 0; i <= static_cast<int>(Isa::amx); ++i) {
        if (name == isa_name(static_cast<Isa>(i))) return static_cast<Isa>(i);
    }
    throw std::invalid_argument("unknown ISA '" + name +
                                "'; expected one of generic, avx2, avxvnni, avx512, vnni, amx");
}

py::dict features_dict() {
    const CpuFeatures& f = cpu_features();
    py::dict d;
    d["avx2"] = f.avx2;
    d["fma"] = f.fma;
    d["avx512f"] = f.avx512f;
    d["avx512bw"] = f.avx512bw;
    d["avx512vl"] = f.avx512vl;
    d["avx512dq"] = f.avx512dq;
    d["avx512_vnni"] = f.avx512vnni;
    d["avx512_vbmi"] = f.avx512vbmi;
    d["avx_vnni"] = f.avxvnni;
    d["amx_tile"] = f.amx_tile;
    d["amx_int8"] = f.amx_int8;
    d["os_avx512"] = f.os_avx512;
    d["os_amx"] = f.os_amx;
    return d;
}
}  // namespace

void bind_runtime(py::module_& m) {
    py::module_ testing = testing_of(m);
    m.def("cpu_features", &features_dict, "CPU features as detected by CPUID and XGETBV");
    testing.def("int8_broken_scratch", &int8::broken_spaces,
          "names of the int8 scratch buffers some kernel wrote past since the last call "
          "(int8_cgemm.h, thread_space); for the tests");
    testing.def("int8_scribble_scratch", &int8::scribble_spaces, py::arg("value"),
          "set every int8 scratch buffer's bytes to value (int8_cgemm.h, scribble_spaces), "
          "so that a kernel reading a previous call's bytes reads junk; for the tests");
    m.def("best_isa", [] { return std::string(isa_name(best_isa())); });
    m.def("current_isa", [] { return std::string(isa_name(current_isa())); });
    m.def("isa_runs", [](const std::string& name) { return isa_runs(parse_isa(name)); },
          "whether this CPU and OS can run the named ISA path");
    m.def("set_isa", [](const std::string& name) {
        const Isa isa = parse_isa(name);
        if (!set_isa(isa)) {
            throw std::runtime_error("ISA '" + name + "' is not supported by this CPU/OS; best is '" +
                                     isa_name(best_isa()) + "'");
        }
    });
    m.def("set_num_threads", [](int n) {
        if (n < 1) throw std::invalid_argument("set_num_threads: n must be >= 1, got " + std::to_string(n));
        if (n > 1 && forked_child()) {
            throw std::runtime_error(
                "set_num_threads: this process was forked from one that had loaded tianyuan, "
                "and OpenMP cannot start threads after a fork (libgomp's pool stays with the "
                "parent): it runs on 1 thread. Start it with the spawn method "
                "(DataLoader(start_method='spawn'), multiprocessing.get_context('spawn')) to "
                "use " + std::to_string(n));
        }
        omp_set_num_threads(n);
        pin_workers();
    });
    m.def("get_num_threads", [] { return omp_get_max_threads(); });
    m.def("pin_workers", &pin_workers,
          "pin the OpenMP workers one to a CPU (threads.h); the number pinned");
    m.def("pinned_workers", &pinned_workers, "what the last pin_workers returned");
    testing.def("region_cost_us", [](int reps, double pause_us) {
        if (reps < 1 || !(pause_us >= 0)) {
            throw std::invalid_argument("region_cost_us: needs reps >= 1 and pause_us >= 0, got " +
                                        std::to_string(reps) + ", " + std::to_string(pause_us));
        }
        py::gil_scoped_release unlocked;
        return region_cost_us(reps, pause_us);
    }, py::arg("reps"), py::arg("pause_us") = 0.0,
       "an empty parallel region's fork and join on the current team, median us (threads.h)");
    m.attr("build_flags") = TIANYUAN_BUILD_FLAGS;
    m.attr("compiler") = __VERSION__;
}

}  // namespace bind
}  // namespace tianyuan
