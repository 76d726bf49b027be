"""Read PyTorch `.pth`/`.pt` files without torch: the zip format and the legacy format.

Both are pickles whose tensors point at storages through persistent ids. The pickle
goes through `tianyuan.io.safe_unpickle` with stand-ins for exactly the globals these
files use (`torch._utils._rebuild_tensor_v2` and friends, storage classes, dtype and
qscheme singletons, `torch.Size`, `collections.OrderedDict`); each stand-in builds
numpy arrays. Anything else in the pickle is refused.

>>> state = load_pth("resnet18-f37072fd.pth")   # OrderedDict {name: np.ndarray}
>>> state["conv1.weight"].shape
(64, 3, 7, 7)
"""
import os
import pickle
import struct
import zipfile
from collections import OrderedDict

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tianyuan.io import BYTES_GLOBALS, NUMPY_GLOBALS, UnpicklingRefused, safe_unpickle
from tianyuan.io.serialization import one_line

from .qtensor import QTensor, bfloat16_to_float32

# torch storage class -> (numpy dtype, our name). bfloat16 is stored as its bits.
STORAGE_DTYPES = {
    "FloatStorage": ("<f4", "float32"), "DoubleStorage": ("<f8", "float64"),
    "HalfStorage": ("<f2", "float16"), "BFloat16Storage": ("<u2", "bfloat16"),
    "LongStorage": ("<i8", "int64"), "IntStorage": ("<i4", "int32"),
    "ShortStorage": ("<i2", "int16"), "CharStorage": ("|i1", "int8"),
    "ByteStorage": ("|u1", "uint8"), "BoolStorage": ("|b1", "bool"),
    "ComplexFloatStorage": ("<c8", "complex64"), "ComplexDoubleStorage": ("<c16", "complex128"),
    "QInt8Storage": ("|i1", "qint8"), "QUInt8Storage": ("|u1", "quint8"),
    "QInt32Storage": ("<i4", "qint32"), "UntypedStorage": ("|u1", "uint8"),
}
# torch dtype singleton name -> numpy dtype (for _rebuild_tensor_v3 over byte storages).
TORCH_DTYPES = {
    "float32": "<f4", "float": "<f4", "float64": "<f8", "double": "<f8", "float16": "<f2",
    "half": "<f2", "bfloat16": "<u2", "int64": "<i8", "long": "<i8", "int32": "<i4",
    "int": "<i4", "int16": "<i2", "short": "<i2", "int8": "|i1", "uint8": "|u1", "bool": "|b1",
    "complex64": "<c8", "complex128": "<c16", "qint8": "|i1", "quint8": "|u1", "qint32": "<i4",
}
QSCHEMES = ("per_tensor_affine", "per_channel_affine", "per_channel_affine_float_qparams",
            "per_tensor_symmetric", "per_channel_symmetric")
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001


class TorchFormatError(ValueError):
    """The file is not a `.pth` this reader understands (the message says why)."""


# what a damaged zip or legacy file raises on the way (a member missing, a name that is not
# UTF-8, a compression method from nowhere, a record of the wrong type, a value numpy refuses
# while a legacy file's tensors are rebuilt after its pickle)
_DAMAGE = (zipfile.BadZipFile, KeyError, OSError, EOFError, NotImplementedError, ValueError,
           AttributeError, TypeError, IndexError, OverflowError, RecursionError, struct.error,
           RuntimeError)   # zipfile: "File ... is encrypted, password required for extraction"


class _Storage:
    """A storage's elements as a flat numpy array; `kind` is our dtype name."""

    def __init__(self, array, kind):
        self.array, self.kind = array, kind


