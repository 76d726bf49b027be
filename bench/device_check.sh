#!/usr/bin/env bash
# The int8 issue's measurement on a lent machine, in one call that fits a device session
# (15 minutes of device time, about 45 s of it to start a machine, 10 a command):
#   1. the machine: CPU, cores, Python, the ISA paths tianyuan finds, and what an empty
#      parallel region costs on 2 threads and on every core;
#   2. the native extension, built in place with every core;
#   3. the int8 tests and the ISA / build tests, on the machine's real paths (AMX tiles
#      where the OS grants them);
#   4. bench_int8 on 2 threads (the configuration), every layer printed, with the
#      AMX algorithm forced as a second column (int8a) where the OS grants tiles: the data
#      for amx_wins (framework/csrc/int8_amx/int8_amx.cpp), which keeps 1x1 layers on VNNI;
#   5. whole models on 2 threads (ResNet-18, MobileNetV2, ShuffleNetV2): our int8 against
#      PyTorch's and ONNX Runtime's (its own quantization tool), the cross-check of step 4's
#      per-layer totals (bench_int8 times the peers as in a model since 2026-12-05);
#   6. bench_int8 on every core;
#   7. fp32 training steps (ResNet-18, MobileNetV2, batch 8) on every core against PyTorch's:
#      whether they scale there since the backward left numpy's GEMM (2026-12-04).
# The terminal gets each network's totals and targets; the logs keep every layer.
# Each step stops at the budget (BUDGET seconds from the start, default 540); logs and the
# JSON of each bench land in OUT (default device_out/). From the repository root:
#
#     BUDGET=540 OUT=$OUT bash bench/device_check.sh
set -u
export PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-540}
OUT=${OUT:-device_out}
mkdir -p "$OUT"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
step() { echo "== t=$(( $(date +%s) - T0 ))s, $(left)s left: $*"; }
# runs "$@" under the time left, or says it is skipped when under $need seconds remain
budgeted() {
    local need=$1; shift
    if [ "$(left)" -lt "$need" ]; then echo "skipped (under ${need}s left): $*"; return 0; fi
    timeout "$(left)" "$@"
}

step machine
grep -m1 "model name" /proc/cpuinfo
CORES=$(nproc)
echo "cores $CORES; $(python3 --version)"

step build
TIANYUAN_BUILD_JOBS=$CORES budgeted 60 python3 setup.py build_ext --inplace \
    > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
# the package as installed (folders mapped as setup.py maps them), without pip
SITE=$(mktemp -d)
cp -r framework "$SITE/tianyuan"
for d in zoo datasets weights evaluation trainers; do cp -r "$d" "$SITE/tianyuan/$d"; done
export PYTHONPATH=$SITE
python3 -c "import tianyuan as ty
print('ISA paths', ty.available_isas(), '- runs', ty.current_isa())"
AMX=$(python3 -c "import tianyuan as ty; print(int(ty.current_isa() == 'amx'))")
# the floor a small layer's call pays whatever its work (threads.h, region_cost_us)
python3 -c "
import tianyuan as ty, tianyuan._C as C
for n in sorted({2, $CORES}):
    ty.set_num_threads(n)
    print(f'{n} threads: an empty parallel region {C.testing.region_cost_us(2000):.2f} us back to back,',
          f'{C.testing.region_cost_us(2000, 50.0):.2f} us 50 us after the last')"

step tests
XDIST=$(python3 -c "import xdist" 2>/dev/null && echo "-n $(( CORES < 8 ? CORES : 8 ))")
OMP_NUM_THREADS=2 budgeted 60 python3 -m pytest -p no:cacheprovider $XDIST tests/quantization \
    tests/framework/test_isa.py tests/framework/test_native_build.py > "$OUT/tests.log" 2>&1
grep -E "passed|failed|error|^skipped" "$OUT/tests.log" | tail -3

FORCE=()
[ "$AMX" = 1 ] && FORCE=(--algorithm amx)
step "bench_int8, 2 threads"
budgeted 120 python3 bench/bench_int8.py --threads 2 --rounds 2 --layers "${FORCE[@]}" \
    --json "$OUT/int8_t2.json" 2>&1 | grep -v "^ *$" | tee "$OUT/int8_t2.log" | grep -v "^  [^ ]"
step "whole models, 2 threads"
budgeted 60 python3 bench/bench_models.py --models resnet18,mobilenet_v2,shufflenet_v2_x1_0 \
    --batches 1,16 --threads 2 --rounds 1 --train-steps 1 --json "$OUT/models_t2.json" 2>&1 \
    | tee "$OUT/models_t2.log" | tail -9
if [ "$CORES" -gt 2 ]; then
    step "bench_int8, $CORES threads"
    budgeted 90 python3 bench/bench_int8.py --threads "$CORES" --rounds 2 --layers "${FORCE[@]}" \
        --json "$OUT/int8_t$CORES.json" 2>&1 | grep -v "^ *$" | tee "$OUT/int8_t$CORES.log" \
        | grep -v "^  [^ ]"
    step "training steps, $CORES threads"
    budgeted 60 python3 bench/bench_models.py --models resnet18,mobilenet_v2 --batches "" \
        --threads "$CORES" --rounds 2 --profile --json "$OUT/train_t$CORES.json" 2>&1 \
        | tee "$OUT/train_t$CORES.log" | tail -4
fi
step done
