# Every target creates the virtual environment on first use; nothing is installed globally
# except the system packages the integration tests need (see scripts/install-system.sh).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The optional compiled build of apportion.core and the simulator's event loop, metrics and legacy pass
# (docs/simulator.md, "Compiled core"): redone after setup and whenever one of them changes. Without a C compiler it prints one line and
# writes nothing; the pure-Python core is used then (same decisions, slower).
CORE_SRC := $(wildcard src/apportion/core/*.py) $(addprefix src/apportion/sim/,engine.py legacy.py metrics.py)
CORE := src/apportion/_compiled/manifest.json

.PHONY: run test bench core lint typecheck clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

$(CORE): $(STAMP) $(CORE_SRC)
	$(BIN)/python -m apportion.corebuild

core: $(CORE)

run: $(CORE)
	$(BIN)/apportion simulate --scenario seed --policy fairshare --policy legacy --days 30 --out out/seed

# the compiled core is built after install-system.sh, which installs the C compiler. The whole
# suite runs on the compiled build (which must have been built: it is what `make run` uses),
# then the core and simulator suites again on the pure-Python core, which is what users
# without a C compiler run (test_compiled_core.py compares the two builds itself: not twice)
test: $(STAMP)
	PYTHON=$(BIN)/python bash scripts/install-system.sh
	$(MAKE) --no-print-directory core
	$(BIN)/ruff check src tests
	$(BIN)/mypy
	$(BIN)/python -c 'import apportion, apportion.core; assert apportion.core_build() == "compiled", "the compiled core did not load"'
	bash scripts/with-services.sh $(BIN)/pytest
	APPORTION_PURE_CORE=1 $(BIN)/python -c 'import apportion, apportion.core; assert apportion.core_build() == "python"'
	APPORTION_PURE_CORE=1 $(BIN)/pytest tests/core tests/sim --deselect tests/core/test_compiled_core.py

bench: $(CORE)
	$(BIN)/apportion bench

clean:
	rm -rf $(VENV) out src/apportion/_compiled
