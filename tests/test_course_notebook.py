"""minirlhf.course.notebook: the set-up call at the top of every notebook."""

from __future__ import annotations

import sys
import types

import torch

from minirlhf.course import notebook
from minirlhf.models import SHIPPED


def test_setup_reads_quick_mode_and_picks_the_device(monkeypatch, capsys):
    expected_device = "cuda" if torch.cuda.is_available() else "cpu"
    monkeypatch.setenv("MINIRLHF_QUICK", "1")
    assert notebook.setup() == (expected_device, True)
    assert capsys.readouterr().out == f"device: {expected_device} | quick mode: True\n"
    monkeypatch.setenv("MINIRLHF_QUICK", "0")
    assert notebook.setup() == (expected_device, False)
    monkeypatch.delenv("MINIRLHF_QUICK")
    assert notebook.setup() == (expected_device, False)


def test_setup_says_nothing_about_the_runtime(monkeypatch, capsys):
    """The book renders notebooks executed in a simulated Colab: what setup prints is the same in and out of Colab."""
    monkeypatch.setenv("MINIRLHF_QUICK", "1")
    notebook.setup()
    outside = capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    notebook.setup()
    assert capsys.readouterr().out == outside


def test_arithmetic_policy_is_the_sft_model_once_built(monkeypatch, tmp_path):
    monkeypatch.setitem(SHIPPED, "tiny-sft", tmp_path)
    assert notebook.arithmetic_policy() == "tiny"
    (tmp_path / "config.json").write_text("{}")
    assert notebook.arithmetic_policy() == "tiny-sft"
