# Two commands for a newcomer:  `make demo` (the main job on the embedded tiny GPT-2) and `make test`.
# Both create .venv on first use and install the pinned requirements into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint notebooks voila model book notebook-times clean

$(STAMP): requirements.txt pyproject.toml setup.py
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
	$(PY) -m pytest -q --durations=25  # the slowest tests, printed: where CI's time goes

notebooks: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

# Voila executes a notebook on its server through nbclient, with a kernel client from the server's kernel manager:
# this one re-polls its sockets, so a lost wake-up costs a second instead of a page stuck for ever (see
# minirlhf/course/headless.py).
voila: $(STAMP)
	$(VENV)/bin/voila --ServerKernelManager.client_class=minirlhf.course.headless.RepollingKernelClient notebooks/

model: $(STAMP)
	$(PY) scripts/build_tiny_model.py
	$(PY) scripts/build_sft_model.py

# The rendered course: every notebook executed once in quick mode into build/executed/ (outputs and widget state
# kept) by the shared headless executor, then Sphinx + myst-nb render those copies and the pages of docs/ into
# build/book/ without executing anything (book/conf.py copies index.md and docs/ in). `make test` writes the same copies (tests/test_colab.py runs them in a simulated Colab), so after it only
# notebooks edited since are executed again.
EXECUTED := build/executed
EXECUTED_NOTEBOOKS := $(patsubst notebooks/%,$(EXECUTED)/%,$(wildcard notebooks/*.ipynb))

$(EXECUTED)/%.ipynb: notebooks/%.ipynb $(STAMP)
	$(PY) -m minirlhf.course.headless $< --quick --out $(EXECUTED)

book: $(EXECUTED_NOTEBOOKS) book/conf.py book/index.md $(wildcard docs/*.md)
	$(PY) -m sphinx -q -b html -c book $(EXECUTED) build/book
	@echo "the course: build/book/index.html"

# Every notebook in full mode (the budgets a student runs), one after the other: the seconds each took.
notebook-times: $(STAMP)
	$(PY) -m minirlhf.course.headless notebooks/*.ipynb --timeout-per-cell 900

clean:
	rm -rf $(VENV) outputs .pytest_cache build
