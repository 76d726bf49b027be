"""No ISA translation unit of the extension runs code when the library loads: a static
initializer in an `_avx512` / `_vnni` / `_vbmi` / `_amx` unit is compiled with that ISA's
flags, so a CPU without it would die of SIGILL at `import tianyuan`, before any dispatch
(int8_channels_last_vbmi.cpp's and int8_tiles_amx.cpp's tables had been such code). Their
tables are constexpr. Reads the symbol table with binutils' nm (skipped without it)."""
import re
import shutil
import subprocess

import pytest

from tianyuan import _C

ISA_UNIT = re.compile(r"_GLOBAL__sub_I_(\S+_(avx2|avxvnni|avx512|vnni|vbmi|amx)\.cpp)$")


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_no_isa_unit_has_a_static_initializer():
    symbols = subprocess.run(["nm", _C.__file__], capture_output=True, text=True,
                             check=True).stdout.split("\n")
    assert any("_GLOBAL__sub_I_" in s for s in symbols)      # the generic units' are listed
    units = [m.group(1) for s in symbols if (m := ISA_UNIT.search(s.strip()))]
    assert not units, f"ISA units run code at load (make their tables constexpr): {units}"
