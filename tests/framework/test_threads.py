"""TIANYUAN_PIN_THREADS=1 pins the OpenMP workers one to a CPU, the calling thread left free
(framework/csrc/runtime/threads.h): checked in child processes, whose environment each test sets."""
import json
import os
import subprocess
import sys

import pytest

PROBE = r"""
import json, os
import tianyuan as ty

def masks():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        for line in open(f"/proc/self/task/{tid}/status"):
            if line.startswith("Cpus_allowed_list"):
                out[int(tid)] = line.split()[1]
    return out

def state():
    m = masks()
    single = sorted(v for t, v in m.items() if t != os.getpid() and v.isdigit())
    return {"pinned": ty._C.pinned_workers(), "main": m[os.getpid()], "single": single}

first = state()
ty.set_num_threads(1)
one = state()
ty.set_num_threads(len(os.sched_getaffinity(0)))
again = state()
child = os.fork()
if child == 0:  # a forked process (a DataLoader worker) keeps the whole mask
    os._exit(0 if len(os.sched_getaffinity(0)) == len(os.sched_getaffinity(os.getppid())) else 1)
_, status = os.waitpid(child, 0)
print(json.dumps({"first": first, "one": one, "again": again, "fork_ok": status == 0}))
"""

CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
linux_multicore = pytest.mark.skipif(
    not sys.platform.startswith("linux") or CPUS < 2,
    reason="pins on Linux, where the process may run on 2 CPUs or more")
OMP_VARS = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "OMP_NUM_THREADS",
            "TIANYUAN_PIN_THREADS")


def probe(**env):
    base = {k: v for k, v in os.environ.items() if k not in OMP_VARS}
    out = subprocess.run([sys.executable, "-c", PROBE], env=dict(base, **env),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@linux_multicore
def test_workers_pinned_one_to_a_cpu_and_the_caller_free():
    r = probe(TIANYUAN_PIN_THREADS="1")
    full = r["first"]["main"]
    for key in ("first", "again"):
        s = r[key]
        assert s["pinned"] == CPUS - 1, s
        assert len(s["single"]) == CPUS - 1 and len(set(s["single"])) == CPUS - 1, s
        assert s["main"] == full, s
    # one thread: the workers freed again
    assert r["one"]["pinned"] == 0 and r["one"]["single"] == [], r["one"]
    assert r["fork_ok"]


@linux_multicore
@pytest.mark.parametrize("env", [{}, {"TIANYUAN_PIN_THREADS": "0"},
                                 {"TIANYUAN_PIN_THREADS": "1", "OMP_PROC_BIND": "false"},
                                 {"TIANYUAN_PIN_THREADS": "1", "OMP_NUM_THREADS": "1"}])
def test_no_pinning_by_default_when_bound_by_openmp_or_fewer_threads_than_cpus(env):
    r = probe(**env)
    assert r["first"]["pinned"] == 0 and r["first"]["single"] == [], r["first"]


FORK_PROBE = r"""
import os, numpy as np
import tianyuan as ty
from tianyuan.quantization import kernels as K
threads = ty.get_num_threads()
x = np.zeros((4, 1 << 20), np.float32)
K.quantize(x, 0.1, 0, np.uint8)   # the parent's OpenMP threads start
pid = os.fork()
if pid == 0:
    K.quantize(x, 0.1, 0, np.uint8)   # hung here before: libgomp's pool stays with the parent
    try:
        ty.set_num_threads(2)
        os._exit(3)
    except RuntimeError:
        os._exit(0 if ty.get_num_threads() == 1 else 4)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), ty.get_num_threads() == threads)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_on_one_thread_and_refuses_more():
    out = subprocess.run([sys.executable, "-c", FORK_PROBE], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out[0] == "0", f"child exit code {out[0]} (3: more threads allowed, 4: not 1)"
    assert out[1] == "True", "the parent's thread count changed"


def test_region_cost_is_a_positive_time_and_checks_its_arguments():
    import tianyuan._C as C
    assert 0 < C.testing.region_cost_us(50) < 1e5
    assert 0 < C.testing.region_cost_us(5, 20.0) < 1e5
    with pytest.raises(ValueError, match="reps >= 1"):
        C.testing.region_cost_us(0)
    with pytest.raises(ValueError, match="pause_us >= 0"):
        C.testing.region_cost_us(1, -1.0)
