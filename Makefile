# Quick start: `make demo`, `make test`. Each sets itself up from a fresh clone:
# a virtual environment in .venv, the package installed (editable) with its native
# extension built, then the run. Re-running reuses the environment; editing the C++
# sources or the build files rebuilds.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tianyuan-installed
NATIVE := $(shell find framework/csrc -name '*.cpp' -o -name '*.h')

# AddressSanitizer: the native kernels' tests on a build instrumented with -fsanitize=address
# (TIANYUAN_SANITIZE, setup.py), installed (not editable: the normal build's in-place
# extension stays) into a venv and a build folder of its own.
ASAN_VENV  := .venv-asan
ASAN_STAMP := $(ASAN_VENV)/.tianyuan-installed
ASAN_TESTS := tests/framework/test_native_geometry.py tests/framework/test_pool.py \
              tests/framework/test_conv.py tests/framework/test_conv_wgrad.py \
              tests/framework/test_depthwise_kernels.py tests/framework/test_bn_native.py \
              tests/quantization/test_quant_gemm.py tests/quantization/test_quant_eltwise.py \
              tests/quantization/test_quant_conv.py tests/quantization/test_quant_conv_amx.py \
              tests/quantization/test_quant_conv_narrow.py \
              tests/quantization/test_quant_conv_nhwc.py \
              tests/quantization/test_quant_channels_last.py tests/quantization/test_fake_quant.py \
              tests/quantization/test_quant_deconv.py

.PHONY: install demo test bench info clean asan-test

install: $(STAMP)

$(STAMP): setup.py pyproject.toml $(NATIVE)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

demo: install
	$(BIN)/python -m tianyuan.trainers.demo

test: install
	$(BIN)/python -m pytest tests

bench: install
	$(BIN)/python bench/bench_ops.py

info: install
	$(BIN)/python -m tianyuan.info

$(ASAN_STAMP): setup.py pyproject.toml $(NATIVE)
	@test -x $(ASAN_VENV)/bin/python || $(PYTHON) -m venv $(ASAN_VENV)
	$(ASAN_VENV)/bin/python -m pip install --quiet --upgrade pip
	TIANYUAN_SANITIZE=address $(ASAN_VENV)/bin/python -m pip install --quiet '.[test]'
	@touch $@

# The runtimes preloaded: python is not instrumented, and libstdc++ must be there when ASan
# starts, or its __cxa_throw interceptor finds nothing and the first C++ exception aborts.
# detect_leaks=0: CPython leaks by design; allocator_may_return_null=1: a refused huge
# allocation is numpy's MemoryError, as without the sanitizer. The peak loops' tests are
# timings of register-only loops: nothing to sanitize, and they flake on a loaded host.
asan-test: $(ASAN_STAMP)
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
	$(ASAN_VENV)/bin/python -m pytest $(ASAN_TESTS) -q -p no:cacheprovider -k "not peak"

clean:
	rm -rf $(VENV) $(ASAN_VENV) build *.egg-info framework/_C*.so
