# Every target creates the virtual environment on first use; nothing is installed globally
# except the system packages the integration tests need (see scripts/install-system.sh).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench lint typecheck clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/apportion simulate --scenario seed --policy fairshare --policy legacy --days 30 --out out/seed

test: $(STAMP)
	bash scripts/install-system.sh
	$(BIN)/ruff check src tests
	$(BIN)/mypy
	bash scripts/with-services.sh $(BIN)/pytest

bench: $(STAMP)
	$(BIN)/apportion bench

clean:
	rm -rf $(VENV) out
