"""A minimal reader for MATLAB level-5 `.mat` files (what the ImageNet devkit's meta.mat is).

Reads numeric, char, cell and struct arrays, compressed or not, so that no scipy is
needed. Struct arrays become lists of dicts, chars become str, numeric arrays become
numpy arrays (column-major reshaped), 1-element numeric arrays become Python scalars.

>>> read_mat("meta.mat")["synsets"][0]["WNID"]       # doctest: +SKIP
'n02119789'
"""
import struct
import zlib

import numpy as np

HEADER_BYTES = 128
MI_MATRIX, MI_COMPRESSED = 14, 15
_MI_DTYPES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8",
              12: "i8", 13: "u8", 16: "u1", 17: "u2", 18: "u4"}
MX_CELL, MX_STRUCT, MX_CHAR = 1, 2, 4
_MX_NUMERIC = {6: "f8", 7: "f4", 8: "i1", 9: "u1", 10: "i2", 11: "u2", 12: "i4", 13: "u4",
               14: "i8", 15: "u8"}


class MatFileError(ValueError):
    """The file is not a MATLAB v5 file this reader understands."""


class _Stream:
    def __init__(self, data, endian, source):
        self.data, self.pos, self.endian, self.source = data, 0, endian, source

    def at_end(self):
        return self.pos >= len(self.data)

    def element(self):
        """(mi type, payload bytes) of the next data element; handles the small format."""
        if self.pos + 8 > len(self.data):
            raise MatFileError(f"{self.source}: truncated data element at byte {self.pos}")
        first, second = struct.unpack_from(self.endian + "II", self.data, self.pos)
        if first >> 16:  # small data element: 2-byte size, 2-byte type, 4 bytes of data
            size, kind = first >> 16, first & 0xFFFF
            payload = self.data[self.pos + 4:self.pos + 4 + size]
            self.pos += 8
            return kind, payload
        kind, size = first, second
        start = self.pos + 8
        payload = self.data[start:start + size]
        if len(payload) != size:
            raise MatFileError(f"{self.source}: truncated data element at byte {self.pos}")
        # miCOMPRESSED is not padded; everything else is padded to 8 bytes.
        self.pos = start + size if kind == MI_COMPRESSED else start + ((size + 7) & ~7)
        return kind, payload

    def array(self):
        kind, payload = self.element()
        if kind not in _MI_DTYPES:
            raise MatFileError(f"{self.source}: unexpected data type {kind} inside a matrix")
        return np.frombuffer(payload, np.dtype(_MI_DTYPES[kind]).newbyteorder(self.endian))


def _decode_text(codes, kind_dtype):
    if kind_dtype == "u1":
        return bytes(codes.astype(np.uint8)).decode("utf-8", errors="replace")
    return "".join(chr(int(c)) for c in codes)


def _read_char(stream, dims):
    kind, payload = stream.element()
    codes = np.frombuffer(payload, np.dtype(_MI_DTYPES.get(kind, "u2")).newbyteorder(stream.endian))
    if len(dims) == 2 and dims[0] > 1:  # a char matrix: one string per row
        grid = codes.reshape(dims, order="F")
        return [_decode_text(row, _MI_DTYPES.get(kind, "u2")).rstrip() for row in grid]
    return _decode_text(codes, _MI_DTYPES.get(kind, "u2"))


def _read_struct(stream, count):
    name_length = int(stream.array()[0])
    raw = bytes(stream.array().astype(np.uint8))
    fields = [raw[i:i + name_length].split(b"\0", 1)[0].decode("ascii")
              for i in range(0, len(raw), name_length)]
    return [{field: _read_matrix(stream)[1] for field in fields} for _ in range(count)]


def _read_matrix(stream):
    """(name, value) of the next miMATRIX element."""
    kind, payload = stream.element()
    if kind != MI_MATRIX:
        raise MatFileError(f"{stream.source}: expected a matrix element, found type {kind}")
    if not payload:  # an empty array (e.g. an empty cell)
        return "", np.zeros((0, 0))
    inner = _Stream(payload, stream.endian, stream.source)
    flags = inner.array()
    mx_class, is_complex = int(flags[0]) & 0xFF, bool(int(flags[0]) & 0x800)
    dims = tuple(int(d) for d in inner.array())
    name = bytes(inner.array().astype(np.uint8)).decode("ascii")
    count = int(np.prod(dims))
    if mx_class == MX_STRUCT:
        return name, _read_struct(inner, count)
    if mx_class == MX_CELL:
        return name, [_read_matrix(inner)[1] for _ in range(count)]
    if mx_class == MX_CHAR:
        return name, _read_char(inner, dims)
    if mx_class not in _MX_NUMERIC:
        raise MatFileError(f"{stream.source}: array {name!r} has unsupported class {mx_class}")
    values = inner.array().astype(_MX_NUMERIC[mx_class])
    if is_complex:
        values = values + 1j * inner.array()
    values = values.reshape(dims, order="F")
    return name, values.reshape(-1)[0].item() if values.size == 1 else values


def read_mat(path):
    """{variable name: value} of a MATLAB v5 file."""
    with open(path, "rb") as handle:
        data = handle.read()
    if len(data) < HEADER_BYTES:
        raise MatFileError(f"{path}: too short for a MATLAB v5 file ({len(data)} bytes)")
    if data[:19] == b"MATLAB 7.3 MAT-file":
        raise MatFileError(f"{path}: a MATLAB 7.3 (HDF5) file; only v5 files are supported")
    indicator = data[126:128]
    if indicator not in (b"IM", b"MI"):
        raise MatFileError(f"{path}: not a MATLAB v5 file (no endian indicator at byte 126)")
    stream = _Stream(data[HEADER_BYTES:], "<" if indicator == b"IM" else ">", path)
    found = {}
    while not stream.at_end():
        kind, payload = stream.element()
        if kind == MI_COMPRESSED:
            try:
                payload = zlib.decompress(payload)
            except zlib.error as error:
                raise MatFileError(f"{path}: corrupt compressed element ({error})") from error
            name, value = _read_matrix(_Stream(payload, stream.endian, path))
        elif kind == MI_MATRIX:
            stream.pos -= 8 + ((len(payload) + 7) & ~7)  # re-read the whole element
            name, value = _read_matrix(stream)
        else:
            continue
        found[name] = value
    return found
