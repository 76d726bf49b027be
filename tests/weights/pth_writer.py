"""Write PyTorch `.pth` files without torch, in the zip and the legacy format.

The pickles name torch's globals (`torch._utils._rebuild_tensor_v2`, `torch.FloatStorage`)
through FakeGlobal markers written as GLOBAL opcodes, and point at storages with the
persistent ids torch uses. Tensors are given as Tensor(storage, offset, size, stride),
so tests can write non-contiguous views of a shared storage.
"""
import io
import pickle
import struct
import zipfile
from collections import OrderedDict

import numpy as np

STORAGE_NAMES = {"float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
                 "int64": "LongStorage", "int32": "IntStorage", "int8": "CharStorage",
                 "uint8": "ByteStorage", "bool": "BoolStorage", "bfloat16": "BFloat16Storage"}


class FakeGlobal:
    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, *args):  # pickle requires reduce functions to be callable
        raise TypeError("marker only")


class Call:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


class Storage:
    """A storage: flat array (bfloat16 given as uint16 bits with kind='bfloat16')."""

    def __init__(self, key, array, kind=None):
        self.key, self.array = key, np.ascontiguousarray(array).reshape(-1)
        self.kind = kind or self.array.dtype.name


class Tensor:
    def __init__(self, storage, offset, size, stride, qparams=None):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride
        self.qparams = qparams


def contiguous(key, array, kind=None):
    array = np.ascontiguousarray(array)
    stride = tuple(s // array.itemsize for s in array.strides) if array.ndim else ()
    return Tensor(Storage(key, array, kind), 0, array.shape, stride)


class _Pickler(pickle._Pickler):
    def __init__(self, handle, legacy):
        super().__init__(handle, protocol=2)
        self.legacy = legacy
        self.storages = OrderedDict()

    def save(self, obj, save_persistent_id=True):
        if isinstance(obj, FakeGlobal):
            self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
            return
        if isinstance(obj, Tensor):
            return super().save(self._reduce_tensor(obj), save_persistent_id)
        return super().save(obj, save_persistent_id)

    def _reduce_tensor(self, t):
        size = Call(FakeGlobal("torch", "Size"), tuple(t.size))
        if t.qparams is not None:
            return Call(FakeGlobal("torch._utils", "_rebuild_qtensor"), t.storage, t.offset,
                        size, tuple(t.stride), t.qparams, False, OrderedDict())
        return Call(FakeGlobal("torch._utils", "_rebuild_tensor_v2"), t.storage, t.offset,
                    size, tuple(t.stride), False, OrderedDict())

    def persistent_id(self, obj):
        if not isinstance(obj, Storage):
            return None
        self.storages[obj.key] = obj
        kind = FakeGlobal("torch", STORAGE_NAMES.get(obj.kind, obj.kind))
        pid = ("storage", kind, obj.key, "cpu", obj.array.size)
        return pid + (None,) if self.legacy else pid


def _pickle(obj, legacy):
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, legacy)
    pickler.dump(obj)
    return buffer.getvalue(), pickler.storages


def write_zip(path, obj, prefix="archive"):
    data, storages = _pickle(obj, legacy=False)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{prefix}/data.pkl", data)
        archive.writestr(f"{prefix}/byteorder", "little")
        for key, storage in storages.items():
            archive.writestr(f"{prefix}/data/{key}", storage.array.astype(
                storage.array.dtype.newbyteorder("<")).tobytes())
        archive.writestr(f"{prefix}/version", "3\n")


def write_legacy(path, obj):
    data, storages = _pickle(obj, legacy=True)
    with open(path, "wb") as handle:
        for header in (0x1950A86A20F9469CFC6C, 1001,
                       {"protocol_version": 1001, "little_endian": True,
                        "type_sizes": {"short": 2, "int": 4, "long": 4}}):
            pickle.dump(header, handle, protocol=2)
        handle.write(data)
        pickle.dump(sorted(storages), handle, protocol=2)
        for key in sorted(storages):
            array = storages[key].array
            handle.write(struct.pack("<q", array.size))
            handle.write(array.tobytes())


def with_global(obj, module, name):
    """`obj` wrapped so its pickle also names `module.name` (to test refusal)."""
    return {"state": obj, "evil": Call(FakeGlobal(module, name), "echo hi")}
