# Quick start: `make demo`, `make test`. Each sets itself up from a fresh clone:
# a virtual environment in .venv, the package installed (editable) with its native
# extension built, then the run. Re-running reuses the environment; editing the C++
# sources or the build files rebuilds.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tianyuan-installed
NATIVE := $(wildcard framework/csrc/*.cpp framework/csrc/*.h)

.PHONY: install demo test bench info clean

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

clean:
	rm -rf $(VENV) build *.egg-info framework/_C*.so
