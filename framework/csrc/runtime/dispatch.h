// One place to choose a kernel family's ISA: a table of kernel pointers, filled from
// current_isa() on first use and again after every set_isa (XNNPACK's *-config.c and ATen's
// DispatchStub are the models). A family declares its table struct and one fill function:
//
//     struct RoiAlignKernels { void (*forward)(...); void (*backward)(...); };
//     void fill_roi_align(RoiAlignKernels& k, Isa isa);   // the only ISA ladder
//     static Dispatch<RoiAlignKernels> roi_align_kernels(fill_roi_align);
//     ...  roi_align_kernels()->forward(...);
//
// The fill function is the family's one `current_isa` decision; callers never branch on the
// ISA. A table is refilled when set_isa has moved the generation counter since its last fill
// (one relaxed atomic load per call), so no static-initialisation order is assumed.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "runtime/cpu.h"

namespace tianyuan {

// Incremented by set_isa (cpu.cpp); tables compare it with the value of their last fill.
std::atomic<uint64_t>& isa_generation();

template <class Table>
class Dispatch {
  public:
    using Fill = void (*)(Table&, Isa);
    explicit Dispatch(Fill fill) : fill_(fill) {}

    const Table& operator()() {
        const uint64_t now = isa_generation().load(std::memory_order_acquire);
        if (filled_.load(std::memory_order_acquire) != now + 1) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (filled_.load(std::memory_order_relaxed) != now + 1) {
                Table fresh{};
                fill_(fresh, current_isa());
                table_ = fresh;
                filled_.store(now + 1, std::memory_order_release);
            }
        }
        return table_;
    }

  private:
    Fill fill_;
    Table table_{};
    std::atomic<uint64_t> filled_{0};  // generation + 1 of the last fill; 0: never filled
    std::mutex mutex_;
};

}  // namespace tianyuan
