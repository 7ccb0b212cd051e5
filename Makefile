# Set-up and checks. A fresh clone needs only `make book` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | cksum | cut -d' ' -f1)
LAB_STAMP := $(VENV)/.lab-installed-$(shell cat requirements-lab.lock | cksum | cut -d' ' -f1)
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
UV := uv==0.13.9
# uv (pinned, from PyPI) installs a lock in seconds where pip takes most of a minute. The venv is
# made without pip (ensurepip's copy took 6 s of a fresh `make test`): the interpreter's own pip
# puts uv in it (`pip --python`, pip >= 22.3), else ensurepip gives the venv a pip that does
INSTALL_UV := bash -o pipefail -c '( { $(PYTHON) -m pip --python $(BIN)/python install -q --disable-pip-version-check $(UV) 2>/dev/null; } || { $(BIN)/python -m ensurepip --default-pip >/dev/null && $(BIN)/python -m pip install -q --disable-pip-version-check $(UV); } ) 2>&1 | { grep -v "^WARNING: Location" || true; }'
# pytest keeps its assertion-rewritten test modules only where Python may write bytecode: with a
# shell's PYTHONDONTWRITEBYTECODE=1 every worker rewrote every test module on every run (8.2 s of
# collection against 3.3 s read back). The cache lies in tests/**/__pycache__, which git ignores.
WRITE_PYC := PYTHONDONTWRITEBYTECODE=
# the fallback fonts' sources (npm, SIL OFL 1.1) and the subsetter, pinned
FONT_PACKAGES := @expo-google-fonts/noto-sans-kr@0.4.3 @expo-google-fonts/noto-emoji@0.4.7
FONT_TOOLS := fonttools==4.68.0 brotli==1.2.1

.PHONY: venv book test test-fast lint format bench bench-quick clean lab fonts

venv: $(STAMP)

# The virtual environment, built from the pinned lock file; rebuilt when the lock changes.
$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kvoffload needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
	@echo "installing pinned dependencies into $(VENV) (first run only)"
	@$(INSTALL_UV)
	@$(BIN)/uv pip install -q --python $(BIN)/python -r requirements.lock
	@$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	@# compile the packages and the (editable, so uncompiled) sources once here, so that a command
	@# started with PYTHONDONTWRITEBYTECODE=1 does not compile them every time; the packages' own
	@# test suites are left out (nothing imports them): 10 s here, against 13 s for uv's
	@# --compile-bytecode of everything
	@$(BIN)/python -m compileall -q -j0 -x '/(tests?|testing)/' src/kvoffload \
		"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null
	@rm -f $(VENV)/.installed-*
	@touch $@

# Execute every chapter for every hardware profile (cached by content), build _build/html offline.
book: $(STAMP)
	$(BIN)/kvoffload book $(if $(JOBS),--jobs $(JOBS),) $(if $(PROFILES),--profiles $(PROFILES),)

# The whole suite on three workers (pytest-xdist): on two cores, the browser and subprocess tests
# leave one idle much of the time. The session's book is built once, in the background from the
# start, while the other tests run (tests/conftest.py); the tests that read it run last.
test: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/lint-imports --no-cache --no-logo
	$(WRITE_PYC) $(BIN)/python -m pytest -n $(or $(TEST_WORKERS),3)

# The inputs and the cost model alone: seconds, for the edit-test loop.
test-fast: $(STAMP)
	$(WRITE_PYC) $(BIN)/python -m pytest -q tests/inputs tests/model

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/lint-imports --no-cache --no-logo

format: $(STAMP)
	$(BIN)/ruff format src tests
	$(BIN)/ruff check --fix src tests

# Speed, measured (never asserted): `name: value` lines. bench-quick needs no book build.
bench: bench-quick
	$(BIN)/python -m tests.benchmarks.bench_book $(if $(PROFILES),--profiles $(PROFILES),)

bench-quick: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_cli
	$(BIN)/python -m tests.benchmarks.bench_decode
	$(BIN)/python -m tests.benchmarks.bench_flexgen

# JupyterLab (pinned in requirements-lab.lock, kept out of `make book` and `make test`).
$(LAB_STAMP): $(STAMP) requirements-lab.lock
	@echo "installing pinned JupyterLab into $(VENV) (first run only)"
	@test -x $(BIN)/uv || $(INSTALL_UV)
	@$(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode -r requirements-lab.lock
	@mkdir -p $(dir $(LAB_SETTINGS))
	@echo '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}}' > $(LAB_SETTINGS)
	@rm -f $(VENV)/.lab-installed-*
	@touch $@

# The chapters as notebooks in JupyterLab: notebooks/*.md open as notebooks (Jupytext, paired with
# a git-ignored .ipynb by notebooks/jupytext.toml), the kernel is the venv's, kvoffload importable.
lab: $(LAB_STAMP)
	cd notebooks && ../$(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root,) $(LAB_ARGS)

# Re-subset the fallback fonts in book/_static/fonts/ to the Hangul and marks the sources use
# (after adding Korean text; tests/test_fonts.py says when). Needs npm; fetches pinned packages.
fonts: $(STAMP)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	(cd "$$tmp" && npm pack --silent $(FONT_PACKAGES) >/dev/null && \
	  for f in *.tgz; do mkdir -p "$${f%.tgz}" && tar xzf "$$f" -C "$${f%.tgz}"; done) && \
	$(BIN)/uv pip install -q --python $(BIN)/python --target "$$tmp/py" $(FONT_TOOLS) && \
	PYTHONPATH="$$tmp/py" $(BIN)/python -c 'import sys; from pathlib import Path; \
	from kvoffload.bookbuild.assets import subset_fonts; \
	print(subset_fonts(Path("."), Path(sys.argv[1]), Path(sys.argv[2])))' \
	  "$$tmp"/*noto-sans-kr*/package/400Regular/NotoSansKR_400Regular.ttf \
	  "$$tmp"/*noto-emoji*/package/400Regular/NotoEmoji_400Regular.ttf

clean:
	rm -rf $(VENV) _build book/generated .pytest_cache .hypothesis
