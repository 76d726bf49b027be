"""Torch-free readers: .pth (zip and legacy) and MegEngine .pkl, written by the tests."""
import pickle
from collections import OrderedDict

import numpy as np
import pytest

from pth_writer import FakeGlobal, Storage, Tensor, contiguous, with_global, write_legacy, \
    write_zip
from tianyuan.io import UnpicklingRefused
from tianyuan.weights import QTensor, TorchFormatError, load_megengine, load_pth

WRITERS = {"zip": write_zip, "legacy": write_legacy}


def _mixed_state():
    """Expected arrays and the Tensor records that write them (views share storages)."""
    rng = np.random.default_rng(0)
    base = rng.standard_normal(60).astype(np.float32)       # one storage, several views
    shared = Storage("0", base)
    half = rng.standard_normal((3, 4)).astype(np.float16)
    longs = np.arange(-5, 7, dtype=np.int64).reshape(3, 4)
    flags = np.array([True, False, True])
    bytes_ = np.arange(10, dtype=np.uint8)
    chars = np.arange(-4, 4, dtype=np.int8)
    bf16 = rng.standard_normal(6).astype(np.float32)
    bf16_bits = (bf16.view(np.uint32) >> 16).astype(np.uint16)
    state = OrderedDict([
        ("w", Tensor(shared, 0, (4, 5), (5, 1))),
        ("w_t", Tensor(shared, 0, (5, 4), (1, 5))),            # transposed view
        ("w_slice", Tensor(shared, 22, (3, 2), (10, 3))),      # offset + strides
        ("scalar", Tensor(shared, 59, (), ())),
        ("empty", Tensor(shared, 0, (0, 3), (3, 1))),
        ("half", contiguous("1", half)), ("half_t", Tensor(Storage("1", half), 1, (3, 2), (1, 4))),
        ("long", contiguous("2", longs)), ("bool", contiguous("3", flags)),
        ("u8", contiguous("4", bytes_)), ("i8", contiguous("5", chars)),
        ("bf16", contiguous("6", bf16_bits, kind="bfloat16")),
    ])
    expect = {
        "w": base[:20].reshape(4, 5), "w_t": base[:20].reshape(4, 5).T,
        "w_slice": np.lib.stride_tricks.as_strided(base[22:], (3, 2), (40, 12)),
        "scalar": np.float32(base[59]), "empty": np.zeros((0, 3), np.float32),
        "half": half,
        "half_t": np.lib.stride_tricks.as_strided(half.reshape(-1)[1:], (3, 2), (2, 8)),
        "long": longs, "bool": flags, "u8": bytes_, "i8": chars,
        "bf16": (bf16_bits.astype(np.uint32) << 16).view(np.float32),
    }
    return state, expect


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_pth_loads_right_arrays(tmp_path, fmt):
    state, expect = _mixed_state()
    path = tmp_path / f"m_{fmt}.pth"
    WRITERS[fmt](path, state)
    loaded = load_pth(path)
    assert isinstance(loaded, OrderedDict) and list(loaded) == list(expect)
    for name, want in expect.items():
        got = loaded[name]
        assert got.dtype == np.asarray(want).dtype, name
        assert got.shape == np.shape(want), name
        np.testing.assert_array_equal(got, want, err_msg=name)
        assert got.flags.c_contiguous and got.flags.writeable


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_pth_keeps_metadata_and_nesting(tmp_path, fmt):
    sd = OrderedDict(w=contiguous("0", np.ones((2, 2), np.float32)))
    sd._metadata = OrderedDict([("", {"version": 1}), ("w", {"version": 2})])
    path = tmp_path / "ckpt.pth"
    WRITERS[fmt](path, {"epoch": 3, "state_dict": sd, "best": 0.5})
    loaded = load_pth(path)
    assert loaded["epoch"] == 3 and loaded["best"] == 0.5
    assert loaded["state_dict"]._metadata["w"] == {"version": 2}
    np.testing.assert_array_equal(loaded["state_dict"]["w"], np.ones((2, 2)))


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_pth_quantized_tensors(tmp_path, fmt):
    q = np.array([[-3, 5], [7, -128]], np.int8)
    scales = contiguous("s", np.array([0.5, 0.25]))
    zps = contiguous("z", np.array([0, 1], np.int64))
    per_channel = (FakeGlobal("torch", "per_channel_affine"), scales, zps, 0)
    per_tensor = (FakeGlobal("torch", "per_tensor_affine"), 0.1, 3)
    state = OrderedDict([
        ("conv.weight", Tensor(Storage("0", q, "QInt8Storage"), 0, (2, 2), (2, 1), per_channel)),
        ("act", Tensor(Storage("1", q.view(np.uint8), "QUInt8Storage"), 0, (2, 2), (2, 1),
                       per_tensor)),
        ("fc._packed_params.dtype", FakeGlobal("torch", "qint8")),
    ])
    path = tmp_path / "q.pth"
    WRITERS[fmt](path, state)
    loaded = load_pth(path)
    w = loaded["conv.weight"]
    assert isinstance(w, QTensor) and w.axis == 0
    np.testing.assert_array_equal(w.values, q)
    expected = (q - np.array([[0], [1]])) * np.array([[0.5], [0.25]])
    np.testing.assert_allclose(w.dequantize(), expected)
    a = loaded["act"]
    assert a.axis == -1 and float(a.scale) == 0.1 and int(a.zero_point) == 3
    np.testing.assert_array_equal(a.values, q.view(np.uint8))
    assert repr(loaded["fc._packed_params.dtype"]) == "torch.qint8"


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
@pytest.mark.parametrize("glob", [("os", "system"), ("builtins", "eval"), ("torch", "load"),
                                  ("torch._utils", "_rebuild_device_tensor_from_numpy")])
