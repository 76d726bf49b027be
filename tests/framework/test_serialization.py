"""tianyuan.save / tianyuan.load: bit-exact round trips, atomic writes, refusing bad files."""
import errno
import math
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest
import safetensors.numpy

from helpers import DiskFull

import tianyuan as ty
from tianyuan.io import SerializationError, UnpicklingRefused, safe_unpickle
from tianyuan.io import serialization

DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
          "uint32", "int64", "uint64", "bool"]


def arrays_of_every_dtype():
    rng = np.random.default_rng(0)
    out = {}
    for name in DTYPES:
        # random bit patterns: NaN payloads, -0.0, subnormals and extremes for the floats
        raw = rng.integers(0, 256, size=24, dtype=np.uint8)
        out[name] = (raw % 2).astype(bool) if name == "bool" else raw.view(name).reshape(-1, 3)
    out["zero_d"] = np.array(-0.0, np.float16)
    out["empty"] = np.zeros((0, 3), np.float32)
    out["empty_int8"] = np.zeros((2, 0), np.int8)
    out["transposed"] = np.arange(6, dtype=np.int32).reshape(2, 3).T
    return out


def checkpoint():
    rng = np.random.default_rng(1)
    p = ty.tensor(rng.standard_normal((2, 3)), dtype="float32", requires_grad=True)
    opt = ty.optim.Adam([p], lr=0.01, betas=(0.8, 0.9))
    p.grad = ty.ones(2, 3)
    opt.step()
    ty.manual_seed(7)
    return {
        "model": {"layer1.0.conv.weight": p, **arrays_of_every_dtype()},
        "optimizer": opt.state_dict(),  # int keys and tuples (betas)
        "epoch": 3, "lr": 0.1, "name": "resnet18", "done": False, "best": None,
        "history": [1, 2.5, "x", None, np.ones(2, np.uint8), (True, -7)],
        "non_finite": [math.nan, math.inf, -math.inf],
        "np_scalars": [np.float32(1.5), np.int64(-3), np.bool_(True)],
        "rng": ty.get_rng_state(),  # 128-bit ints
        "a.b": np.zeros(1), "a": {"b": np.ones(1)},  # both want the tensor name "a.b"
        "": {"": np.full(2, 5.0)},
        "unicode": {"名字": np.int8(1)},
    }


def assert_same(a, b, where="root"):
    if isinstance(a, ty.Tensor):
        a = a.data
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert type(key) is type(next(k for k in b if k == key)), where
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}.{i}")
    elif isinstance(a, (np.ndarray, np.generic)):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), where
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, where


def test_nested_checkpoint_round_trip_is_bit_exact(tmp_path):
    ckpt = checkpoint()
    ty.save(ckpt, tmp_path / "ckpt.safetensors")
    loaded = ty.load(str(tmp_path / "ckpt.safetensors"))
    assert_same(ckpt, loaded)
    assert all(a.flags.writeable for a in loaded["model"].values())
    ty.set_rng_state(loaded["rng"])  # the rng state is usable as loaded
    assert ty.randn(3).numpy().tolist() == (ty.manual_seed(7), ty.randn(3))[1].numpy().tolist()


def test_flat_state_dict_is_plain_safetensors(tmp_path):
    sd = {"conv1.weight": np.ones((2, 1, 3, 3), np.float32), "bn1.num_batches_tracked": np.array(3)}
    ty.save(sd, tmp_path / "w.safetensors")
    plain = safetensors.numpy.load_file(str(tmp_path / "w.safetensors"))
    assert sorted(plain) == sorted(sd)
    assert_same(sd, ty.load(tmp_path / "w.safetensors"))


def test_foreign_safetensors_file_loads_flat(tmp_path):
    arrays = {"a": np.arange(3, dtype=np.float16), "b.c": np.zeros((1, 2), bool)}
    safetensors.numpy.save_file(arrays, str(tmp_path / "f.safetensors"), metadata={"format": "pt"})
    assert_same(arrays, dict(sorted(ty.load(tmp_path / "f.safetensors").items())))


def test_header_length_that_looks_like_a_pickle_opcode(tmp_path):
    # a header of 0x380 bytes starts with b"\x80\x03", the PROTO opcode of pickle protocol 3
    for pad in range(0, 1000):
        payload = safetensors.numpy.save({"x": np.ones(1)}, metadata={"pad": "p" * pad})
        if payload[:2] == b"\x80\x03":
            break
    (tmp_path / "w.safetensors").write_bytes(payload)
    np.testing.assert_array_equal(ty.load(tmp_path / "w.safetensors")["x"], [1.0])


def test_big_endian_arrays_keep_their_values(tmp_path):
    ty.save({"x": np.arange(4, dtype=">f4")}, tmp_path / "x.safetensors")
    np.testing.assert_array_equal(ty.load(tmp_path / "x.safetensors")["x"], np.arange(4))


