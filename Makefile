# Two entry points (see README): `make demo` runs the main job, `make test` runs
# lint and the test suite. Both create .venv and install what they need.
# `make check` is the fast tier for while you work: lint, then `pytest --fast`
# (every test not marked slow, corpus, browser, dask, fresh or torch; see
# tests/conftest.py), in under 30 s.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch; pinned so that pip does not pull CUDA packages.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test lint check bench bench-quick peers samples screenshots chromium clean

$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[train,dev]"
	# Bytecode for the editable install too: where PYTHONDONTWRITEBYTECODE is set, Python
	# would otherwise compile the package's 200-odd modules in every process (0.28 s).
	$(BIN)/python -m compileall -q nsysmap instrument
	touch $@

demo: $(BIN)/.installed
	$(BIN)/nsysmap run --output out/demo examples/train_gpt2.py -- --steps 4
	$(BIN)/nsysmap report out/demo --html --quiet

# The browser tests open the HTML reports in Debian's Chromium: installed here when
# missing and we are root; without it they skip and say why.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	      echo "chromium could not be installed: the browser tests will skip"; \
	  else echo "chromium is not installed and we are not root: the browser tests will skip"; fi

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: $(BIN)/.installed chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

check: lint
	$(BIN)/python -m pytest -q --fast -n auto

# The benchmark's optional engines (connectorx, orjson): the `bench` extra.
$(BIN)/.bench-installed: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	touch $@

# The peers run beside nsysmap when installed (nsys-ai, HolisticTraceAnalysis;
# bench/peers.txt) live in their own environment so that their pins never touch
# .venv. When they cannot be installed (offline, say), `make bench` goes on and
# skips them with a message.
PEERS ?= .venv-peers
$(PEERS)/.installed: bench/peers.txt bench/peer_child.py
	@rm -rf $(PEERS); \
	if $(PYTHON) -m venv $(PEERS) && $(PEERS)/bin/python -m pip install --quiet --upgrade pip \
	  && $(PEERS)/bin/python -m pip install --quiet -r bench/peers.txt; then \
	  $(PEERS)/bin/python bench/peer_child.py duckdb-sqlite >/dev/null || \
	    echo "DuckDB's SQLite extension could not be installed: nsys-ai will use its slower path"; \
	  touch $@; \
	else rm -rf $(PEERS); echo "the peers (bench/peers.txt) could not be installed: make bench skips them"; fi

peers: $(PEERS)/.installed

# After the sizes, the export shaped like the large one users report (2.2 M kernels,
# 7.1 M runtime calls, 15.9 M NVTX ranges on 5 threads at scale 1); USER_SHAPED=
# leaves it out. Where one run spends its time, per stage and function:
# `python -m bench.profile EXPORT OUTDIR` (bench/README.md).
# Then one-process exports (no split by process: whole, or in time windows chosen for
# the memory budget); ONE_PROCESS= leaves them out.
USER_SHAPED ?= 1
ONE_PROCESS ?= 1e6,3e7
bench: $(BIN)/.bench-installed peers
	$(BIN)/python -m bench --peers-venv $(PEERS) --one-process "$(ONE_PROCESS)" \
	  --user-shaped "$(USER_SHAPED)" $(BENCH_ARGS)

# What a change costs, in about 20 s (under a minute): 10^5 kernels, the floor and
# nsysmap (read whole and by process), medians of 3 runs, nsysmap's stage times; the
# results go to out/bench-quick.json, leaving bench/results as `make bench` wrote them.
bench-quick: $(BIN)/.installed
	$(BIN)/python -m bench --sizes 1e5 --runs 3 --engines floor,nsysmap \
	  --out out/bench-quick.json $(BENCH_ARGS)

samples: $(BIN)/.installed
	$(BIN)/python -m sample_reports.build --golden

# docs/images/report.png: the training sample's HTML report, rendered by nsysmap's own code.
screenshots: $(BIN)/.installed chromium
	rm -rf out/screenshots
	$(BIN)/nsysmap attribute sample_reports/gpt2_tiny_train.sqlite -o out/screenshots/train --quiet
	$(BIN)/nsysmap report out/screenshots/train --html --quiet
	$(BIN)/python -m devtools.browser out/screenshots/train/report.html \
	  docs/images/report.png --width 1200 --max-height 2600

clean:
	rm -rf $(VENV) $(PEERS) out .pytest_cache .ruff_cache .mypy_cache .hypothesis
