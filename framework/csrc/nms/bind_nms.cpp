// pybind11 glue: greedy NMS and per-category NMS (nms/nms.h). Shapes are checked here; the
// kernels read boxes (n, 4), scores (n,) and idxs (n,) only.
#include <cstdint>
#include <string>

#include "nms/nms.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {
namespace {

template <typename T>
void check_boxes(const char* op, const Array<T>& boxes, const Array<T>& scores) {
    if (boxes.ndim() != 2 || boxes.shape(1) != 4)
        throw py::value_error(std::string(op) + ": boxes must be (N, 4) x1, y1, x2, y2, got " +
                              shape_str(boxes));
    if (boxes.shape(0) > INT32_MAX)   // the float kernels keep ranks as int32 (nms.cpp)
        throw py::value_error(std::string(op) + ": at most 2^31 - 1 boxes, got " +
                              std::to_string(boxes.shape(0)));
    if (scores.ndim() != 1 || scores.shape(0) != boxes.shape(0))
        throw py::value_error(std::string(op) + ": scores must be (" +
                              std::to_string(boxes.shape(0)) + ",), one per box, got " +
                              shape_str(scores));
}

template <typename T>
py::array nms_typed(const py::array& boxes_any, const py::array& scores_any, double threshold) {
    Array<T> boxes = Array<T>::ensure(boxes_any);
    Array<T> scores = Array<T>::ensure(scores_any);
    check_boxes("nms", boxes, scores);
    const int64_t n = boxes.shape(0);
    Array<int64_t> keep({n});
    int64_t kept = 0;
    {
        py::gil_scoped_release release;
        kept = nms<T>(boxes.data(), scores.data(), n, threshold, keep.mutable_data());
    }
    keep.resize({kept});
    return std::move(keep);
}

template <typename T>
py::array batched_typed(const py::array& boxes_any, const py::array& scores_any,
                        const py::array& idxs_any, double threshold) {
    Array<T> boxes = Array<T>::ensure(boxes_any);
    Array<T> scores = Array<T>::ensure(scores_any);
    Array<int64_t> idxs = Array<int64_t>::ensure(idxs_any);
    check_boxes("batched_nms", boxes, scores);
    const int64_t n = boxes.shape(0);
    if (idxs.ndim() != 1 || idxs.shape(0) != n)
        throw py::value_error("batched_nms: idxs must be (" + std::to_string(n) + ",), one "
                              "category per box, got " + shape_str(idxs));
    Array<int64_t> keep({n});
    int64_t kept = 0;
    {
        py::gil_scoped_release release;
        kept = batched_nms<T>(boxes.data(), scores.data(), idxs.data(), n, threshold,
                              keep.mutable_data());
    }
    keep.resize({kept});
    return std::move(keep);
}

}  // namespace

void bind_nms(py::module_& m) {
    m.def(
        "nms",
        [](const py::array& boxes, const py::array& scores, double iou_threshold) {
            return dispatch_float(
                "nms", "boxes", boxes,
                [&] { return nms_typed<float>(boxes, scores, iou_threshold); },
                [&] { return nms_typed<double>(boxes, scores, iou_threshold); });
        },
        "Greedy NMS: int64 indices kept, by decreasing score");
    m.def(
        "batched_nms",
        [](const py::array& boxes, const py::array& scores, const py::array& idxs,
           double iou_threshold) {
            return dispatch_float(
                "batched_nms", "boxes", boxes,
                [&] { return batched_typed<float>(boxes, scores, idxs, iou_threshold); },
                [&] { return batched_typed<double>(boxes, scores, idxs, iou_threshold); });
        },
        "NMS within each category idxs: int64 indices kept, by decreasing score");
}

}  // namespace bind
}  // namespace tianyuan