class _Singleton:
    """Stands for a torch dtype / qscheme object named in the pickle."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


def _view(storage, offset, size, stride, source):
    """A copy of the strided view (offset, size, stride in elements) of a storage."""
    flat = storage.array
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise TorchFormatError(f"{source}: tensor view of size {size} has stride {stride}, "
                               "one per dimension")
    if any(s == 0 for s in size):
        return np.zeros(size, flat.dtype)
    if any(s < 0 for s in size + stride) or np.prod(size, dtype=np.float64) > flat.size:
        # a weight is never an expanded or overlapping view (a damaged or crafted size
        # would have the copy below allocate without bound)
        raise TorchFormatError(f"{source}: tensor view of size {size}, stride {stride} has "
                               f"more elements than its storage of {flat.size}")
    _check_no_overlap(size, stride, source)
    last = offset + sum((n - 1) * st for n, st in zip(size, stride))
    if offset < 0 or last >= flat.size:
        raise TorchFormatError(f"{source}: tensor view offset {offset}, size {size}, stride "
                               f"{stride} reaches past its storage of {flat.size} elements")
    base = flat[offset:]
    view = as_strided(base, size, tuple(st * flat.itemsize for st in stride), writeable=False)
    return np.array(view, order="C")  # own, writable, C-contiguous copy


def _check_no_overlap(size, stride, source):
    """A state dict's tensor is a view whose elements are distinct storage elements (a
    stride of 0 or overlapping strides repeat values: a legitimate expand, which a saved
    weight never is): the dimensions ordered by stride each step past the ones below."""
    reach = 1
    for st, n in sorted((st, n) for n, st in zip(size, stride) if n > 1):
        if st < reach:
            raise TorchFormatError(f"{source}: tensor view of size {size} has stride {stride}, "
                                   "which repeats storage elements (a zero or overlapping "
                                   "stride); a saved weight never does")
        reach = st * n


def _finish(array, kind):
    if kind == "bfloat16":
        return bfloat16_to_float32(array)
    return array.astype(array.dtype.newbyteorder("="), copy=False)


class _Deferred:
    """A legacy-format tensor whose storage bytes come after the pickle naming it."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def resolve(self):
        return self.fn(*[resolve_deferred(a) for a in self.args])


def _deferrable(fn):
    def rebuild(storage, *args):
        if storage.array is None:
            return _Deferred(fn, (storage,) + args)
        return fn(storage, *[resolve_deferred(a) for a in args])
    return rebuild


def resolve_deferred(obj):
    """Replace _Deferred leaves by arrays, in place for dicts (keeps `_metadata`)."""
    if isinstance(obj, _Deferred):
        return obj.resolve()
    if isinstance(obj, dict):
        for key, value in obj.items():
            obj[key] = resolve_deferred(value)
        return obj
    if isinstance(obj, list):
        obj[:] = [resolve_deferred(v) for v in obj]
        return obj
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(resolve_deferred(v) for v in obj)
    return obj


