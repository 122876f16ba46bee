# Two entry points (see README): `make demo` runs the main job, `make test` runs
# lint and the test suite. Both create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch; pinned so that pip does not pull CUDA packages.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test lint bench samples clean

$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[train,dev]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/nsysmap run --output out/demo examples/train_gpt2.py -- --steps 4

test: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

bench: $(BIN)/.installed
	$(BIN)/python -m bench $(BENCH_ARGS)

samples: $(BIN)/.installed
	$(BIN)/python -m sample_reports.build --golden

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache .hypothesis
