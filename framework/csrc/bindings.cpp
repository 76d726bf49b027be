// The extension's one module definition: each kernel family registers its functions from its
// own bind_<family>.cpp (argument checks, arrays to pointers and shapes); this file only
// lists them. Kernel families live in their own files and know nothing of Python. Functions
// only the tests and benchmarks call go to the `testing` submodule (bind_common.h, testing_of).
#include "bind_common.h"

PYBIND11_MODULE(_C, m) {
    using namespace tianyuan::bind;
    m.doc() = "tianyuan native kernels";
    m.def_submodule("testing", "probes for the tests and benchmarks only: register peaks, "
                               "scratch canaries, the AMX store's windows and tile check");
    bind_runtime(m);
    bind_im2col(m);
    bind_pool(m);
    bind_depthwise(m);
    bind_norm(m);
    bind_optim(m);
    bind_winograd(m);
    bind_conv_gemm(m);
    bind_int8(m);
    bind_int8_deconv(m);
    bind_roi_align(m);
    bind_nms(m);
    bind_imgproc(m);
}