def test_pth_other_globals_refused(tmp_path, fmt, glob):
    state = OrderedDict(w=contiguous("0", np.ones(3, np.float32)))
    path = tmp_path / "evil.pth"
    WRITERS[fmt](path, with_global(state, *glob))
    with pytest.raises(UnpicklingRefused, match=f"{glob[0]}.{glob[1]}"):
        load_pth(path)


def test_pth_unknown_storage_type_refused(tmp_path):
    path = tmp_path / "odd.pth"
    write_zip(path, {"w": Tensor(Storage("0", np.zeros(2, np.uint8), "SparseStorage"),
                                 0, (2,), (1,))})
    with pytest.raises(UnpicklingRefused, match="torch.SparseStorage"):
        load_pth(path)


def test_pth_view_past_storage_is_an_error(tmp_path):
    path = tmp_path / "bad.pth"
    write_zip(path, {"w": Tensor(Storage("0", np.zeros(4, np.float32)), 2, (3,), (1,))})
    with pytest.raises(TorchFormatError, match="past its storage"):
        load_pth(path)


def test_pth_expanded_view_is_an_error(tmp_path):
    """A size with stride 0 (an expanded tensor, or a damaged size) would have the copy
    allocate without bound: a weight never is one."""
    path = tmp_path / "big.pth"
    write_zip(path, {"w": Tensor(Storage("0", np.zeros(4, np.float32)), 0, (4, 10 ** 9),
                                 (1, 0))})
    with pytest.raises(TorchFormatError, match="more elements than its storage of 4"):
        load_pth(path)


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_damaged_pth_is_a_format_error(tmp_path, fmt):
    """Every byte of a small file flipped in turn: each read refuses with TorchFormatError
    (or UnpicklingRefused) or loads; nothing else escapes, nothing hangs (the storage count
    and the unpickler's memo indices are checked before they are allocated)."""
    path = tmp_path / "w.pth"
    WRITERS[fmt](path, OrderedDict(w=contiguous("0", np.arange(6, dtype=np.float32))))
    good = path.read_bytes()
    for i in range(len(good)):
        path.write_bytes(good[:i] + bytes([good[i] ^ 0xA5]) + good[i + 1:])
        try:
            load_pth(path)
        except (TorchFormatError, UnpicklingRefused) as error:
            assert str(path) in str(error)
    path.write_bytes(good[:len(good) // 2])
    with pytest.raises(TorchFormatError, match="damaged or truncated|truncated"):
        load_pth(path)


def test_not_a_pth(tmp_path):
    path = tmp_path / "x.pth"
    path.write_bytes(b"hello world")
    with pytest.raises(TorchFormatError, match="neither a zip"):
        load_pth(path)


@pytest.mark.parametrize("protocol", [2, 4])
def test_megengine_pickles(tmp_path, protocol):
    rng = np.random.default_rng(1)
    qdtype = np.dtype("int8", metadata={"mgb_dtype": {"name": "QuantizedS8", "scale": 0.125}})
    udtype = np.dtype("uint8", metadata={"mgb_dtype": {"name": "Quantized8Asymm", "scale": 0.5,
                                                       "zero_point": 128}})
    state = OrderedDict([
        ("conv1.weight", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
        ("bn1.weight", np.ones((1, 4, 1, 1), np.float32)),
        ("q.weight", np.array([-2, 0, 3], dtype=qdtype)),
        ("u.act", np.array([120, 130], dtype=udtype)),
    ])
    path = tmp_path / "m.pkl"
    with open(path, "wb") as handle:
        pickle.dump({"epoch": 90, "state_dict": state}, handle, protocol=protocol)
    loaded = load_megengine(path)
    assert loaded["epoch"] == 90
    sd = loaded["state_dict"]
    np.testing.assert_array_equal(sd["conv1.weight"], state["conv1.weight"])
    q = sd["q.weight"]
    assert isinstance(q, QTensor) and q.dtype == "qint8" and float(q.scale) == 0.125
    np.testing.assert_allclose(q.dequantize(), [-0.25, 0, 0.375])
    u = sd["u.act"]
    assert u.dtype == "quint8" and int(u.zero_point) == 128
    np.testing.assert_allclose(u.dequantize(), [-4.0, 1.0])


def test_megengine_other_globals_refused(tmp_path):
    path = tmp_path / "evil.pkl"
    # protocol 2: GLOBAL os.system, the string "true", TUPLE1, REDUCE
    path.write_bytes(b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R.")
    with pytest.raises(UnpicklingRefused, match="os.system"):
        load_megengine(path)


@pytest.mark.parametrize("size, stride", [((4, 3), (0, 1)), ((2, 3), (2, 1)),
                                          ((3, 2, 2), (4, 1, 1))])
def test_pth_view_repeating_storage_elements_is_an_error(tmp_path, size, stride):
    """conv1.weight with a stride of 0 had loaded 8,064 of 9,408 values wrong, exit 0."""
    path = tmp_path / "repeat.pth"
    write_zip(path, {"w": Tensor(Storage("0", np.arange(12, dtype=np.float32)), 0, size,
                                 stride)})
    with pytest.raises(TorchFormatError, match="repeats storage elements"):
        load_pth(path)


def test_pth_byteorder_other_than_little_or_big_is_an_error(tmp_path):
    import zipfile
    path = tmp_path / "order.pth"
    write_zip(path, {"w": contiguous("0", np.arange(4, dtype=np.float32))})
    edited = tmp_path / "edited.pth"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(edited, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, b"middle" if item.filename.endswith("/byteorder") else data)
        if not any(n.endswith("/byteorder") for n in src.namelist()):
            prefix = src.namelist()[0].split("/")[0]
            dst.writestr(f"{prefix}/byteorder", b"middle")
    with pytest.raises(TorchFormatError, match="byteorder must be 'little' or 'big', got "
                                               "b'middle'"):
        load_pth(edited)
    np.testing.assert_array_equal(load_pth(path)["w"], np.arange(4, dtype=np.float32))


# ---------------------------------------------------------------- hostile files (issue 58)

CODEC_CALL = FakeGlobal("_codecs", "encode")


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_pth_codecs_encode_admits_latin1_only(tmp_path, fmt):
    """The real `_codecs.encode` was allowed: `encode(x, "os.system")` was a LookupError
    (and any codec a module to import); the stand-in takes latin1 alone."""
    from pth_writer import Call
    path = tmp_path / "codec.pth"
    WRITERS[fmt](path, {"w": contiguous("0", np.ones(3, np.float32)),
                        "b": Call(CODEC_CALL, "x", "os.system")})
    with pytest.raises(UnpicklingRefused, match=f"^{path}: refusing _codecs.encode"):
        load_pth(path)
    WRITERS[fmt](path, {"w": contiguous("0", np.ones(3, np.float32)),
                        "b": Call(CODEC_CALL, "\xff", "latin1")})
    assert load_pth(path)["b"] == b"\xff"


def _nested(path, fmt, depth):
    """A .pth whose "deep" entry is a list nested `depth` deep (the marker string's opcode
    replaced by EMPTY_LIST x (depth + 1), APPEND x depth; the zip rewritten around it)."""
    import zipfile
    WRITERS[fmt](path, {"w": contiguous("0", np.ones(3, np.float32)), "deep": "MARK"})
    marker, deep = b"X\x04\x00\x00\x00MARK", b"]" * (depth + 1) + b"a" * depth
    if fmt == "legacy":
        path.write_bytes(path.read_bytes().replace(marker, deep))
        return
    with zipfile.ZipFile(path) as archive:
        members = [(i.filename, archive.read(i)) for i in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members:
            archive.writestr(name, data.replace(marker, deep))


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_pth_nested_without_end_is_a_format_error(tmp_path, fmt):
    """A legacy file's nesting reached resolve_deferred's recursion: a RecursionError."""
    path = tmp_path / "deep.pth"
    _nested(path, fmt, 5000)
    with pytest.raises(TorchFormatError, match=f"^{path}: .*nested more than 100 deep"):
        load_pth(path)
    _nested(path, fmt, 50)
    assert len(load_pth(path)["deep"]) == 1


def test_pth_size_and_stride_of_different_lengths(tmp_path):
    """A ValueError from numpy's as_strided escaped a legacy file's deferred rebuild."""
    path = tmp_path / "strides.pth"
    write_legacy(path, {"w": Tensor(Storage("0", np.zeros(6, np.float32)), 0, (2, 3), (1,))})
    with pytest.raises(TorchFormatError, match=f"^{path}: .*stride \\(1,\\), one per dim"):
        load_pth(path)


def test_pth_errors_quoting_values_are_one_line(tmp_path):
    """A persistent id holding an array was quoted with its repr over several lines."""
    import io
    import zipfile

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            is_marker = isinstance(obj, str) and obj == "marker"
            return ("nonsense", np.arange(200)) if is_marker else None

    buffer = io.BytesIO()
    Pickler(buffer, protocol=2).dump({"w": "marker"})
    path = tmp_path / "pid.pth"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
    with pytest.raises(TorchFormatError, match=f"^{path}: unexpected persistent id") as info:
        load_pth(path)
    assert "\n" not in str(info.value)


def test_megengine_codecs_encode_admits_latin1_only(tmp_path):
    path = tmp_path / "codec.pkl"
    path.write_bytes(b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00xX\x09\x00\x00\x00os.system"
                     b"\x86R.")
    with pytest.raises(UnpicklingRefused, match=f"^{path}: refusing _codecs.encode"):
        load_megengine(path)


@pytest.mark.parametrize("meta", [{"name": "QuantizedS8"}, {"name": "QuantizedS8", "scale": "x"},
                                  ["QuantizedS8"]])
def test_megengine_quantized_metadata_without_a_scale(tmp_path, meta):
    """A KeyError (or TypeError, AttributeError) escaped the quantized dtype's metadata."""
    path = tmp_path / "q.pkl"
    with open(path, "wb") as handle:
        pickle.dump({"q": np.zeros(2, np.dtype("int8", metadata={"mgb_dtype": meta}))}, handle,
                    protocol=2)
    with pytest.raises(ValueError, match=f"^{path}: a quantized array's dtype metadata"):
        load_megengine(path)


def test_pth_member_flagged_encrypted_is_a_format_error(tmp_path):
    """Found by tests/test_fuzz_files.py: a flag bit of one zip member set made zipfile raise
    RuntimeError("... is encrypted, password required for extraction")."""
    path = tmp_path / "encrypted.pth"
    write_zip(path, {"w": contiguous("0", np.ones(3, np.float32))})
    data = bytearray(path.read_bytes())
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):   # local, central
        at = data.find(signature)
        while at >= 0:
            data[at + flags_at] |= 1   # general purpose bit 0: encrypted
            at = data.find(signature, at + 1)
    path.write_bytes(bytes(data))
    with pytest.raises(TorchFormatError, match=f"^{path}: .*RuntimeError: .*encrypted"):
        load_pth(path)
