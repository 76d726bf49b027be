// Greedy NMS; see nms.h. Boxes are reordered once into score order as four coordinate
// columns and their areas (structure of arrays: the inner loop reads each column
// contiguously), then scanned.
#include "nms/nms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

namespace tianyuan {
namespace {

template <typename T>
struct Columns {
    std::vector<T> x1, y1, x2, y2, area;
    explicit Columns(size_t n) : x1(n), y1(n), x2(n), y2(n), area(n) {}
};

// Input indices by decreasing score, stable, NaN last (numpy's argsort(-scores, "stable")).
template <typename T>
std::vector<int64_t> score_order(const T* scores, int64_t n) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [scores](int64_t a, int64_t b) {
        const T sa = scores[a], sb = scores[b];
        return !std::isnan(sa) && (std::isnan(sb) || sa > sb);
    });
    return order;
}

template <typename T>
Columns<T> gather(const T* boxes, const std::vector<int64_t>& order) {
    Columns<T> c(order.size());
    for (size_t k = 0; k < order.size(); ++k) {
        const T* b = boxes + order[k] * 4;
        c.x1[k] = b[0];
        c.y1[k] = b[1];
        c.x2[k] = b[2];
        c.y2[k] = b[3];
        c.area[k] = (b[2] - b[0]) * (b[3] - b[1]);
    }
    return c;
}

// Suppresses, among boxes [lo, hi) of `c`, those after rank `i` (rank[k] > i) whose IoU with
// box (ax1, ay1, ax2, ay2) of area `aarea` exceeds the threshold; the spec's expressions, the
// kept box first. Branch-free: the compiler vectorises it.
template <typename T, typename Lane>
void suppress_after(const Columns<T>& c, const Lane* rank, Lane i, size_t lo, size_t hi,
                    const T* a, T threshold, Lane* sup) {
    const T zero = 0;
    const T ax1 = a[0], ay1 = a[1], ax2 = a[2], ay2 = a[3], aarea = a[4];
    const T* x1 = c.x1.data();
    const T* y1 = c.y1.data();
    const T* x2 = c.x2.data();
    const T* y2 = c.y2.data();
    const T* area = c.area.data();
    for (size_t j = lo; j < hi; ++j) {
        const T w = std::max(zero, std::min(ax2, x2[j]) - std::max(ax1, x1[j]));
        const T h = std::max(zero, std::min(ay2, y2[j]) - std::max(ay1, y1[j]));
        const T inter = w * h;
        const T iou = inter / (aarea + area[j] - inter);
        sup[j] |= static_cast<Lane>((iou > threshold) & (rank[j] > i));
    }
}

// Whether every box of ranks [begin, end) is finite with sides >= 0.
template <typename T>
bool all_proper(const Columns<T>& c, size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k)
        if (!(std::isfinite(c.x1[k]) && std::isfinite(c.x2[k]) && std::isfinite(c.y1[k]) &&
              std::isfinite(c.y2[k]) && c.x2[k] >= c.x1[k] && c.y2[k] >= c.y1[k]))
            return false;
    return true;
}

