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

test: $(STAMP)
	.ci/install-test-tools
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 tests

clean:
	rm -rf $(VENV) build *.egg-info
	$(MAKE) -C nccl-patch clean
