import os
import pickle

import numpy as np
import pytest

from ds_fakes import tar_folder, write_cifar
from tianyuan.datasets import CIFAR10
from tianyuan.io import UnpicklingRefused


def test_python_batches(tmp_path):
    written = write_cifar(str(tmp_path / "cifar-10-batches-py"), count=3)
    train, test = CIFAR10(tmp_path, train=True), CIFAR10(tmp_path, train=False)
    assert len(train) == 15 and len(test) == 3
    images, labels = written["data_batch_2"]
    item = train[3]   # first image of batch 2
    assert item["image"].shape == (32, 32, 3) and item["image"].dtype == np.uint8
    assert np.array_equal(item["image"], images[0]) and item["label"] == labels[0]
    assert test.targets == list(written["test_batch"][1])


def test_tarball_read_in_memory(tmp_path):
    folder = tmp_path / "src" / "cifar-10-batches-py"
    written = write_cifar(str(folder), count=2)
    tar_folder(str(folder), str(tmp_path / "cifar-10-python.tar.gz"))
    test = CIFAR10(tmp_path, train=False)   # root holding only the tarball
    assert np.array_equal(test.images, written["test_batch"][0])
    assert not os.path.exists(tmp_path / "cifar-10-batches-py")
    direct = CIFAR10(tmp_path / "cifar-10-python.tar.gz", train=True)
    assert len(direct) == 10


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_malicious_pickle_is_refused(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(str(folder), count=1)
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(UnpicklingRefused, match="posix.system"):
        CIFAR10(tmp_path, train=False)


def test_missing_and_malformed(tmp_path):
    with pytest.raises(FileNotFoundError, match="found no CIFAR-10 data"):
        CIFAR10(tmp_path, train=True)
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(str(folder), count=1)
    os.remove(folder / "data_batch_4")
    with pytest.raises(FileNotFoundError, match="data_batch_4"):
        CIFAR10(tmp_path, train=True)
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((1, 5), np.uint8),
                                                      b"labels": [0]}))
    with pytest.raises(ValueError, match=r"expected \(N, 3072\)"):
        CIFAR10(tmp_path, train=False)
