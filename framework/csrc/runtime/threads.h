// The OpenMP workers: pinned one to a CPU where asked; one thread in a forked child; what a
// parallel region costs.
#pragma once

namespace tianyuan {

// Where TIANYUAN_PIN_THREADS=1: pins the OpenMP workers (threads 1 .. n-1 of a team of n =
// omp_get_max_threads()) one to a CPU of the calling thread's affinity mask, every CPU but the one
// the caller runs on. The caller (the Python thread) stays free, so the processes it forks and the
// threads it starts keep the whole mask (OMP_PROC_BIND binds it too). Unpinned, a worker woken
// after it slept was at times placed on the caller's CPU, and the two spun there while another CPU
// idled until the scheduler moved one (on a 2-vCPU VM a batch-1 forward's tail latency grew
// several-fold). Not the default: on 16 vCPUs a training step is slower pinned (pinned workers
// cannot leave CPUs that other threads, numpy's OpenBLAS among them, also want); bench/RESULTS.md,
// threads, memory and the process. Pins nothing (and frees workers it pinned before) where the
// variable is not 1, where n < 2, where n differs from the mask's size (with fewer threads than
// CPUs, processes whose workers were all pinned to the same first CPUs would crowd them), or where
// OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY is set (OpenMP places its threads as told). Linux
// only. Returns the number of workers pinned.
int pin_workers();
// What the last pin_workers returned.
int pinned_workers();

// Whether this process was forked from one that had loaded the library. libgomp's thread pool
// does not survive fork: a child's first parallel region with more than one thread waited
// for the parent's workers forever (DataLoader workers whose dataset ran a parallel kernel
// after the parent had). A forked child therefore runs on one thread (set at the fork), and
// set_num_threads(n > 1) there is refused rather than left to hang.
bool forked_child();

// The fork and join of an empty parallel region on the current team, median microseconds
// over `reps`, each region entered `pause_us` after the last ended (the caller spinning
// meanwhile, as Python runs between two layers; the workers spin or sleep as OpenMP's wait
// policy has them). Small int8 layers pay it once a call or more: on a many-core host it,
// not the tiles, can set their floor (bench_int8_threads prints it per thread count).
double region_cost_us(int reps, double pause_us);

}  // namespace tianyuan
