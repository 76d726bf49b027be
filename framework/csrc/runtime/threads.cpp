#include "runtime/threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace tianyuan {
namespace {

std::atomic<int> pinned{0};
std::atomic<bool> forked{false};

#if defined(__linux__)
// In the child of a fork, before anything else runs there: one thread, nothing pinned.
void child_after_fork() {
    forked = true;
    pinned = 0;
    omp_set_num_threads(1);
}
[[maybe_unused]] const int registered = pthread_atfork(nullptr, nullptr, child_after_fork);

// Each thread t of a team of n sets its affinity to masks[t] (t = 0 skipped: the caller).
int set_worker_masks(int n, const std::vector<cpu_set_t>& masks) {
    std::atomic<int> done{0};
#pragma omp parallel num_threads(n)
    {
        const int t = omp_get_thread_num();
        if (t > 0 && pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), &masks[t]) == 0) {
            ++done;
        }
    }
    return done.load();
}

bool env_off() {
    const char* opt = std::getenv("TIANYUAN_PIN_THREADS");
    if (!opt || std::strcmp(opt, "1") != 0) return true;
    for (const char* name : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"}) {
        if (std::getenv(name)) return true;
    }
    return false;
}
#endif

}  // namespace

int pin_workers() {
#if defined(__linux__)
    if (env_off() && pinned.load() == 0) return 0;  // the usual case: nothing to pin or free
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return pinned = 0;
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &mask)) cpus.push_back(c);
    }
    const int n = omp_get_max_threads();
    if (env_off() || n < 2 || n != static_cast<int>(cpus.size())) {
        // free the workers pinned before (to the whole mask), then pin nothing
        const int before = pinned.exchange(0);
        if (before > 0) set_worker_masks(before + 1, std::vector<cpu_set_t>(before + 1, mask));
        return 0;
    }
    // the caller's CPU last: the workers take the others in order
    const int here = sched_getcpu();
    const auto it = std::find(cpus.begin(), cpus.end(), here);
    if (it != cpus.end()) std::rotate(it, it + 1, cpus.end());
    std::vector<cpu_set_t> masks(static_cast<size_t>(n));
    for (int t = 1; t < n; ++t) {
        CPU_ZERO(&masks[t]);
        CPU_SET(cpus[t - 1], &masks[t]);
    }
    return pinned = set_worker_masks(n, masks);
#else
    return 0;
#endif
}

int pinned_workers() { return pinned.load(); }

bool forked_child() { return forked.load(); }

double region_cost_us(int reps, double pause_us) {
    using clock = std::chrono::steady_clock;
    const auto us = [](clock::duration d) {
        return std::chrono::duration<double, std::micro>(d).count();
    };
    std::vector<double> cost;
    cost.reserve(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i) {
        const auto idle = clock::now();
        while (us(clock::now() - idle) < pause_us) {
        }
        const auto start = clock::now();
#pragma omp parallel
        {
            asm volatile("" ::: "memory");  // an empty body, kept (no shared line to contend)
        }
        cost.push_back(us(clock::now() - start));
    }
    std::nth_element(cost.begin(), cost.begin() + reps / 2, cost.end());
    return cost[static_cast<size_t>(reps / 2)];
}

}  // namespace tianyuan
