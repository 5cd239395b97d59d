# Two commands on a fresh machine: `make run` (the default replay) and `make test` (the suite).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU build of torch from local disk on machines without a GPU; a bare `torch` pulls a CUDA build.
TORCH ?= torch==2.13.0

.PHONY: run test venv venv-backend accel accel-strict bench notebooks clean lint

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Stamps: the (editable) installs run again only when pyproject.toml changes (~8 s saved a run).
$(VENV)/.installed: pyproject.toml examples/spf_policy/pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps -e examples/spf_policy  # the example plugin (docs/writing-a-policy.md)
	touch $@

$(VENV)/.installed-backend: $(VENV)/.installed
	$(BIN)/pip install -q '$(TORCH)' 'triton==3.7.1'
	$(BIN)/pip install -q -e '.[dev,backend]'
	touch $@

venv: $(VENV)/.installed

venv-backend: $(VENV)/.installed-backend

# The compiled core (mypyc; schedsim.accel): rebuilt only when a compiled module's source changed
# (~1 min). `run` goes on in pure Python if no C compiler is found; `test` requires it.
# The manifest is make's stamp: the build's own check (sha256 of every source, ~0.7 s) runs only
# when a source is newer, and the manifest is touched once the build is current.
ACCEL_SRC := $(wildcard sim/*.py sim/*/*.py policies/*.py policies/*/*.py)
ACCEL_MANIFEST := sim/_compiled/manifest.json

accel: $(ACCEL_MANIFEST)

$(ACCEL_MANIFEST): $(ACCEL_SRC) $(VENV)/.installed
	SCHEDSIM_PURE=1 $(BIN)/python -m schedsim.accel.build --if-stale --soft
	@SCHEDSIM_PURE=1 $(BIN)/python -m schedsim.accel.build --check >/dev/null 2>&1 && touch $@ || true

accel-strict: venv
	SCHEDSIM_PURE=1 $(BIN)/python -m schedsim.accel.build --if-stale

run: accel
	$(BIN)/schedsim run --out runs/default

# The whole suite on the compiled core, then the tests marked pure_python again in pure Python.
test: venv-backend accel-strict
	SCHEDSIM_REQUIRE_ACCEL=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests
	SCHEDSIM_PURE=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m pure_python tests

# Style, formatting, types and the import layers (.ci/run runs it before the tests). mypy and
# import-linter read the installed layout, which .ci/mypy stages in build/layout.
LINTED := policies sim traces backend tests bench notebooks examples
lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	PY=$(BIN)/python .ci/mypy
	cd build/layout && PYTHONPATH=. ../../$(BIN)/lint-imports ../../pyproject.toml

bench: accel
	$(BIN)/python bench/bench_default.py

notebooks: venv
	$(BIN)/python -m schedsim.outputs.notebooks notebooks runs/notebooks

clean:
	rm -rf $(VENV) runs build *.egg-info sim/_compiled