// The greedy scan over ranks [begin, end): suppressed[k] set for every dropped rank. A kept
// box meets every later box (dense), or, where that is far more work, only the boxes whose
// x1 lies in [x1 - widest, x2): a window of the boxes sorted by x1 (any other box has no
// intersection: IoU 0 or NaN, never above a threshold >= 0). Both give the spec's answer.
template <typename T>
void greedy(const Columns<T>& c, size_t begin, size_t end, T threshold,
            std::vector<unsigned char>& suppressed) {
    const size_t m = end - begin;
    std::vector<size_t> order(m);   // ranks by x1 (the sweep), or by rank (dense)
    std::iota(order.begin(), order.end(), begin);
    std::vector<std::pair<size_t, size_t>> windows(m);
    bool sweep = false;
    if (threshold >= 0 && m > 64 && all_proper(c, begin, end)) {
        std::stable_sort(order.begin(), order.end(),
                         [&c](size_t a, size_t b) { return c.x1[a] < c.x1[b]; });
        std::vector<double> xs(m);
        double widest = 0, work = 0;
        for (size_t k = 0; k < m; ++k) {
            xs[k] = static_cast<double>(c.x1[order[k]]);
            widest = std::max(widest, static_cast<double>(c.x2[order[k]]) - xs[k]);
        }
        for (size_t i = begin; i < end; ++i) {
            const double x1 = c.x1[i], x2 = c.x2[i];
            const double margin = 1e-6 * (std::fabs(x1) + std::fabs(x2) + widest) + 1e-30;
            const size_t lo = std::lower_bound(xs.begin(), xs.end(), x1 - widest - margin) -
                              xs.begin();
            const size_t hi = std::lower_bound(xs.begin(), xs.end(), x2 + margin) - xs.begin();
            windows[i - begin] = {lo, hi};
            work += static_cast<double>(hi - lo);
        }
        // the same vectorised loop either way: the sweep where its windows hold fewer boxes
        sweep = work < static_cast<double>(m) * static_cast<double>(m - 1) / 2;
        if (!sweep) std::iota(order.begin(), order.end(), begin);
    }
    if (!sweep)   // dense: every later box
        for (size_t k = 0; k < m; ++k) windows[k] = {k + 1, m};
    // the boxes in `order`, their ranks and where each rank sits; ranks and flags as wide as
    // T, so that the suppression loop vectorises with one lane type
    using Lane = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
    Columns<T> in_order(m);
    std::vector<Lane> rank(m);
    std::vector<size_t> where(m);
    for (size_t k = 0; k < m; ++k) {
        const size_t r = order[k];
        in_order.x1[k] = c.x1[r];
        in_order.y1[k] = c.y1[r];
        in_order.x2[k] = c.x2[r];
        in_order.y2[k] = c.y2[r];
        in_order.area[k] = c.area[r];
        rank[k] = static_cast<Lane>(r);
        where[r - begin] = k;
    }
    std::vector<Lane> sup(m, 0);
    for (size_t i = begin; i < end; ++i) {
        const size_t k = where[i - begin];
        if (sup[k]) continue;
        const T box[5] = {c.x1[i], c.y1[i], c.x2[i], c.y2[i], c.area[i]};
        suppress_after(in_order, rank.data(), static_cast<Lane>(i), windows[i - begin].first,
                       windows[i - begin].second, box, threshold, sup.data());
    }
    for (size_t k = 0; k < m; ++k) suppressed[static_cast<size_t>(rank[k])] = sup[k] != 0;
}

}  // namespace

template <typename T>
int64_t nms(const T* boxes, const T* scores, int64_t n, double iou_threshold, int64_t* keep) {
    const std::vector<int64_t> order = score_order(scores, n);
    const Columns<T> c = gather(boxes, order);
    std::vector<unsigned char> suppressed(static_cast<size_t>(n), 0);
    greedy(c, 0, order.size(), static_cast<T>(iou_threshold), suppressed);
    int64_t kept = 0;
    for (size_t k = 0; k < order.size(); ++k)
        if (!suppressed[k]) keep[kept++] = order[k];
    return kept;
}

template <typename T>
int64_t batched_nms(const T* boxes, const T* scores, const int64_t* idxs, int64_t n,
                    double iou_threshold, int64_t* keep) {
    const std::vector<int64_t> by_score = score_order(scores, n);
    // by category, each category's boxes in score order (a stable sort of the score order)
    std::vector<int64_t> order = by_score;
    std::stable_sort(order.begin(), order.end(),
                     [idxs](int64_t a, int64_t b) { return idxs[a] < idxs[b]; });
    const Columns<T> c = gather(boxes, order);
    std::vector<unsigned char> suppressed(order.size(), 0);
    for (size_t begin = 0; begin < order.size();) {
        size_t end = begin + 1;
        while (end < order.size() && idxs[order[end]] == idxs[order[begin]]) ++end;
        greedy(c, begin, end, static_cast<T>(iou_threshold), suppressed);
        begin = end;
    }
    std::vector<unsigned char> kept_input(order.size(), 0);
    for (size_t k = 0; k < order.size(); ++k)
        if (!suppressed[k]) kept_input[static_cast<size_t>(order[k])] = 1;
    int64_t kept = 0;
    for (const int64_t i : by_score)
        if (kept_input[static_cast<size_t>(i)]) keep[kept++] = i;
    return kept;
}

#define TIANYUAN_NMS(T)                                                                        \
    template int64_t nms<T>(const T*, const T*, int64_t, double, int64_t*);                    \
    template int64_t batched_nms<T>(const T*, const T*, const int64_t*, int64_t, double,       \
                                    int64_t*);
TIANYUAN_NMS(float)
TIANYUAN_NMS(double)
#undef TIANYUAN_NMS

}  // namespace tianyuan
