"""Weights and checkpoints as safetensors files: arrays in the tensor table, the rest as JSON.

`save(obj, path)` takes a flat state dict `{name: array}` or a nested checkpoint of
dicts, lists and tuples holding numpy arrays, Tensors, numpy scalars, ints, floats,
strings, bools and None:

>>> ty.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
...          "rng": ty.get_rng_state()}, "ckpt.safetensors")
>>> ckpt = ty.load("ckpt.safetensors")     # same structure; arrays come back as numpy

On disk: each array is a safetensors tensor named by its path in the structure
(dict keys joined with ".", list positions as numbers: `model.layer1.0.conv1.weight`,
`optimizer.state.0.exp_avg`), so a flat state dict is an ordinary safetensors file any
reader understands. `__metadata__["tianyuan"]` holds the structure as JSON, where
every JSON object is a tag: `{"a": name}` an array, `{"s": name}` a numpy scalar,
`{"d": [[key, node], ...]}` a dict (keys str or int, order kept), `{"t": [...]}` a
tuple, `{"f": "nan"}` a non-finite float; lists, strings, numbers, bools and null are
themselves. `__metadata__["tianyuan.crc32"]` checks the array bytes on load,
`"tianyuan.crc32.structure"` the JSON (a damaged digit there still parses). A safetensors
file written by someone else loads as a flat `{name: array}` dict.

Files are written atomically (temp file in the same folder, fsync, `os.replace`), so
a crash mid-write leaves the previous file intact. Nothing here unpickles; a pickle
(PyTorch `.pth`, MegEngine `.pkl`) is refused and pointed at the converters.
"""
import json
import math
import os
import struct
import tempfile
import zlib

import numpy as np
import safetensors.numpy

from ..tensor import Tensor

FORMAT_VERSION = "1"


class SerializationError(ValueError):
    """A file that is not a readable tianyuan/safetensors file, or an object we cannot save."""


class SaveError(OSError, SerializationError):
    """The disk refused a write (full, read-only, gone): the file at the path is as before.
    An OSError with its errno, and a SerializationError so commands report it in one line."""


# ---------------------------------------------------------------- save

class _Packer:
    """Walks the object: arrays into `self.arrays` under unique path names, the rest to JSON."""

    def __init__(self):
        self.arrays = {}

    def name_for(self, path):
        name = ".".join(path) or "_"
        unique, n = name, 1
        while unique in self.arrays:  # {"a.b": x} and {"a": {"b": y}} share a path
            unique, n = f"{name}~{n}", n + 1
        return unique

    def pack(self, obj, path):
        if isinstance(obj, Tensor):
            obj = obj.data
        if isinstance(obj, (np.ndarray, np.generic)) and not isinstance(obj, (np.str_, np.bytes_)):
            name = self.name_for(path)
            self.arrays[name] = _little_endian(np.asarray(obj, order="C"), path)
            return {"s" if isinstance(obj, np.generic) else "a": name}
        if isinstance(obj, dict):
            return {"d": [[_key(k, path), self.pack(v, path + [str(k)])] for k, v in obj.items()]}
        if isinstance(obj, list):
            return [self.pack(v, path + [str(i)]) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"t": [self.pack(v, path + [str(i)]) for i, v in enumerate(obj)]}
        if isinstance(obj, float) and not math.isfinite(obj):
            return {"f": repr(obj)}
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        raise SerializationError(f"save: cannot store a {type(obj).__name__} at "
                                 f"'{'.'.join(path) or '<root>'}'; checkpoints hold dicts, "
                                 "lists, tuples, arrays, Tensors, numbers, strings, bools and None")


def _key(key, path):
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise SerializationError(f"save: dict key {key!r} at '{'.'.join(path) or '<root>'}' is a "
                                 f"{type(key).__name__}; only str and int keys can be stored")
    return key


def _little_endian(array, path):
    if array.dtype.kind not in "biuf":
        raise SerializationError(f"save: array at '{'.'.join(path)}' has dtype {array.dtype} "
                                 f"(shape {array.shape}); only bool, int, uint and float arrays "
                                 "can be stored")
    return array.astype(array.dtype.newbyteorder("<"), copy=False)


