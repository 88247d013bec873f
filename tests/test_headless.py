"""minirlhf.course.headless: the re-polling channel, the executor and its CLI, and a stress run of every explorer cell.

The stall it fixes: a reply already queued in the client's socket, and a poll that sleeps on because the
socket's wake-up was consumed elsewhere. `test_repoll_reads_a_message_whose_wakeup_was_lost` stages exactly that.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import json
import sys
import time
from pathlib import Path
from queue import Empty

import nbformat
import pytest
import zmq
import zmq.asyncio
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.session import Session

from minirlhf.course import headless

EXPLORER_CELLS = [  # every explorer call in notebooks/, and the live training plot
    "widgets.optimal_policy_explorer(beta=0.5)",
    "widgets.kl_estimator_explorer(beta=0.5)",
    "widgets.clip_explorer(eps=0.2)",
    "widgets.gae_explorer(gamma=1.0, lam=0.95)",
    "widgets.group_size_explorer(G=8, p_correct=0.3)",
    "widgets.dpo_explorer(beta=0.1)",
    "widgets.ratio_zoo_explorer(eps=0.2, eps_high=0.28, dual_clip_c=3.0, tau=1.0)",
    "live = widgets.LiveHistoryPlot(['loss'], every=1); display(live)\n"
    "for step in range(3): live({'step': step, 'loss': 1.0 / (step + 1)})",
]
STRESS_KERNELS = 3  # fresh kernels: both stalls caught in the act hit the first widget cell of a new kernel
# each kernel runs every explorer cell this many times. Measured on 2 cores at load average ~1.5: a fresh kernel
# and the import 8.5 s, an explorer cell 0.49 s on average (0.24-0.88 s), so 3 x (8.5 + 9 x 7 x 0.49) ~ 2 minutes.
STRESS_ROUNDS = 9
STALL_SECONDS = 30  # an explorer cell takes about a second at most; a stalled one waits until its cell timeout



def _run(coroutine):
    """asyncio.run in a thread of its own: another test's event loop (the browser tests' Playwright) may still be
    running in this one, where asyncio.run refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()

async def _wait_after_lost_wakeup(channel_class: type[AsyncZMQSocketChannel], timeout: float | None) -> str:
    """A reply arrives while `get_msg` polls; something else reads the socket's events (the wake-up is gone)."""
    context = zmq.asyncio.Context()
    receiver = context.socket(zmq.PULL)
    receiver.bind("inproc://reply")
    sender = zmq.Context.shadow(context.underlying).socket(zmq.PUSH)
    sender.connect("inproc://reply")
    session = Session()
    channel = channel_class(receiver, session, asyncio.get_running_loop())
    try:
        waiting = asyncio.ensure_future(channel.get_msg(timeout=timeout))
        await asyncio.sleep(0.2)  # the poll is registered on the socket's file descriptor
        session.send(sender, "execute_reply", {"status": "ok"})
        time.sleep(0.2)  # the reply is queued; the event loop has not looked yet
        zmq.Socket.shadow(receiver.underlying).get(zmq.EVENTS)  # consumes the wake-up
        try:
            return (await asyncio.wait_for(waiting, 5))["msg_type"]
        except asyncio.TimeoutError:
            return "still waiting after 5 s"
    finally:
        sender.close(linger=0)
        receiver.close(linger=0)
        context.term()


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["no-timeout", "cell-timeout"])
def test_repoll_reads_a_message_whose_wakeup_was_lost(timeout):
    plain = _run(_wait_after_lost_wakeup(AsyncZMQSocketChannel, timeout))
    assert plain == "still waiting after 5 s", (
        "jupyter_client's own channel now reads a message whose wake-up was lost: the lost wake-up stall may be fixed "
        f"upstream (got {plain!r}); re-check before relying on it")
    recovered = headless.RepollingChannel.recovered
    assert _run(_wait_after_lost_wakeup(headless.RepollingChannel, timeout)) == "execute_reply"
    assert headless.RepollingChannel.recovered == recovered + 1  # the CLI's "lost wake-ups recovered" count


