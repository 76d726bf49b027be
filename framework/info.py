"""`python -m tianyuan.info`: version, build flags, CPU features, ISA paths, threads."""
import platform

import numpy as np

from . import __version__, _C, _native


def collect():
    return {
        "tianyuan": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "compiler": _C.compiler,
        "build_flags": _C.build_flags,
        "cpu_features": {k: bool(v) for k, v in _C.cpu_features().items()},
        "isa_available": _native.available_isas(),
        "isa_best": _C.best_isa(),
        "isa_chosen": _native.current_isa(),
        "threads": _native.get_num_threads(),
        "workers_pinned": _C.pinned_workers(),
    }


def main():
    info = collect()
    width = max(len(k) for k in info)
    for key, value in info.items():
        if isinstance(value, dict):
            value = " ".join(name for name, on in value.items() if on) or "(none)"
        elif isinstance(value, list):
            value = ", ".join(value)
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