def _crc(arrays):
    crc = 0
    for name in sorted(arrays):
        crc = zlib.crc32(arrays[name].reshape(-1).view(np.uint8), crc)
    return f"{crc:08x}"


def _text_crc(text):
    return f"{zlib.crc32(text.encode()):08x}"


def save(obj, path):
    """Write `obj` (state dict or nested checkpoint) to `path` as safetensors, atomically."""
    path = os.fspath(path)
    packer = _Packer()
    tree = packer.pack(obj, [])
    structure = json.dumps(tree, separators=(",", ":"))
    metadata = {"format": "np", "tianyuan": structure, "tianyuan.version": FORMAT_VERSION,
                "tianyuan.crc32": _crc(packer.arrays),
                "tianyuan.crc32.structure": _text_crc(structure)}
    try:
        payload = safetensors.numpy.save(packer.arrays, metadata=metadata)
    except Exception as error:  # e.g. a float128 array; SafetensorError is not exported
        raise SerializationError(f"save: cannot write '{path}' ({error})") from error
    _atomic_write(path, payload)


def _atomic_write(path, payload):
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.",
                                   suffix=".tmp")
    except OSError as error:
        raise _save_error(path, error, 0) from error
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file normal permissions
        os.replace(tmp, path)
    except BaseException as error:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(error, OSError):
            raise _save_error(path, error, len(payload)) from error
        raise
    _fsync_folder(folder)


def _save_error(path, error, size):
    """One line naming the path (a disk-full error names only the temp file, if anything)."""
    reason = error.strerror or str(error)
    wrote = f" ({size:,} bytes)" if size else ""
    kept = "the file there is unchanged" if os.path.exists(path) else "nothing was written"
    saved = SaveError(f"save: cannot write '{path}'{wrote}: {reason}; {kept}")
    saved.errno = error.errno   # (strerror and filename set would make str() "[Errno 28] ...")
    return saved


def _fsync_folder(folder):
    try:  # make the rename itself durable; not possible on every OS or filesystem
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------- load

