"""What every notebook does once minirlhf is installed: quick mode, device, inline figures, the arithmetic policy.

    from minirlhf.course import notebook

    DEVICE, QUICK = notebook.setup()       # prints: device: cpu | quick mode: False
    POLICY = notebook.arithmetic_policy()  # "tiny-sft" once it has been built, else "tiny"

Quick mode (MINIRLHF_QUICK=1, set by the test suite) makes every training cell use a tiny budget.
"""

from __future__ import annotations

import torch
from IPython import get_ipython

from minirlhf.errors import env_flag
from minirlhf.models import SHIPPED

QUICK_ENV = "MINIRLHF_QUICK"


def setup() -> tuple[str, bool]:
    """(device, quick): the GPU when there is one, and whether the test suite asked for tiny budgets.

    In a notebook kernel it also switches figures to inline output (`%matplotlib inline`). It prints the two and
    nothing about the runtime: a student knows whether the notebook is open in Colab, and the book renders copies
    executed in a simulated Colab (tests/_colab.py), where a "Colab: True" would be untrue."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    quick = env_flag(QUICK_ENV)  # "1" or "0"/unset; any other value is an error naming the variable
    shell = get_ipython()
    if shell is not None:
        shell.run_line_magic("matplotlib", "inline")
    print(f"device: {device} | quick mode: {quick}")
    return device, quick


def arithmetic_policy() -> str:
    """The arithmetic reference policy: the shipped SFT model when it has been built, else the base model."""
    return "tiny-sft" if (SHIPPED["tiny-sft"] / "config.json").exists() else "tiny"
