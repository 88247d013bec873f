"""minirlhf.course: what the notebooks teach with, kept apart from the library.

`toy` (exact small-distribution maths), `viz` (figures), `widgets` (slider explorers, live plots), `quiz`
(questions and numeric exercises), `exercises` (implement-it exercises checked against minirlhf.losses, with their
worked solutions in `solutions`) and `memory` (which models a run holds), and `headless` (runs
notebooks top to bottom without a browser, for tests, the book and batch runs). The course imports the core
(`minirlhf`); the core never imports the course, so `pip install minirlhf` trains without matplotlib or
ipywidgets, and `pip install "minirlhf[course]"` brings them.
"""
