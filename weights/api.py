"""Load weights by manifest name or from a file; convert and save them as safetensors.

>>> state = load_weights("resnet50.imagenet_torchvision")        # download, verify, convert
>>> state = load_weights("~/resnet50-0676ba61.pth", arch="resnet50")   # a local file
>>> model.load_state_dict(state)

This is what `zoo.resnet50(weights="resnet50.imagenet_torchvision")` and
`pretrained=True` (`default_entry(arch)`) call.
"""
import os

import numpy as np

from .download import ChecksumError, cache_path, check_digest, fetch, sha256_file
from .manifest import get_entry, list_entries
from .megengine_pkl import load_megengine
from .name_maps import (check_against_spec, convert_state_dict, infer_num_classes,
                        unwrap_checkpoint)
from .qtensor import QTensor, flatten_qtensors
from .torch_pth import load_pth

FORMATS = ("torchvision", "megengine", "safetensors")


def entry_path(entry):
    """Where `entry`'s file is cached (whether or not it is there yet)."""
    return cache_path(entry.cache_relpath)


def is_cached(entry):
    return os.path.exists(entry_path(entry))


def download(name_or_entry, progress=True, **kwargs):
    """Fetch a manifest entry into the cache (verified); return its path."""
    entry = get_entry(name_or_entry) if isinstance(name_or_entry, str) else name_or_entry
    return fetch(entry.urls, entry_path(entry), entry.sha256, entry.sha256_kind, progress,
                 **kwargs)


def verify(name_or_entry):
    """Re-hash a cached file. Returns (status, sha256): ok | mismatch | unchecked | missing."""
    entry = get_entry(name_or_entry) if isinstance(name_or_entry, str) else name_or_entry
    path = entry_path(entry)
    if not os.path.exists(path):
        return "missing", None
    if entry.sha256_kind == "none":
        return "unchecked", sha256_file(path)
    try:
        return "ok", check_digest(path, entry.sha256, entry.sha256_kind)
    except ChecksumError:
        return "mismatch", sha256_file(path)


def detect_format(path):
    """torchvision (.pth/.pt zip or legacy pickle), megengine (.pkl) or safetensors."""
    lower = str(path).lower()
    if lower.endswith(".safetensors"):
        return "safetensors"
    if lower.endswith((".pkl", ".mge")):
        return "megengine"
    with open(path, "rb") as handle:
        head = handle.read(2)
    return "torchvision" if head in (b"PK", b"\x80\x02") else "megengine"


def read_file(path, format=None):
    """The raw contents of a weight file as numpy containers (no renaming)."""
    format = format or detect_format(path)
    if format == "torchvision":
        return load_pth(path)
    if format == "megengine":
        return load_megengine(path)
    if format == "safetensors":
        return _load_safetensors(path)
    raise ValueError(f"read_file: format must be one of {FORMATS}, got {format!r}")


def load_weights(name_or_path, arch=None, format=None, num_classes=None, strict=True,
                 progress=True, spec=None):
    """`{name: numpy array}` in our names for `arch`, from a manifest name or a file.

    A manifest name brings its own arch, format and converter. For a file give `arch`
    (its name map; without it names are kept as they are) and optionally `format` (else
    detected). `spec`: the target model's (`spec_of(model)`), to check every name and
    shape here (archs in `known_archs()` are checked against their own). Quantized files
    come back flattened (`name`, `name.scale`, `name.zero_point`, `name.axis`; see
    qtensor.py).
    """
    path, converter = _resolve(name_or_path, arch, format, progress)
    if isinstance(path, tuple):
        path, arch, format = path
    format = format or detect_format(path)
    state = unwrap_checkpoint(read_file(path, format))
    if not isinstance(state, dict):
        raise ValueError(f"{path}: holds a {type(state).__name__}, not a state dict")
    if _has_quantized(state) or converter == "quantized" or arch is None:
        return dict(flatten_qtensors(state))
    source = converter or ("ours" if format == "safetensors" else format)
    return dict(convert_state_dict(state, arch, source, num_classes, strict, spec))


def _resolve(name_or_path, arch, format, progress):
    """(path or (path, arch, format), converter) for a manifest name or a file path."""
    text = os.fspath(name_or_path)
    if os.path.exists(os.path.expanduser(text)):
        return os.path.expanduser(text), None
    try:
        entry = get_entry(text)
    except KeyError as error:
        raise FileNotFoundError(f"load_weights: {text!r} is neither a file nor a manifest "
                                f"name ({error.args[0]})") from None
    if arch is not None and arch != entry.arch:
        raise ValueError(f"load_weights: {entry.name} is for {entry.arch}, not {arch}")
    if entry.converter is None:
        raise NotImplementedError(f"{entry.name}: no converter yet ({entry.notes}); "
                                  f"`tianyuan weights download {entry.name}` fetches the file")
    path = download(entry, progress=progress)
    return (path, entry.arch, entry.format), entry.converter


def _has_quantized(state):
    return any(isinstance(v, QTensor) or (isinstance(v, tuple) and
                                          any(isinstance(x, QTensor) for x in v))
               for v in state.values())


def _load_safetensors(path):
    import tianyuan
    loaded = tianyuan.load(path)
    return loaded if isinstance(loaded, dict) else {"_": loaded}


def save_weights(state, path, metadata=None):
    """Write `{name: array}` as safetensors with `tianyuan.save` (atomic)."""
    import tianyuan
    # np.ascontiguousarray would turn 0-d arrays (num_batches_tracked) into shape (1,)
    arrays = {k: np.asarray(v, order="C") for k, v in flatten_qtensors(state).items()}
    tianyuan.save(arrays, path)
    return path


def import_file(src, out, arch, format=None, num_classes=None, spec_for=None):
    """Convert a foreign file to our names and save it as safetensors; return the dict.
    `spec_for(arch, num_classes)` gives the spec to check it against first (the zoo's
    model's; None: arch's own if `known_archs()` has it, else unchecked until loaded)."""
    state = load_weights(src, arch=arch, format=format, num_classes=num_classes)
    spec = None if spec_for is None else spec_for(arch, num_classes or infer_num_classes(state))
    if spec is not None:
        check_against_spec(state, spec, f"{src} -> {arch}")
    save_weights(state, out)
    return state


def cached_entries():
    return [e for e in list_entries() if is_cached(e)]
