# Two entry points for a fresh machine (Python 3.11): `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: setup demo test plugin clean

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[all,test,hook]'
	touch $(STAMP)

setup: $(STAMP)

plugin:
	$(MAKE) -C nccl-patch

demo: $(STAMP)
	$(VENV)/bin/commwatch demo

# The suite runs on TEST_WORKERS processes (pytest-xdist), a test file each at a time: most of
# its time is spent waiting on real brokers, workers and browsers, so two overlap on two cores.
TEST_WORKERS ?= 2

test: $(STAMP)
	.ci/install-test-tools
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=15 tests

clean:
	rm -rf $(VENV) build *.egg-info
	$(MAKE) -C nccl-patch clean
