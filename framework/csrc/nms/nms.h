// Greedy non-maximum suppression, as torchvision's CPU kernel and our numpy spec
// (framework/ops/boxes.py): boxes by decreasing score, stable (ties keep their input order;
// NaN scores last); a box goes when its IoU with a kept box of higher score exceeds the
// threshold. IoU is computed in the boxes' type with the spec's expressions in its order,
// and the threshold compared in that type, so the kept indices equal the spec's bit for bit.
// Generic C++ only: the scan is serial, and its inner loop (one box against every later
// one) is plain float arithmetic the compiler vectorises at the baseline ISA; a wider ISA
// would need -ffp-contract=off to stay bit-equal and was not worth a second path.
#pragma once

#include <cstdint>

namespace tianyuan {

// Writes the kept indices, by decreasing score, to keep (room for n); returns their count.
// boxes (n, 4) x1, y1, x2, y2; scores (n,).
template <typename T>
int64_t nms(const T* boxes, const T* scores, int64_t n, double iou_threshold, int64_t* keep);

// The same within each category idxs[i] (no box suppresses one of another category); the
// kept indices of all categories merged by decreasing score (stable).
template <typename T>
int64_t batched_nms(const T* boxes, const T* scores, const int64_t* idxs, int64_t n,
                    double iou_threshold, int64_t* keep);

}  // namespace tianyuan
