"""Sphinx + myst-nb configuration of the rendered course (`make book`).

The source folder is build/executed/: the notebooks as one quick-mode run left them, with their outputs and the state
of their widgets, plus index.md copied from this folder. That run is the simulated Colab of the tests
(tests/test_colab.py, which CI runs) or, for notebooks it has not executed, `make book`'s headless executor. Nothing
is executed here: the book renders what that one run produced.
"""

project = "minirlhf"
author = "the minirlhf authors"
copyright = "minirlhf authors, MIT licence"

extensions = ["myst_nb"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

nb_execution_mode = "off"  # render the stored outputs; never run a notebook during the build
nb_output_stderr = "show"  # warnings and progress lines are part of what the student sees
myst_enable_extensions = ["dollarmath", "amsmath"]  # the notebooks' $...$ and $$...$$ equations
# The sliders: each explorer is an ipywidgets box whose Output widget holds the initial figure. The executed notebook
# keeps the widget state in its metadata (nbclient stores it), and myst-nb loads the ipywidgets HTML manager
# (nb_ipywidgets_js, its default) that draws the boxes from that state: the sliders show their plot, as it stood at
# the end of the run (the initial one, unless a later cell moved the slider from code).

html_theme = "alabaster"
html_title = "minirlhf: the course"
html_theme_options = {"page_width": "1200px", "sidebar_width": "260px"}
