# trdr: one target per paper artefact. Results go to runs/<name>/ unless WORKDIR is set.
PYTHON ?= python
RUNS ?= runs

.PHONY: help install test landscape-affine landscape-affine-smoke benchmark

help:  ## List the targets.
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-24s %s\n", $$1, $$2}'

install:  ## Install trdr with the test extra (the README's install command).
	$(PYTHON) -m pip install -e ".[test]"

test:  ## Run the test suite (the README's test command).
	$(PYTHON) -m pytest

landscape-affine:  ## Fig. 10(a), 11(a), 12(a): bilevel energy landscape, affine victim (~CPU minutes, see README).
	$(PYTHON) experiments/landscape.py --config=configs/bilevel_affine.py --workdir=$(RUNS)/bilevel_affine

landscape-affine-smoke:  ## The same path at toy size, in seconds.
	$(PYTHON) experiments/landscape.py --config=configs/bilevel_affine.py:smoke --workdir=$(RUNS)/bilevel_affine_smoke --overwrite

benchmark:  ## Vmapped grid vs a loop over initialisations; quasi-Newton vs CG hypergradient.
	$(PYTHON) experiments/benchmark.py
