"""Loads the native extension and applies TIANYUAN_ISA / thread settings once at import."""
import os

from . import _C

ISA_LEVELS = ("generic", "avx2", "avx512", "vnni", "amx")


def available_isas():
    """ISA paths this machine can run, lowest first."""
    best = ISA_LEVELS.index(_C.best_isa())
    return list(ISA_LEVELS[: best + 1])


def set_isa(name):
    """Force the kernels' ISA path ('generic', 'avx2', 'avx512', 'vnni', 'amx')."""
    if name not in ISA_LEVELS:
        raise ValueError(f"unknown ISA '{name}'; expected one of {', '.join(ISA_LEVELS)}")
    if name not in available_isas():
        raise RuntimeError(f"ISA '{name}' is not available on this machine; available: "
                           f"{', '.join(available_isas())}")
    _C.set_isa(name)


def current_isa():
    return _C.current_isa()


def set_num_threads(n):
    """Threads for the native kernels (OpenMP)."""
    _C.set_num_threads(int(n))


def get_num_threads():
    return _C.get_num_threads()


def _apply_environment():
    requested = os.environ.get("TIANYUAN_ISA")
    if requested:
        try:
            set_isa(requested.strip().lower())
        except (ValueError, RuntimeError) as error:
            raise RuntimeError(f"TIANYUAN_ISA={requested}: {error}") from None


_apply_environment()
