# Set-up and checks. A fresh clone needs only `make book` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: venv book test lint format bench clean

venv: $(STAMP)

# The virtual environment, built from the pinned lock file; rebuilt when the lock changes.
$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kvoffload needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing pinned dependencies into $(VENV) (first run only)"
	@bash -o pipefail -c '$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.lock 2>&1 | { grep -v "^WARNING: Location" || true; }'
	@bash -o pipefail -c '$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -e . 2>&1 | { grep -v "^WARNING: Location" || true; }'
	@rm -f $(VENV)/.installed-*
	@touch $@

# Execute every chapter for every hardware profile (cached by content), build _build/html offline.
book: $(STAMP)
	$(BIN)/kvoffload book $(if $(JOBS),--jobs $(JOBS),) $(if $(PROFILES),--profiles $(PROFILES),)

test: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/lint-imports --no-cache --no-logo

format: $(STAMP)
	$(BIN)/ruff format src tests
	$(BIN)/ruff check --fix src tests

bench: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_cli
	$(BIN)/python -m tests.benchmarks.bench_book
	$(BIN)/python -m tests.benchmarks.bench_decode

clean:
	rm -rf $(VENV) _build book/generated .pytest_cache .hypothesis
