// Optimizer updates (optim.h).
#include "optim/optim.h"

#include <cmath>

namespace tianyuan {
namespace {

// body(i) for every i < n: blocks of values in parallel from four blocks on.
template <typename Body>
void each_value(int64_t n, const Body& body) {
    constexpr int64_t kBlock = 1 << 14;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= 4 * kBlock)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t end = (b + 1) * kBlock < n ? (b + 1) * kBlock : n;
        for (int64_t i = b * kBlock; i < end; ++i) body(i);
    }
}

}  // namespace

void sgd_momentum_update(float* p, const float* g, float* buf, int64_t n, const SgdStep& s) {
    each_value(n, [&, s](int64_t i) {  // s by value: no store can alias it
        float d = g[i];
        if (s.decay) {
            const float decay = s.weight_decay * p[i];
            d = d + decay;
        }
        float m = buf[i] * s.momentum;
        if (s.dampening) {
            const float part = s.one_minus_dampening * d;
            m = m + part;
        } else {
            m = m + d;
        }
        buf[i] = m;
        if (s.nesterov) {
            const float ahead = s.momentum * m;
            d = d + ahead;
        } else {
            d = m;
        }
        const float step = s.lr * d;
        p[i] = p[i] - step;
    });
}

void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s) {
    each_value(n, [&, s](int64_t i) {  // s by value: no store can alias it
        float pi = p[i], gi = g[i];
        if (s.decoupled) pi = pi * s.decay;
        if (s.coupled) {
            const float decay = s.l2 * pi;
            gi = gi + decay;
        }
        const float toward = s.one_minus_beta1 * (gi - m[i]);
        const float mi = m[i] + toward;
        const float scaled = s.one_minus_beta2 * gi;
        const float square = scaled * gi;
        const float vi = v[i] * s.beta2 + square;
        m[i] = mi;
        v[i] = vi;
        const float denom = std::sqrt(vi) / s.bias2 + s.eps;
        const float step = (s.step_size * mi) / denom;
        p[i] = pi - step;
    });
}

}  // namespace tianyuan
