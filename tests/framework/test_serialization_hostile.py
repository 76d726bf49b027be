"""tianyuan.load and the restricted unpickler given hostile files (issue 58): headers whose
fields have the wrong types or nest without end, pickles that nest, codecs other than latin1,
numpy dtype states that crashed numpy; each ends in one line naming the file."""
import json
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest

import tianyuan as ty
from tests.framework.test_serialization import assert_same, header_length, saved_bytes
from tianyuan.io import (BYTES_GLOBALS, NUMPY_GLOBALS, SerializationError, UnpicklingError,
                         UnpicklingRefused, safe_unpickle)
from tianyuan.io import serialization


# ---------------------------------------------------------------- hostile headers

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


# ---------------------------------------------------------------- hostile pickles

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
