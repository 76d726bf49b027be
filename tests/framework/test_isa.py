"""The ISA paths (framework/_native.py, framework/csrc/runtime/cpu.h): each level runs the kernels of
those below it, but avxvnni (AVX2 with the VEX vpdpbusd), which some AVX-512 CPUs lack, so
what a machine runs follows its CPU features, not only its best level."""
import pytest

import tianyuan as ty
from tianyuan import _C
from tianyuan._native import ISA_LEVELS


def test_available_isas_follow_the_cpu():
    isas = ty.available_isas()
    assert isas[0] == "generic" and isas == [name for name in ISA_LEVELS if name in isas]
    assert isas[-1] == _C.best_isa()
    features = _C.cpu_features()
    assert ("avxvnni" in isas) == bool(features["avx_vnni"])
    assert ("avx2" in isas) == bool(features["avx2"] and features["fma"])
    for lower, upper in [("avx2", "avxvnni"), ("avx2", "avx512"), ("avx512", "vnni"),
                         ("vnni", "amx")]:
        assert upper not in isas or lower in isas


def test_set_isa_refuses_what_the_cpu_lacks():
    with pytest.raises(ValueError, match="unknown ISA 'sse9'"):
        ty.set_isa("sse9")
    missing = [name for name in ISA_LEVELS if name not in ty.available_isas()]
    if not missing:
        pytest.skip("this machine runs every ISA path")
    original = ty.current_isa()
    for name in missing:
        with pytest.raises(RuntimeError, match=f"ISA '{name}' is not available"):
            ty.set_isa(name)
        with pytest.raises(RuntimeError, match=f"ISA '{name}' is not supported"):
            _C.set_isa(name)
        assert not _C.isa_runs(name) and ty.current_isa() == original


def test_fma_peak_measures_or_says_why_not():
    from tianyuan.ops.conv import fma_peak
    with pytest.raises(ValueError, match="steps"):
        fma_peak(steps=0)
    original = ty.current_isa()
    try:
        ty.set_isa("generic")
        with pytest.raises(RuntimeError, match="FMA"):
            fma_peak(steps=1000, repeat=1)
        for isa in ty.available_isas():
            if isa == "generic":
                continue
            ty.set_isa(isa)
            lanes = 16 if ISA_LEVELS.index(isa) >= ISA_LEVELS.index("avx512") else 8
            # 12 FMAs of `lanes` multiply-adds per step on each thread: between a 0.1 GHz core
            # issuing one a cycle and a 6.5 GHz one issuing 2 (a miscounted or optimised-away
            # loop lands outside)
            per_core = fma_peak(steps=200_000, repeat=3) / ty.get_num_threads()
            assert 0.1e9 * lanes * 2 < per_core < 6.5e9 * 2 * lanes * 2, isa
    finally:
        ty.set_isa(original)


def test_probes_live_in_the_testing_submodule():
    """Register peaks, scratch canaries and the AMX store's helpers are for the tests and
    benchmarks: `_C.testing`, not the module's own functions."""
    for name in ("fma_peak", "int8_vnni_peak", "int8_avx2_peak", "int8_avxvnni_peak",
                 "int8_amx_peak", "int8_amx_window", "int8_amx_offsets", "int8_amx_verified",
                 "int8_broken_scratch", "int8_scribble_scratch", "region_cost_us"):
        assert hasattr(_C.testing, name) and not hasattr(_C, name), name
