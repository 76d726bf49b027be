"""The native extension's ISA split (setup.py): code built with AVX-512, AMX or AVX-VNNI flags
may only run after the dispatcher chose that path, so no shared (COMDAT) function, such as
an STL template instantiated in an ISA translation unit, may carry such instructions: the
linker could pick that copy for generic code, which would then die with SIGILL on a CPU
without them (an AVX2-only AMD EPYC, say)."""
import re
import shutil
import subprocess

import pytest

from tianyuan import _C

# AVX-512 and AMX registers, and AVX-VNNI's VEX-encoded vpdpbusd (an AVX2-only CPU lacks it)
WIDE = re.compile(r"%zmm|%k[1-7]\b|%tmm|\{vex\} vpdpbusd")
SHARED = re.compile(r"(^|[\s<])(std|__gnu_cxx|pybind11)::")


def functions_with_wide_registers(path):
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", path],
                         capture_output=True, text=True, check=True).stdout
    found, name = set(), None
    for line in out.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if head:
            name = head.group(1)
        elif name and WIDE.search(line):
            found.add(name)
    return found


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils' objdump")
def test_no_shared_function_carries_avx512_or_amx():
    wide = functions_with_wide_registers(_C.__file__)
    assert any("tianyuan::" in f for f in wide), "expected AVX-512 kernels in the extension"
    shared = sorted(f for f in wide if SHARED.search(f.split("(")[0]))
    assert not shared, f"shared functions with AVX-512/AMX/AVX-VNNI code: {shared[:5]}"