def _make_globals(source):
    """The allow-list: (module, name) -> stand-in building numpy arrays."""

    @_deferrable
    def rebuild_v2(storage, offset, size, stride, requires_grad=False, hooks=None,
                   metadata=None):
        return _finish(_view(storage, offset, size, stride, source), storage.kind)

    @_deferrable
    def rebuild_v1(storage, offset, size, stride):
        return _finish(_view(storage, offset, size, stride, source), storage.kind)

    @_deferrable
    def rebuild_v3(storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None):
        kind = dtype.name if isinstance(dtype, _Singleton) else str(dtype)
        if kind not in TORCH_DTYPES:
            raise TorchFormatError(f"{source}: tensor dtype {kind} is not supported")
        typed = _Storage(storage.array.view(np.dtype(TORCH_DTYPES[kind])), kind)
        return _finish(_view(typed, offset, size, stride, source), kind)

    def rebuild_parameter(data, requires_grad=False, hooks=None, state=None):
        return data  # an array, or a _Deferred resolved with the rest

    @_deferrable
    def rebuild_qtensor(storage, offset, size, stride, qparams, requires_grad=False, hooks=None):
        values = _view(storage, offset, size, stride, source)
        scheme = qparams[0].name if isinstance(qparams[0], _Singleton) else str(qparams[0])
        if scheme.startswith("per_tensor"):
            scale, zero, axis = np.float64(qparams[1]), np.int64(qparams[2]), -1
        else:
            scale, zero, axis = qparams[1], qparams[2], int(qparams[3])
            scale, zero = np.asarray(scale, np.float64), np.asarray(zero, np.int64)
        return QTensor(values, np.asarray(scale), np.asarray(zero), axis, storage.kind)

    allowed = {**NUMPY_GLOBALS, **BYTES_GLOBALS}   # protocol-2 bytes (numpy payloads): latin1
    allowed.update({
        ("collections", "OrderedDict"): OrderedDict,
        ("torch._utils", "_rebuild_tensor"): rebuild_v1,
        ("torch._utils", "_rebuild_tensor_v2"): rebuild_v2,
        ("torch._utils", "_rebuild_tensor_v3"): rebuild_v3,
        ("torch._utils", "_rebuild_parameter"): rebuild_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): rebuild_parameter,
        ("torch._utils", "_rebuild_qtensor"): rebuild_qtensor,
        ("torch", "Size"): tuple,
        ("argparse", "Namespace"): __import__("argparse").Namespace,
    })
    for name in STORAGE_DTYPES:
        allowed[("torch", name)] = name
    for name in list(TORCH_DTYPES) + list(QSCHEMES):
        allowed[("torch", name)] = _Singleton(name)
    return allowed


def _storage_kind(storage_type, source):
    name = storage_type if isinstance(storage_type, str) else getattr(storage_type, "name", "?")
    if name not in STORAGE_DTYPES:
        raise TorchFormatError(f"{source}: storage type torch.{name} is not supported")
    return STORAGE_DTYPES[name]


def load_pth(path):
    """Read a `.pth`/`.pt` (zip or legacy) into python containers of numpy arrays.

    Tensors become numpy arrays (bfloat16 -> float32), quantized tensors QTensor;
    the OrderedDict keeps its `_metadata` attribute when the file had one.
    """
    source = str(path)
    with open(path, "rb") as handle:
        head = handle.read(4)
    try:
        if head[:2] == b"PK":
            return _load_zip(path, source)
        if head[:1] == b"\x80":
            return _load_legacy(path, source)
    except (UnpicklingRefused, TorchFormatError):
        raise
    except pickle.UnpicklingError as error:  # our own format errors come back wrapped
        if isinstance(error.__cause__, TorchFormatError):
            raise error.__cause__ from None
        raise TorchFormatError(f"{source}: not a readable .pth, damaged or truncated "
                               f"({one_line(error)})") from error
    except _DAMAGE as error:
        raise TorchFormatError(f"{source}: not a readable .pth, damaged or truncated "
                               f"({type(error).__name__}: {one_line(error)})") from error
    raise TorchFormatError(f"{source}: neither a zip nor a legacy pickle .pth (first bytes "
                           f"{head!r}); the pre-0.1.10 tar format is not supported")


def _load_zip(path, source):
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        prefix = names[0].split("/")[0]
        if f"{prefix}/constants.pkl" in names or any(n.startswith(f"{prefix}/code/")
                                                     for n in names):
            raise TorchFormatError(f"{source}: a TorchScript archive, not a state dict; "
                                   "save `model.state_dict()` with torch.save instead")
        order = "<"
        if f"{prefix}/byteorder" in names:
            value = archive.read(f"{prefix}/byteorder").strip()
            if value not in (b"little", b"big"):
                raise TorchFormatError(f"{source}: byteorder must be 'little' or 'big', got "
                                       f"{value[:40]!r}")
            order = "<" if value == b"little" else ">"
        cache = {}

        def persistent_load(pid):
            return _zip_storage(archive, prefix, pid, order, cache, source)

        data = archive.read(f"{prefix}/data.pkl")
        return safe_unpickle(data, allowed=_make_globals(source),
                             persistent_load=persistent_load, source=source, encoding="latin1")


