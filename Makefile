# Two commands for a newcomer:  `make demo` (the main job on the embedded tiny GPT-2) and `make test`.
# Both create .venv on first use and install the pinned requirements into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint notebooks model clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0        # pinned first: never a multi-GB CUDA build
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m minirlhf demo
	$(PY) -m minirlhf.course demo-figures outputs/demo

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q

notebooks: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

model: $(STAMP)
	$(PY) scripts/build_tiny_model.py
	$(PY) scripts/build_sft_model.py

clean:
	rm -rf $(VENV) outputs .pytest_cache
