"""A restricted unpickler: admits only the globals the caller lists, refuses the rest.

Foreign pickle-based files (PyTorch `.pth`, MegEngine `.pkl`, CIFAR batches) go
through here; nothing in tianyuan calls plain `pickle.load`.

>>> safe_unpickle(open("data_batch_1", "rb"), allowed={}, encoding="bytes")
"""
import io
import pickle
import pickletools

import numpy as np

from .serialization import one_line

# Builtins every data pickle may use: containers and scalars only, nothing callable.
_SAFE_BUILTINS = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "slice"): slice,
    ("builtins", "complex"): complex,
    ("collections", "OrderedDict"): __import__("collections").OrderedDict,
}


def _numpy_globals():
    """What pickled numpy arrays need (old `numpy.core` and new `numpy._core` paths): the
    reconstructors, with numpy.dtype as `_dtype` (plain dtypes only; BUILD checks its state)."""
    from numpy._core import multiarray

    found = {}
    for package in ("numpy.core", "numpy._core"):
        found[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        found[(f"{package}.multiarray", "scalar")] = multiarray.scalar
    found[("numpy", "ndarray")] = np.ndarray
    found[("numpy", "dtype")] = _dtype
    return found


# dtype kinds a data pickle holds: bool, ints, floats, complex, byte and unicode strings (not
# object or structured dtypes, whose arrays unpickle Python objects or nested layouts)
_DTYPE_KINDS = "biufcSU"


def _dtype(spec, align=False, copy=False):
    """numpy.dtype as numpy's pickles call it, `dtype("f4", False, True)`, for plain kinds."""
    if not isinstance(spec, str):
        raise pickle.UnpicklingError(f"numpy dtype from a {type(spec).__name__}, not a name")
    dtype = np.dtype(spec, bool(align), bool(copy))
    if dtype.kind not in _DTYPE_KINDS or dtype.fields is not None:
        raise pickle.UnpicklingError(f"numpy dtype {spec!r}: a data file holds only "
                                     "numbers, bools and strings")
    return dtype


def _check_dtype_state(dtype, state):
    """numpy's dtype.__setstate__ trusts its tuple (a 6-item one crashes the process): admit
    the state numpy writes for this dtype, with any byte order and an optional metadata
    dict (MegEngine's quantized dtypes carry one)."""
    expected = dtype.__reduce__()[2]
    if not (isinstance(state, tuple) and len(state) in (8, 9) and state[0] in (3, 4) and
            state[1] in ("<", ">", "|", "=") and state[2:8] == expected[2:8] and
            (len(state) == 8 or state[8] is None or isinstance(state[8], dict))):
        raise pickle.UnpicklingError(f"numpy dtype {dtype} with the state {one_line(state, 80)}"
                                     f", not one numpy writes")


class UnpicklingError(pickle.UnpicklingError, ValueError):
    """A file that is not a readable pickle (empty, truncated, damaged, nested without end).
    A ValueError as well, so commands report it as a bad file (one line, status 2)."""


class UnpicklingRefused(UnpicklingError):
    """A pickle referenced a global outside the allow-list (or a stand-in refused its
    arguments)."""


NUMPY_GLOBALS = _numpy_globals()

_LATIN1 = ("latin1", "latin-1", "latin_1", "iso-8859-1", "iso8859-1", "iso8859_1",
           "iso_8859_1", "l1")


def _latin1_encode(text, encoding="latin1", errors="strict"):
    """`_codecs.encode` as pickles of protocol 2 written by Python 3 use it to rebuild bytes
    (`encode(str, "latin1")`): the latin-1 codec alone, which maps text to the same bytes
    and runs nothing; any other codec (a codec name is a module to import) is refused."""
    if not isinstance(text, str) or not isinstance(encoding, str) or \
            encoding.lower() not in _LATIN1 or errors != "strict":
        raise UnpicklingRefused(f"refusing _codecs.encode({type(text).__name__}, {encoding!r}, "
                                f"{errors!r}): only latin1 rebuilds bytes in a pickle")
    return text.encode("latin1")


# bytes in pickles of protocol 2 written by Python 3 (CIFAR-format subsets people make)
BYTES_GLOBALS = {("_codecs", "encode"): _latin1_encode}


class _Restricted(pickle._Unpickler):
    """Python's own unpickler in Python (not the C one), so BUILD can be checked before numpy
    runs a dtype's __setstate__."""
    dispatch = dict(pickle._Unpickler.dispatch)

    def load_build(self):
        if isinstance(self.stack[-2], np.dtype):
            _check_dtype_state(self.stack[-2], self.stack[-1])
        pickle._Unpickler.load_build(self)

    dispatch[pickle.BUILD[0]] = load_build

    def __init__(self, file, allowed, persistent_load, source, **kwargs):
        super().__init__(file, **kwargs)
        self._allowed = {**_SAFE_BUILTINS, **allowed}
        self._source = source
        if persistent_load is not None:
            self.persistent_load = persistent_load

    def find_class(self, module, name):
        key = (module, name)
        if key in self._allowed:
            return self._allowed[key]
        error = UnpicklingRefused(
            f"{self._source}: refusing to unpickle global '{module}.{name}', which this format "
            f"never needs ({len(self._allowed)} globals are allowed: UnpicklingRefused.allowed)"
            "; nothing was loaded. The file may be malicious: a pickle that names other "
            "globals could run arbitrary code")
        error.allowed = sorted(f"{m}.{n}" for m, n in self._allowed)
        raise error


def safe_unpickle(file, allowed=None, persistent_load=None, source=None, **kwargs):
    """Unpickle `file` (path, bytes or binary file) admitting only `allowed` globals.

    `allowed` maps `(module, name)` to the object to use in its place (a real
    function, or a stand-in the caller wrote). `persistent_load(pid)` resolves
    persistent ids (PyTorch storages). `kwargs` go to `pickle.Unpickler`
    (`encoding="bytes"` or `"latin1"` for Python 2 pickles).
    """
    if isinstance(file, (bytes, bytearray)):
        source = source or "<bytes>"
        file = io.BytesIO(file)
    elif isinstance(file, str) or hasattr(file, "__fspath__"):
        source = source or str(file)
        with open(file, "rb") as handle:
            return _load(handle, allowed or {}, persistent_load, source, kwargs)
    source = source or getattr(file, "name", "<stream>")
    return _load(file, allowed or {}, persistent_load, source, kwargs)


# Deeper nesting than any data pickle has: the converters walk results recursively, and a
# crafted pickle nests 100,000 lists deep (or puts a list inside itself) in a few bytes.
MAX_NESTING = 100

# A damaged or crafted pickle makes the unpickler, or the functions it is allowed to call,
# fail in any of these ways: each is "not a readable pickle".
_DAMAGE = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, KeyError,
           IndexError, OverflowError, MemoryError, RecursionError, RuntimeError, SystemError)