def load(path):
    """Read a file written by `save` (or any safetensors file) back into numpy arrays."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"load: no such file '{path}'")
    with open(path, "rb") as handle:
        data = handle.read()
    header = _read_header(data, path)
    try:
        arrays = safetensors.numpy.load(data)
    except Exception as error:  # safetensors raises its own SafetensorError
        raise SerializationError(f"load: '{path}' is a corrupt safetensors file "
                                 f"({one_line(error)})") from error
    metadata = header.get("__metadata__") or {}
    expected = metadata.get("tianyuan.crc32")
    if expected is not None and _crc(arrays) != expected:
        raise SerializationError(f"load: '{path}' is corrupt: its array bytes do not match the "
                                 f"checksum stored when it was written (crc32 {_crc(arrays)} "
                                 f"!= {expected})")
    arrays = {k: v if v.flags.writeable else v.copy() for k, v in arrays.items()}
    if "tianyuan" not in metadata:
        return arrays
    expected = metadata.get("tianyuan.crc32.structure")   # files from before 2026-12-07 lack it
    if expected is not None and _text_crc(metadata["tianyuan"]) != expected:
        raise SerializationError(f"load: '{path}' is corrupt: its structure record does not "
                                 "match the checksum stored when it was written")
    try:
        return _unpack(json.loads(metadata["tianyuan"]), arrays)
    except (ValueError, KeyError, TypeError, IndexError, RecursionError) as error:
        raise SerializationError(f"load: '{path}' has a corrupt structure record "
                                 f"({type(error).__name__}: {one_line(error, 100)})") from error


def _read_header(data, path):
    header = _parse_header(data)
    if isinstance(header, str):
        _refuse_pickle(data, path)
        raise SerializationError(f"load: '{path}' {header}")
    return header


def _parse_header(data):
    """The safetensors header as a dict, or a string saying what is wrong with the file."""
    if len(data) < 8:
        return (f"is truncated or not safetensors: {len(data)} bytes, fewer than the 8 of a "
                "header length")
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        return (f"is truncated or not safetensors: the header claims {length} bytes, the file "
                f"has {len(data) - 8} after the length")
    try:
        header = json.loads(data[8:8 + length])
    except (ValueError, RecursionError) as error:   # not UTF-8, not JSON, nested without end
        return (f"is not safetensors or its header is corrupt ({type(error).__name__}: "
                f"{one_line(error, 100)})")
    if not isinstance(header, dict):
        return f"is not safetensors: its header is a JSON {type(header).__name__}, not an object"
    held = len(data) - 8 - length
    for name, info in header.items():
        problem = _metadata_problem(info) if name == "__metadata__" else _entry_problem(info)
        if problem:
            return f"has a corrupt header: {_short(name)} {problem}"
    ends = [info["data_offsets"][1] for k, info in header.items() if k != "__metadata__"]
    if max(ends, default=0) > held:
        return f"is truncated: its arrays need {max(ends)} bytes of data, the file holds {held}"
    return header


# safetensors dtype -> bytes per element, for the dtypes safetensors.numpy reads
DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "U32": 4, "I32": 4,
               "F32": 4, "U64": 8, "I64": 8, "F64": 8, "C64": 8}


def _is_size(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry_problem(info):
    """What is wrong with one tensor's record `{"dtype", "shape", "data_offsets"}`, or None."""
    if not isinstance(info, dict):
        return f"is a JSON {type(info).__name__}, not a tensor record"
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        return f"has dtype {_short(dtype)}; tianyuan.load reads {', '.join(DTYPE_SIZES)}"
    if not isinstance(shape, list) or not all(_is_size(n) for n in shape):
        return f"has shape {_short(shape)}, not a list of sizes >= 0"
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_size, offsets))
            and offsets[0] <= offsets[1]):
        return f"has data_offsets {_short(offsets)}, not [begin, end] with 0 <= begin <= end"
    need = math.prod(shape) * DTYPE_SIZES[dtype]
    if offsets[1] - offsets[0] != need:
        return (f"has data_offsets {_short(offsets)}: {_short(offsets[1] - offsets[0])} bytes "
                f"for a {dtype} array of shape {_short(shape)}, which takes {_short(need)}")
    return None


def _metadata_problem(metadata):
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        return "is not an object of strings"
    return None


def one_line(value, limit=300):
    """`str(value)` as one line of at most `limit` characters, for an error message that
    quotes another error or a value from a file (a binding's TypeError lists signatures and
    arrays over many lines)."""
    return " ".join(str(value).split())[:limit]


def _short(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


_PICKLE_SUFFIXES = (".pkl", ".pickle", ".pth", ".pt", ".ckpt", ".bin")


def _refuse_pickle(data, path):
    protocol2 = len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5
    protocol0 = data[:1] in (b"(", b"c", b"}", b"]") and data.endswith(b".")
    archive = data[:4] == b"PK\x03\x04"  # PyTorch's zip format: a pickle plus storages
    if not (protocol2 or protocol0 or archive or path.lower().endswith(_PICKLE_SUFFIXES)):
        return
    kind = "a zip archive (a PyTorch .pth/.pt file?)" if archive else "a pickle"
    raise SerializationError(
        f"load: '{path}' is {kind}, not a safetensors file. tianyuan never unpickles files "
        "(a pickle can run arbitrary code). Convert PyTorch .pth and MegEngine .pkl weights "
        "with the converters in tianyuan.weights, which read them through the restricted "
        "tianyuan.io.safe_unpickle, then write them with tianyuan.save.")


def _unpack(node, arrays):
    if isinstance(node, list):
        return [_unpack(v, arrays) for v in node]
    if not isinstance(node, dict):
        return node
    (tag, value), = node.items()
    if tag == "a":
        return arrays[value]
    if tag == "s":
        return arrays[value][()]
    if tag == "d":
        return {key: _unpack(v, arrays) for key, v in value}
    if tag == "t":
        return tuple(_unpack(v, arrays) for v in value)
    if tag == "f":
        return float(value)
    raise ValueError(f"unknown tag {tag!r}")
