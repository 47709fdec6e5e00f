# Two commands do all set-up: `make demo` (main job) and `make test` (whole suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= demo-out

.PHONY: demo test venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,plots,data,service,browser,redis]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/skpubsub demo --out $(DEMO_DIR)

test: $(STAMP)
	sh tests/system_setup.sh  # chromium, chromium-driver, redis-server: one apt-get update when any is missing
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache .hypothesis
	find src tests -name '__pycache__' -prune -exec rm -rf {} +  # bytecode and every numba-* kernel cache
