"""Loads the native extension and applies TIANYUAN_ISA / thread settings once at import."""
import os

from . import _C

# Each level runs the kernels of those before it, but avxvnni (AVX2 with the VEX vpdpbusd,
# framework/csrc/runtime/cpu.h), which some AVX-512 CPUs lack.
ISA_LEVELS = ("generic", "avx2", "avxvnni", "avx512", "vnni", "amx")


def available_isas():
    """ISA paths this machine can run, lowest first."""
    return [name for name in ISA_LEVELS if _C.isa_runs(name)]


def set_isa(name):
    """Force the kernels' ISA path ('generic', 'avx2', 'avxvnni', 'avx512', 'vnni', 'amx')."""
    if name not in ISA_LEVELS:
        raise ValueError(f"unknown ISA '{name}'; expected one of {', '.join(ISA_LEVELS)}")
    if name not in available_isas():
        raise RuntimeError(f"ISA '{name}' is not available on this machine; available: "
                           f"{', '.join(available_isas())}")
    _C.set_isa(name)


def current_isa():
    return _C.current_isa()


def set_num_threads(n):
    """Threads for the native kernels (OpenMP). Where TIANYUAN_PIN_THREADS=1 and there is one
    per CPU (the default count), the workers are pinned one to a CPU, the calling thread left
    free (framework/csrc/runtime/threads.h)."""
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
_C.pin_workers()
