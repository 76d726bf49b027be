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


def test_protocol_2_batches_written_by_python_3(tmp_path):
    """Python 3 pickles bytes at protocol 2 as _codecs.encode(text, "latin1"): allowed, and
    only with latin1."""
    folder = tmp_path / "cifar-10-batches-py"
    written = write_cifar(str(folder), count=2)
    images, labels = written["test_batch"]
    batch = {b"data": images.transpose(0, 3, 1, 2).reshape(2, -1), b"labels": list(labels),
             b"batch_label": b"testing batch 1 of 1"}
    blob = pickle.dumps(batch, protocol=2)
    assert b"_codecs" in blob
    (folder / "test_batch").write_bytes(blob)
    test = CIFAR10(tmp_path, train=False)
    assert np.array_equal(test.images, images) and test.targets == list(labels)


@pytest.mark.parametrize("codec", [b"os.system", b"rot13", b"utf-8"])
def test_codecs_encode_takes_latin1_alone(tmp_path, codec):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(str(folder), count=1)
    # protocol 2: GLOBAL _codecs.encode, ("x", codec), REDUCE
    blob = (b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00xX" + bytes([len(codec), 0, 0, 0]) +
            codec + b"\x86R.")
    (folder / "test_batch").write_bytes(blob)
    with pytest.raises(UnpicklingRefused, match="only latin1 rebuilds bytes"):
        CIFAR10(tmp_path, train=False)
