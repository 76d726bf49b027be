import os
import signal
import time

import numpy as np
import pytest

from helpers import bounded_run
from tianyuan.datasets import DataLoader, ShapesDataset, get_worker_info
from tianyuan.datasets import transforms as T


def shm_segments():
    """This process's loaders' shared-memory segments (named ty<pid % 100000><uuid>_<i>:
    another process's loaders, say a second test run on the machine, are not this test's)."""
    mine = f"ty{os.getpid() % 100000}"
    return {n for n in os.listdir("/dev/shm") if n.startswith(mine)} \
        if os.path.isdir("/dev/shm") else set()


@pytest.fixture(autouse=True)
def no_leaked_segments():
    before = shm_segments()
    yield
    assert shm_segments() - before == set()


class Faulty:
    """Raises at `bad`, kills its own process at `kill`, sleeps at `slow`, None at `skip`."""

    def __init__(self, num=16, bad=None, kill=None, slow=None, skip=()):
        self.num, self.bad, self.kill, self.slow, self.skip = num, bad, kill, slow, skip

    def __len__(self):
        return self.num

    def __getitem__(self, index):
        if index == self.bad:
            raise ValueError(f"broken sample {index}")
        if index == self.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        if index == self.slow:
            time.sleep(3)
        if index in self.skip:
            return None
        info = get_worker_info()
        return {"x": np.full((2, 3), index, np.float32), "label": index,
                "worker": -1 if info is None else info.id, "pid": os.getpid()}


def shapes_loader(num_workers, **kwargs):
    transform = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(),
                           T.ColorJitter(0.3, 0.3, 0.3), T.Normalize(), T.ToCHW()])
    ds = ShapesDataset(20, transform=transform)
    return DataLoader(ds, batch_size=4, shuffle=True, num_workers=num_workers, seed=7, **kwargs)


def epochs(loader, count=2):
    return [[(b["image"], b["label"]) for b in loader] for _ in range(count)]


def test_same_batches_with_0_and_2_workers():
    main, workers = epochs(shapes_loader(0)), epochs(shapes_loader(2, prefetch=1))
    assert len(main[0]) == 5
    for epoch_main, epoch_workers in zip(main, workers):
        for (image_a, label_a), (image_b, label_b) in zip(epoch_main, epoch_workers):
            assert image_a.shape == (4, 3, 24, 24) and image_a.dtype == np.float32
            np.testing.assert_array_equal(image_a, image_b)
            np.testing.assert_array_equal(label_a, label_b)
    assert not np.array_equal(main[0][0][1], main[1][0][1])   # a new order each epoch


def test_worker_exception_names_the_index_and_keeps_the_traceback():
    loader = DataLoader(Faulty(bad=9), batch_size=4, num_workers=2)
    with pytest.raises(ValueError, match="dataset index 9") as caught:
        list(loader)
    assert "broken sample 9" in str(caught.value) and "in __getitem__" in str(caught.value)
    assert caught.value.dataset_index == 9
    with pytest.raises(ValueError, match="broken sample 9") as direct:
        list(DataLoader(Faulty(bad=9), batch_size=4))
    assert direct.value.dataset_index == 9


def test_killed_worker_raises_instead_of_hanging():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker \d \(pid \d+\) was killed by SIGKILL"):
        list(DataLoader(Faulty(kill=6), batch_size=2, num_workers=2))
    assert time.monotonic() - start < 10


def test_timeout():
    loader = DataLoader(Faulty(slow=1), batch_size=2, num_workers=1, timeout=0.5)
    with pytest.raises(TimeoutError, match=r"dataset indices \[0, 1\]"):
        list(loader)


STOPPED_WORKER = """
import os, signal, time
from tianyuan.datasets import DataLoader, get_worker_info

class Items:
    def __len__(self):
        return 40

    def __getitem__(self, index):
        if get_worker_info().id == 1 and index >= 6:
            os.kill(os.getpid(), signal.SIGSTOP)
        return {"x": index}

try:
    list(DataLoader(Items(), batch_size=2, num_workers=2, timeout=1))
except TimeoutError as error:
    print(error)
"""


def test_timeout_on_a_stopped_worker_then_the_process_exits():
    # terminate() does not end a stopped process, and multiprocessing's exit handler joins
    # its children with no timeout: the process used to wait for ever after the error
    run, _ = bounded_run(["-c", STOPPED_WORKER], timeout=30)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "(timeout=1.0); waiting for batch 3 (dataset indices [6, 7]) on worker 1" in run.stdout


