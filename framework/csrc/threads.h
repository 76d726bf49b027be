// Where the OpenMP workers run: each pinned to a CPU of its own.
#pragma once

namespace tianyuan {

// Pins the OpenMP workers (threads 1 .. n-1 of a team of n = omp_get_max_threads()) one to a
// CPU of the calling thread's affinity mask, every CPU but the one the caller runs on. The
// caller (the Python thread) stays free, so the processes it forks and the threads it starts
// keep the whole mask. Unpinned, a worker woken after it slept was at times placed on the
// caller's CPU, and the two spun on one CPU while another idled until the scheduler moved
// one of them: on the 2-core VMs, small int8 layers ran 1.6x slower for whole phases, and a
// forward pass after 20 ms idle took over 12 ms at p90 instead of 1.7 (bench/RESULTS.md).
// Pins nothing (and frees workers it pinned before) where n < 2, where n differs from the
// mask's size (with fewer threads than CPUs, processes whose workers were all pinned to the
// same first CPUs would crowd them), where OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY
// is set (OpenMP places its threads as told), or where TIANYUAN_PIN_THREADS=0. Linux only.
// Returns the number of workers pinned.
int pin_workers();
// What the last pin_workers returned.
int pinned_workers();

}  // namespace tianyuan
