// Optimizer updates in one pass over a parameter, float32, OpenMP over blocks of values.
// Built in the generic translation unit only: its x86-64 baseline has no fused multiply-add,
// so each product and sum rounds as numpy's separate operations do and the result has their
// bits (framework/optim/sgd.py is the twin; a test compares the two).
#pragma once

#include <cstdint>

namespace tianyuan {

// SGD with momentum after its first step (buf holds the momentum), PyTorch's rule as
// framework/optim/sgd.py writes it, each operation rounded to float32 in its order:
//   d = g (+ weight_decay * p);  buf = buf * momentum + (dampening ? (1 - dampening) * d : d)
//   d = nesterov ? d + momentum * buf : buf;  p = p - lr * d
struct SgdStep {
    float lr, momentum, one_minus_dampening, weight_decay;
    bool decay, dampening, nesterov;  // weight_decay != 0, dampening != 0 (before rounding)
};
void sgd_momentum_update(float* p, const float* g, float* buf, int64_t n, const SgdStep& s);

// Adam / AdamW without amsgrad as framework/optim/adam.py writes it, with its step's constants
// (each rounded to float32 as numpy does against float32 arrays):
//   p = p * decay                          (AdamW with weight decay: decay = 1 - lr * wd)
//   g = g + l2 * p                         (Adam with weight decay: l2 = wd)
//   m = m + one_minus_beta1 * (g - m);  v = v * beta2 + (one_minus_beta2 * g) * g
//   p = p - (step_size * m) / (sqrt(v) / bias2 + eps)
// with step_size = lr / (1 - beta1^t), bias2 = sqrt(1 - beta2^t).
struct AdamStep {
    float decay, l2, one_minus_beta1, beta2, one_minus_beta2, step_size, bias2, eps;
    bool decoupled, coupled;  // which weight decay applies (none: both false)
};
void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s);

}  // namespace tianyuan