COLLECTED_LOADER = """
import gc, signal
from tianyuan.datasets import DataLoader

class Items:
    def __len__(self):
        return 16

    def __getitem__(self, index):
        return {"x": index}

# the workers start under a handler that does not end the process (the trainer's "stop
# after this step"); a cycle leaves the loader to the cyclic GC (as a Trainer's hooks do)
signal.signal(signal.SIGTERM, lambda *_: print("worker ignored SIGTERM", flush=True))
loader = DataLoader(Items(), batch_size=2, num_workers=2, persistent_workers=True)
next(iter(loader))
signal.signal(signal.SIGTERM, signal.SIG_DFL)
loader.cycle = loader
del loader
gc.collect()
print("collected", flush=True)
"""


def test_a_collected_loader_stops_workers_that_inherited_a_handler():
    # the queues' finalizers stop their feeder threads before the loader's __del__, so the
    # stop message was never sent; terminate() ran the inherited handler; exit hung
    run, _ = bounded_run(["-c", COLLECTED_LOADER], timeout=30)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout == "collected\n"


def test_persistent_workers_and_abandoned_epoch():
    loader = DataLoader(Faulty(), batch_size=4, num_workers=2, persistent_workers=True)
    first = next(iter(loader))            # abandon the epoch after one batch
    assert first["x"].shape == (4, 2, 3) and first["label"].tolist() == [0, 1, 2, 3]
    pids = set()
    for _ in range(2):
        batches = list(loader)
        assert [b["label"][0] for b in batches] == [0, 4, 8, 12]
        assert [int(b["worker"][0]) for b in batches] == [0, 1, 0, 1]
        pids.update(int(p) for b in batches for p in b["pid"])
    assert len(pids) == 2 and os.getpid() not in pids
    loader.close()


def test_skipped_items_are_dropped_and_reported_once():
    loader = DataLoader(Faulty(num=8, skip=(1, 2, 3)), batch_size=4, num_workers=2)
    with pytest.warns(RuntimeWarning, match="3 items were skipped"):
        batches = list(loader)
    assert [b["label"].tolist() for b in batches] == [[0], [4, 5, 6, 7]]
    assert loader.num_skipped == 3


def test_worker_init_fn_and_seeds():
    seen = []

    def init(worker_id):
        info = get_worker_info()
        assert info.id == worker_id and info.seed == 100 + worker_id
        os.environ["TY_TEST_WORKER"] = str(worker_id)

    loader = DataLoader(Faulty(num=4), batch_size=2, num_workers=2, seed=100,
                        worker_init_fn=init)
    seen = [int(b["worker"][0]) for b in loader]
    assert seen == [0, 1]


def test_init_failure_is_reported():
    def init(worker_id):
        raise KeyError("no such resource")

    with pytest.raises(KeyError, match="worker_init_fn"):
        list(DataLoader(Faulty(num=4), batch_size=2, num_workers=1, worker_init_fn=init))


def test_workers_start_right_after_opencv_parallel_work():
    # forked just after an OpenCV parallel call, a worker used to wait forever in
    # cv2.setNumThreads (inherited pool mutex); without the fix 9 of 10 rounds hang
    import cv2
    image = np.random.default_rng(0).integers(0, 255, (600, 600, 3), np.uint8)
    threads = cv2.getNumThreads()
    for _ in range(4):
        cv2.GaussianBlur(cv2.resize(image, (300, 300)), (5, 5), 1)
        batches = list(DataLoader(Faulty(num=4), batch_size=2, num_workers=1, timeout=10))
        assert [b["label"].tolist() for b in batches] == [[0, 1], [2, 3]]
    assert cv2.getNumThreads() == threads   # the parent's setting is restored


class NativeWork:
    """Items made by a parallel int8 kernel (a dataset whose transforms use tianyuan's ops)."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        from tianyuan.quantization import kernels as K
        x = np.full((4, 1 << 18), i / 10, np.float32)   # large enough to run threaded
        return {"value": K.quantize(x, 0.1, 0, np.uint8)[0, :2].astype(np.int64)}


def test_workers_run_parallel_kernels_after_the_parent_did():
    # libgomp's pool does not survive fork: a worker whose dataset ran a parallel kernel after
    # the parent had waited forever for the parent's OpenMP threads (framework/csrc/runtime/threads.h)
    from tianyuan.quantization import kernels as K
    K.quantize(np.zeros((4, 1 << 18), np.float32), 0.1, 0, np.uint8)
    batches = list(DataLoader(NativeWork(), batch_size=2, num_workers=2, timeout=20))
    assert [b["value"][:, 0].tolist() for b in batches] == [[0, 1], [2, 3]]


def test_empty_index_lists_keep_batch_numbers():
    # the trainer's exact resume hands the loader empty batches for the ones already done
    class SkipTwo:
        def __iter__(self):
            yield from ([], [], [4, 5], [6, 7])

        def __len__(self):
            return 4

    for workers in (0, 1, 2):
        loader = DataLoader(Faulty(num=8), batch_sampler=SkipTwo(), num_workers=workers,
                            timeout=10)
        assert [b["label"].tolist() for b in loader] == [[4, 5], [6, 7]], workers
