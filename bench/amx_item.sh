#!/bin/sh
# bench/amx_item.cpp against the kernel objects that `python3 setup.py build_ext` leaves in
# build/ (each compiled with its ISA's flags; the Python bindings left out), then run:
#   sh bench/amx_item.sh [C HW N ...]
set -eu
cd "$(dirname "$0")/.."
python3 setup.py build_ext --inplace > /dev/null 2>&1 || { echo "amx_item: build failed"; exit 1; }
TEMP=$(python3 -c "import sys, sysconfig as s
print('build/temp.%s-%s' % (s.get_platform(), sys.implementation.cache_tag))")
OBJS=$(find "$TEMP"/framework/csrc -name '*.o' | grep -v '/bind')
OUT=${TMPDIR:-/tmp}/tianyuan-amx-item
g++ -std=c++17 -O2 -fopenmp -Iframework/csrc bench/amx_item.cpp $OBJS -o "$OUT"
exec "$OUT" "$@"