def _zip_storage(archive, prefix, pid, order, cache, source):
    if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
        raise TorchFormatError(f"{source}: unexpected persistent id {one_line(repr(pid))}")
    _, storage_type, key, _location, _numel = pid[:5]
    dtype, kind = _storage_kind(storage_type, source)
    if key not in cache:
        raw = archive.read(f"{prefix}/data/{key}")
        cache[key] = np.frombuffer(raw, np.dtype(dtype).newbyteorder(order))
    return _Storage(cache[key], kind)


def _load_legacy(path, source):
    """Consecutive pickles: magic, protocol, sys_info, object, storage keys, then raw data."""
    allowed = _make_globals(source)
    with open(path, "rb") as handle:
        magic = safe_unpickle(handle, allowed={}, source=source)
        protocol = safe_unpickle(handle, allowed={}, source=source)
        if magic != LEGACY_MAGIC or protocol != LEGACY_PROTOCOL:
            raise TorchFormatError(f"{source}: not a PyTorch legacy file (magic {magic!r}, "
                                   f"protocol {protocol!r})")
        info = safe_unpickle(handle, allowed={}, source=source)
        if not info.get("little_endian", True):
            raise TorchFormatError(f"{source}: big-endian legacy files are not supported")
        pending = {}  # root storage key -> _LazyStorage, filled after the pickle

        def persistent_load(pid):
            return _legacy_storage(pid, pending, source)

        result = safe_unpickle(handle, allowed=allowed, persistent_load=persistent_load,
                               source=source, encoding="latin1")
        keys = safe_unpickle(handle, allowed={}, source=source)
        for key in keys:
            _read_legacy_storage(handle, key, pending, source)
    return resolve_deferred(result)


def _legacy_storage(pid, pending, source):
    # ('storage', type, root key, location, numel, view_metadata); the data comes after
    # the pickle, so hand out a placeholder whose array is filled in before use.
    if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
        raise TorchFormatError(f"{source}: unexpected persistent id {one_line(repr(pid))}")
    storage_type, key = pid[1], pid[2]
    dtype, kind = _storage_kind(storage_type, source)
    root = pending.setdefault(key, _LazyStorage(dtype, kind))
    view = pid[5] if len(pid) > 5 else None
    if view is None:
        return root
    _view_key, offset, numel = view
    return _LazyStorage(dtype, kind, root, int(offset), int(numel))


def _read_legacy_storage(handle, key, pending, source):
    head = handle.read(8)
    if len(head) != 8:
        raise TorchFormatError(f"{source}: storage {key} is truncated")
    (numel,) = struct.unpack("<q", head)
    root = pending.get(key)
    itemsize = np.dtype(root.dtype).itemsize if root else 1
    left = os.fstat(handle.fileno()).st_size - handle.tell()
    if not 0 <= numel * itemsize <= left:   # a damaged count would ask for that much memory
        raise TorchFormatError(f"{source}: storage {key} claims {numel} elements; "
                               f"{left} bytes are left in the file")
    raw = handle.read(numel * itemsize)
    if len(raw) != numel * itemsize:
        raise TorchFormatError(f"{source}: storage {key} is truncated")
    if root is not None:
        root.data = np.frombuffer(raw, root.dtype)


class _LazyStorage(_Storage):
    """A legacy storage whose bytes are read after the pickle that names it."""

    def __init__(self, dtype, kind, root=None, offset=0, numel=None):
        self.dtype, self.kind, self.root, self.offset, self.numel = dtype, kind, root, offset, numel
        self.data = None

    @property
    def array(self):
        if self.root is not None:
            base = self.root.array
            return None if base is None else base[self.offset:self.offset + self.numel]
        return self.data
