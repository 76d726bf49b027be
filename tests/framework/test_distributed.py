"""tianyuan.distributed: one process is a world of one; under mpiexec, processes that each
take a share of a batch and average their gradients take the step one process takes on the
whole batch, and stay equal."""
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import mpi_run

import tianyuan as ty
from tianyuan import distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))


def test_one_process_is_a_world_of_one():
    assert not dist.launched_by_mpi()
    assert (dist.rank(), dist.world_size(), dist.is_main()) == (0, 1, True)
    p = ty.tensor(np.ones(3, np.float32), requires_grad=True)
    p.grad = ty.tensor(np.arange(3, dtype=np.float32))
    assert dist.average_gradients([p], [2.5, 1]) == [2.5, 1.0]
    np.testing.assert_array_equal(p.grad.numpy(), [0, 1, 2])
    a = np.arange(4.0)
    assert dist.all_reduce(a) is a and a.tolist() == [0, 1, 2, 3]


def test_an_mpi_launch_without_mpi4py_says_what_to_install(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setitem(sys.modules, "mpi4py", None)   # import fails
    monkeypatch.setattr(dist, "_state", {"comm": None, "checked": False})
    with pytest.raises(ImportError, match=r"OMPI_COMM_WORLD_SIZE set.*tianyuan\[dist\]"):
        dist.rank()


@pytest.mark.parametrize("net", ["plain", "syncbn"])
def test_two_processes_take_the_step_of_one_on_the_joined_batch(tmp_path, net):
    """syncbn: SyncBatchNorm2d's statistics, running statistics and gradients are those of
    the whole batch (in one process it is BatchNorm2d)."""
    one, two = tmp_path / "one.npz", tmp_path / "two.npz"
    script = os.path.join(HERE, "dp_script.py")
    subprocess.run([sys.executable, script, str(one), net], check=True, timeout=120,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    mpi_run(2, [script, str(two), net])
    a, b = np.load(one), np.load(two)
    assert int(a["world"]) == 1 and int(b["world"]) == 2
    assert float(b["gap"][0]) == 0.0          # both processes hold the same weights
    assert b["loss"] == pytest.approx(float(a["loss"]), rel=1e-5)
    for name in a.files:
        if name not in ("world", "loss", "gap"):
            np.testing.assert_allclose(b[name], a[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert ("1.running_var" in a.files) == (net == "syncbn")


def test_an_error_in_one_process_ends_them_all(tmp_path):
    # without the abort, process 1 waited in its allreduce for ever (the run hung)
    script = tmp_path / "fail.py"
    script.write_text("import numpy as np\n"
                      "from tianyuan import distributed as dist\n"
                      "a = np.ones(3)\n"
                      "dist.all_reduce(a)\n"
                      "if dist.rank() == 0:\n"
                      "    raise RuntimeError('process 0 fails alone')\n"
                      "dist.all_reduce(a)\n")
    run = mpi_run(2, [str(script)], timeout=60, ok=False)
    assert run.returncode != 0
    assert "RuntimeError: process 0 fails alone" in run.stderr


def test_threads_per_process_share_the_cores_the_launcher_allows(monkeypatch):
    monkeypatch.setattr(dist.os, "cpu_count", lambda: 16)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    monkeypatch.setattr(dist.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert dist.threads_per_process() == 8
    monkeypatch.setattr(dist.os, "sched_getaffinity", lambda pid: {3})  # bound to one core
    with pytest.warns(RuntimeWarning, match="--bind-to none"):
        assert dist.threads_per_process() == 1