def test_repoll_still_times_out():
    async def wait_for_nothing() -> None:
        context = zmq.asyncio.Context()
        receiver = context.socket(zmq.PULL)
        receiver.bind("inproc://nothing")
        try:
            await headless.RepollingChannel(receiver, Session(), asyncio.get_running_loop()).get_msg(timeout=0.3)
        finally:
            receiver.close(linger=0)
            context.term()

    with pytest.raises(Empty):
        _run(wait_for_nothing())


def _notebook(*sources: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])


def test_execute_notebook_sets_mode_folder_and_environment(tmp_path):
    nb = _notebook("import os, sys",
                   "print(os.environ['MINIRLHF_QUICK'], os.environ['EXTRA'], os.getcwd(), sys.prefix)")
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("text"))
    nb, seconds = headless.execute_notebook(nb, quick=True, cwd=tmp_path, extra_env={"EXTRA": "yes"})
    quick, extra, cwd, prefix = nb.cells[2].outputs[0]["text"].split()
    assert (quick, extra, cwd) == ("1", "yes", str(tmp_path))
    assert prefix == sys.prefix, "the kernel is not the interpreter running the tests"
    assert len(seconds) == 3 and seconds[1] == 0.0


def test_cli_writes_executed_copies_and_fails_on_an_error(tmp_path, capsys):
    good, bad, out = tmp_path / "good.ipynb", tmp_path / "bad.ipynb", tmp_path / "out"
    nbformat.write(_notebook("import os; print(os.environ['MINIRLHF_QUICK'])"), good)
    nbformat.write(_notebook("1 / 0"), bad)
    assert headless.main([str(good), str(bad), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "good.ipynb: " in printed and "(full)" in printed
    assert "bad.ipynb: FAILED" in printed and "ZeroDivisionError" in printed
    assert [path.name for path in out.iterdir()] == ["good.ipynb"]
    assert nbformat.read(out / "good.ipynb", as_version=4).cells[0].outputs[0]["text"] == "0\n"


@pytest.mark.slow
def test_explorer_cells_never_stall():
    """Every explorer cell, STRESS_ROUNDS times in each of STRESS_KERNELS fresh kernels, through the headless client."""
    cells = ["from minirlhf.course import widgets"] + EXPLORER_CELLS * STRESS_ROUNDS
    slowest = []
    for _ in range(STRESS_KERNELS):
        nb, seconds = headless.execute_notebook(_notebook(*cells), quick=True, timeout_per_cell=120)
        widget_cells = [i for i, cell in enumerate(nb.cells) if "application/vnd.jupyter.widget-view+json" in str(
            cell.outputs)]
        assert len(widget_cells) == len(EXPLORER_CELLS) * STRESS_ROUNDS, "an explorer cell showed no widget"
        slowest.append(max(seconds[1:]))
    print(f"{STRESS_KERNELS} kernels x {len(cells) - 1} explorer cells: slowest cell per kernel "
          + ", ".join(f"{s:.2f} s" for s in slowest))
    assert max(slowest) < STALL_SECONDS, f"an explorer cell waited {max(slowest):.0f} s for its reply: a stall"


def test_gpu_check_notebooks_mode_prints_per_notebook_times(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks"))  # as when run as a script: _flops
    spec = importlib.util.spec_from_file_location("gpu_check", Path(__file__).parents[1] / "benchmarks/gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    nbformat.write(_notebook("x = 1", "print(x)"), tmp_path / "a.ipynb")
    monkeypatch.setattr(gpu_check, "NOTEBOOK_DIR", tmp_path)
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--notebooks", "--tiny", "--out", str(tmp_path / "times.json")])
    gpu_check.main()
    assert "| a.ipynb | " in capsys.readouterr().out
    times = json.loads((tmp_path / "times.json").read_text())
    assert times["mode"] == "quick" and [row["notebook"] for row in times["notebooks"]] == ["a.ipynb"]


def test_make_voila_passes_the_re_polling_client():
    """The Makefile cannot import the option: it spells it out, and must spell it as the executor does."""
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    voila_recipe = makefile.split("\nvoila:", 1)[1].split("\n\n", 1)[0]
    assert headless.SERVER_OPTION in voila_recipe