def _load(handle, allowed, persistent_load, source, kwargs):
    if not handle.seekable():
        handle = io.BytesIO(handle.read())
    try:
        start = handle.tell()
        _scan(handle)
        handle.seek(start)
        result = _Restricted(handle, allowed, persistent_load, source, **kwargs).load()
        _check_nesting(result)
        return result
    except UnpicklingRefused as error:
        if str(error).startswith(f"{source}: "):
            raise
        raise _named(error, source) from None   # a stand-in's refusal does not know the file
    except _DAMAGE as error:
        what = type(error).__name__ if isinstance(error, (RecursionError, MemoryError)) else ""
        raise UnpicklingError(f"{source}: not a readable pickle ({what}{': ' * bool(what)}"
                              f"{one_line(error, 200)})") from error


def _named(error, source):
    named = UnpicklingRefused(f"{source}: {error}")
    named.allowed = getattr(error, "allowed", None)
    return named


def _scan(handle):
    """Read the pickle's opcodes (pickletools, nothing run) up to its STOP and refuse memo
    indices beyond the opcodes before them: the unpickler grows its memo table to the index
    it is given, so one damaged byte (BINPUT read as LONG_BINPUT) asks for gigabytes."""
    start = handle.tell()
    if not handle.read(1):
        raise pickle.UnpicklingError("nothing to read: an empty file, or one that ends early")
    handle.seek(start)
    for count, (op, arg, _) in enumerate(pickletools.genops(handle)):
        if op.name in ("PUT", "BINPUT", "LONG_BINPUT") and int(arg) > count:
            raise pickle.UnpicklingError(f"memo index {arg} after {count} opcodes")


def _children(node):
    """The containers directly inside `node` (dict keys and values, items, attributes)."""
    if isinstance(node, dict):
        items = [*node.keys(), *node.values()]
    elif isinstance(node, (list, tuple, set, frozenset)):
        items = node
    else:
        attributes = getattr(node, "__dict__", None)   # an object rebuilt by a stand-in
        items = attributes.values() if isinstance(attributes, dict) else ()
    return [item for item in items if _is_container(item)]


def _is_container(value):
    return isinstance(value, (dict, list, tuple, set, frozenset)) or \
        isinstance(getattr(value, "__dict__", None), dict) and not isinstance(value, type)


def _check_nesting(root):
    """Refuse containers nested deeper than MAX_NESTING or containing themselves, without
    recursion (depth-first, each container once: shared ones cost nothing twice)."""
    depth, open_ = {}, set()   # id -> nesting below it (finished); ids on the current path
    stack = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_.discard(key)
            depth[key] = 1 + max((depth[id(c)] for c in _children(node)), default=0)
            if depth[key] > MAX_NESTING:
                raise pickle.UnpicklingError(f"containers nested more than {MAX_NESTING} "
                                             "deep; no data file nests so")
        elif key not in depth:
            if key in open_:
                raise pickle.UnpicklingError(f"a {type(node).__name__} that contains itself")
            open_.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in depth)
