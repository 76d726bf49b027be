"""tianyuan.save / tianyuan.load: bit-exact round trips, atomic writes, refusing bad files."""
import errno
import json
import math
import os
import pickle
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import safetensors.numpy

import tianyuan as ty
from tianyuan.io import (BYTES_GLOBALS, NUMPY_GLOBALS, SerializationError, UnpicklingError,
                         UnpicklingRefused, safe_unpickle)
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

    class HalfWriter:  # writes half the bytes, then the disk "fails"
        def __init__(self, fd, mode):
            self.handle = real_fdopen(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            self.handle.write(data[:len(data) // 2])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(serialization.os, "fdopen", HalfWriter)
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


# ---------------------------------------------------------------- hostile headers (issue 58)

def with_header(header, body=b"\0" * 72):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def record(**fields):
    return {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], **fields}}


@pytest.mark.parametrize("header, says", [
    (record(data_offsets=[8, "72"]), r"'x' has data_offsets \[8, '72'\], not \[begin, end\]"),
    (record(data_offsets=[8, 0]), "0 <= begin <= end"),
    (record(data_offsets=[0, None]), "data_offsets"),
    (record(data_offsets=[0.0, 8.0]), "data_offsets"),
    (record(data_offsets=[True, 9]), "data_offsets"),
    (record(data_offsets=[0, 8, 16]), "data_offsets"),
    (record(data_offsets=[0, 2 ** 70]), "bytes for a F32 array of shape"),
    (record(shape=[-2]), r"shape \[-2\], not a list of sizes >= 0"),
    (record(shape=2), "not a list of sizes"),
    (record(shape=["2"]), "not a list of sizes"),
    (record(dtype="Q9"), "dtype 'Q9'; tianyuan.load reads BOOL"),
    (record(dtype=["F32"]), "dtype"),
    (record(shape=[3]), r"8 bytes for a F32 array of shape \[3\], which takes 12"),
    ({"x": "abc"}, "'x' is a JSON str, not a tensor record"),
    ({"__metadata__": [1], **record()}, "'__metadata__' is not an object of strings"),
    ({"__metadata__": {"tianyuan": 5}, **record()}, "'__metadata__' is not an object"),
    ([1, 2], "its header is a JSON list, not an object"),
    (b'{"x": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 8]}}', "shape"),
    (b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "RecursionError"),
    (b'{"x": 1' + b"0" * 5000 + b"}", "header is corrupt"),   # past int()'s digit limit
    (b"\xff\xfe{}", "header is corrupt"),
])
def test_hostile_header_is_one_line_naming_the_file(header, says, tmp_path):
    """Each field's type, range and agreement checked before safetensors reads the file
    (`[8, "72"]` was a TypeError, a 100,000-deep header a RecursionError)."""
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(with_header(header))
    with pytest.raises(SerializationError, match=says) as info:
        ty.load(path)
    assert f"load: '{path}'" in str(info.value) and "\n" not in str(info.value)


def test_deep_structure_record_with_a_right_checksum(tmp_path):
    """An attacker fixes the structure's CRC: the nesting is refused, not a RecursionError."""
    data = saved_bytes(tmp_path)
    header = json.loads(data[8:8 + header_length(data)])
    meta = header["__metadata__"]
    meta["tianyuan"] = "[" * 100_000 + "]" * 100_000
    meta["tianyuan.crc32.structure"] = serialization._text_crc(meta["tianyuan"])
    path = tmp_path / "deep.safetensors"
    path.write_bytes(with_header(header, data[8 + header_length(data):]))
    with pytest.raises(SerializationError, match=f"'{path}' has a corrupt structure record "
                                                 "\\(RecursionError"):
        ty.load(path)


# ---------------------------------------------------------------- hostile pickles (issue 58)

def memo_chain(depth):
    """A pickle of lists nested `depth` deep built with a stack of two: each new list is
    fetched from the memo and appended to the one before (LONG_BINGET, EMPTY_LIST,
    LONG_BINPUT, APPEND, POP), so the unpickler's stack never shows the depth."""
    steps = b"".join(b"j" + i.to_bytes(4, "little") + b"]r" + (i + 1).to_bytes(4, "little") +
                     b"a0" for i in range(depth))
    return b"\x80\x02]r\x00\x00\x00\x00" + steps + b"."


@pytest.mark.parametrize("data, says", [
    (b"", "nothing to read: an empty file"),
    (b"\x80", "not enough data"),
    (b".", "not a readable pickle"),
    (b"\x80\x02" + b"]" * 100_000 + b"a" * 99_999 + b".", "nested more than 100 deep"),
    (memo_chain(5000), "nested more than 100 deep"),
    (b"\x80\x02]q\x00h\x00a.", "a list that contains itself"),
])
def test_unreadable_pickle_is_a_value_error_naming_the_file(data, says, tmp_path):
    path = tmp_path / "w.pkl"
    path.write_bytes(data)
    with pytest.raises(UnpicklingError, match=says) as info:
        safe_unpickle(path, allowed={})
    assert isinstance(info.value, ValueError)   # commands report it as a bad file, status 2
    assert str(info.value).startswith(f"{path}: not a readable pickle")


def test_shared_containers_are_not_nesting():
    """A list used twice at each of 60 levels (2**60 paths) is checked once per list, and a
    chain 100 deep (what the limit admits) loads."""
    node = []
    for _ in range(60):
        node = [node, node]
    loaded = safe_unpickle(pickle.dumps(node, protocol=2), allowed={})
    assert loaded[0] is loaded[1]
    assert len(safe_unpickle(memo_chain(99), allowed={})) == 1


def test_codecs_encode_admits_latin1_only_and_names_the_file(tmp_path):
    """`_codecs.encode(x, "os.system")` was a LookupError where the real function was
    allowed; the stand-in refuses every codec but latin1, naming the file."""
    path = tmp_path / "w.pkl"
    path.write_bytes(b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00xX\x09\x00\x00\x00"
                     b"os.system\x86R.")
    with pytest.raises(UnpicklingRefused, match=f"^{path}: refusing _codecs.encode\\(str, "
                                                "'os.system'"):
        safe_unpickle(path, allowed=BYTES_GLOBALS)
    assert isinstance(UnpicklingRefused("x"), ValueError)
    latin1 = pickle.dumps(b"\x00\xff", protocol=2)   # how Python 3 writes bytes in protocol 2
    assert b"_codecs" in latin1 and safe_unpickle(latin1, allowed=BYTES_GLOBALS) == b"\x00\xff"


def test_numpy_dtype_state_that_crashed_numpy_is_refused(tmp_path):
    """Found by tests/test_fuzz_files.py: one byte of a MegEngine file changed a dtype's
    state to 6 items, on which numpy's dtype.__setstate__ crashes the process (SIGSEGV).
    BUILD on a dtype now admits only the state numpy writes (in a subprocess: a crash must
    not take the test run with it)."""
    good = pickle.dumps(np.arange(3, dtype=np.float32), protocol=2)
    three_nones = b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t"   # (..., None x 3, -1, -1, 0)
    assert three_nones in good
    path = tmp_path / "dtype.pkl"
    path.write_bytes(good.replace(three_nones, three_nones[2:]))
    code = ("from tianyuan.io import BYTES_GLOBALS, NUMPY_GLOBALS, safe_unpickle\n"
            f"safe_unpickle({str(path)!r}, allowed={{**NUMPY_GLOBALS, **BYTES_GLOBALS}})")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1, run.stderr
    assert (f"UnpicklingError: {path}: not a readable pickle (numpy dtype float32 with the "
            "state (3, '<', None, -1, -1, 0), not one numpy writes)") in run.stderr


@pytest.mark.parametrize("array", [np.zeros(2, object), np.zeros(2, [("a", "f4")])])
def test_object_and_structured_arrays_are_refused(array):
    with pytest.raises(UnpicklingError, match="a data file holds only numbers, bools"):
        safe_unpickle(pickle.dumps(array, protocol=2), allowed={**NUMPY_GLOBALS, **BYTES_GLOBALS})


def test_plain_arrays_of_every_kind_load():
    arrays = {"be": np.dtype(">f4"), "s": np.array([b"ab"]), "u": np.array(["x"]),
              "c": np.ones(2, np.complex64), "b": np.array([True]), "h": np.float16(1.5),
              "meta": np.zeros(2, np.dtype("i1", metadata={"mgb_dtype": {"scale": 0.5}}))}
    for protocol in (2, 4):
        loaded = safe_unpickle(pickle.dumps(arrays, protocol=protocol),
                               allowed={**NUMPY_GLOBALS, **BYTES_GLOBALS})
        assert loaded.pop("be") == arrays["be"]
        assert_same({k: v for k, v in arrays.items() if k != "be"}, loaded)
        assert loaded["meta"].dtype.metadata == {"mgb_dtype": {"scale": 0.5}}