@pytest.mark.parametrize("obj, match", [
    ({"m": {"w": object()}}, "object at 'm.w'"),
    ({"c": np.zeros(2, complex)}, "dtype complex128"),
    ({(1, 2): np.zeros(1)}, "key \\(1, 2\\)"),
    ({"s": {1, 2}}, "set at 's'"),
])
def test_unsupported_values_name_the_path(obj, match, tmp_path):
    with pytest.raises(SerializationError, match=match):
        ty.save(obj, tmp_path / "x.safetensors")
    assert not os.listdir(tmp_path)


# ---------------------------------------------------------------- atomic write

def test_failed_write_leaves_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    ty.save({"epoch": 1, "w": np.zeros(1000)}, path)
    real_fdopen = os.fdopen
    monkeypatch.setattr(serialization.os, "fdopen",
                        lambda fd, mode: DiskFull(real_fdopen(fd, mode)))
    with pytest.raises(OSError, match="No space") as info:
        ty.save({"epoch": 2, "w": np.ones(1000)}, path)
    monkeypatch.undo()
    assert ty.load(path)["epoch"] == 1
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]  # no temp file left behind
    # one line naming the path (not the temp file), a user error for the commands
    assert isinstance(info.value, SerializationError) and info.value.errno == errno.ENOSPC
    assert f"save: cannot write '{path}'" in str(info.value) and "\n" not in str(info.value)
    assert "the file there is unchanged" in str(info.value) and ".tmp" not in str(info.value)


@pytest.mark.parametrize("fails", ["fsync", "replace"])
def test_failure_before_rename_leaves_old_file(fails, tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    ty.save({"epoch": 1}, path)

    def boom(*args):
        raise OSError(5, f"{fails} failed")

    monkeypatch.setattr(serialization.os, fails, boom)
    with pytest.raises(OSError, match=fails):
        ty.save({"epoch": 2}, path)
    monkeypatch.undo()
    assert ty.load(path) == {"epoch": 1}
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_written_file_has_normal_permissions(tmp_path):
    ty.save({"x": np.ones(1)}, tmp_path / "x.safetensors")
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "x.safetensors").st_mode & 0o777 == 0o666 & ~umask


# ---------------------------------------------------------------- bad files

def saved_bytes(tmp_path):
    ty.save({"w": np.arange(64, dtype=np.float32), "step": 3}, tmp_path / "good.safetensors")
    return (tmp_path / "good.safetensors").read_bytes()


def header_length(data):
    return struct.unpack("<Q", data[:8])[0]


@pytest.mark.parametrize("damage, match", [
    (lambda d: d[:-10], "truncated"),
    (lambda d: d[:20], "truncated"),
    (lambda d: b"", "truncated.*0 bytes"),
    (lambda d: d[:8] + b"[" + d[9:], "header is corrupt"),
    (lambda d: d[:-1] + bytes([d[-1] ^ 0x10]), "corrupt.*checksum"),
    (lambda d: d.replace(b'3]]}', b'4]]}', 1), "structure record does not match the checksum"),
    (lambda d: d[:8 + header_length(d)] + d[8 + header_length(d):][::-1], "corrupt"),
    (lambda d: b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "not safetensors"),
    (lambda d: b"hello world, this is text\n" * 3, "truncated or not safetensors"),
])
def test_damaged_files_raise_naming_the_path(damage, match, tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(damage(saved_bytes(tmp_path)))
    with pytest.raises(SerializationError, match=match) as info:
        ty.load(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        ty.load(tmp_path / "missing.safetensors")


class RunsCode:
    """Unpickling this would create `marker`: the classic code-running pickle."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_pickle_is_refused_never_run(protocol, tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "weights.safetensors"  # even under our suffix
    path.write_bytes(pickle.dumps({"w": RunsCode(marker)}, protocol=protocol))
    with pytest.raises(SerializationError, match="is a pickle.*tianyuan.weights") as info:
        ty.load(path)
    assert str(path) in str(info.value)
    with pytest.raises(UnpicklingRefused, match="system"):
        safe_unpickle(path, allowed={})
    assert not marker.exists()


@pytest.mark.parametrize("data", [
    b"\x80\x02K\x01r\xff\xff\xff\x7f.",   # LONG_BINPUT 2**31 - 1: a memo of gigabytes
    b"\x80\x02K\x01q\xc8.",                  # BINPUT 200 after 2 opcodes
])
def test_unpickle_refuses_memo_indices_beyond_the_pickle(data):
    with pytest.raises(pickle.UnpicklingError, match="not a readable pickle.*memo index"):
        safe_unpickle(data, allowed={})
    assert safe_unpickle(pickle.dumps([[1], [2]], protocol=2), allowed={}) == [[1], [2]]


def test_torch_zip_archive_is_refused(tmp_path):
    path = tmp_path / "resnet18.pth"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"a": 1}))
    with pytest.raises(SerializationError, match="zip archive.*converters"):
        ty.load(path)
