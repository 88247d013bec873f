"""Issue 21 reproduced: explorer cells in fresh kernels, through plain nbclient and through minirlhf.course.headless.

    python benchmarks/widget_stall.py --kernels 20                 # both clients, 20 fresh kernels each
    python benchmarks/widget_stall.py --kernels 50 --client headless
    python benchmarks/widget_stall.py --kernels 20 --client voila    # Voila pages, plain and re-polling

Each kernel imports the widgets, then runs two explorer cells (the first widget cell of a fresh kernel is where both
stalls were caught). A cell counts as stalled when this process waited more than --stall seconds for it (an explorer
cell takes about a second at most); with plain nbclient a stalled cell ends at the cell timeout (--timeout), when
pyzmq's last look at the socket finds the reply that was there all along. Prints, per client, the kernels run, the
stalls and the slowest cell. Stalls are rare on an idle machine: run it while the machine is busy.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from minirlhf.course.headless import SERVER_OPTION, HeadlessClient

CELLS = ["from minirlhf.course import widgets", "widgets.clip_explorer(eps=0.2)",
         "widgets.kl_estimator_explorer(beta=0.5)"]


def run_kernel(client_class: type[NotebookClient], timeout: float) -> list[float]:
    """Seconds this process waited for each explorer cell, in one fresh kernel."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    client = client_class(nb, timeout=timeout, kernel_name="python3")
    waited = []
    with client.setup_kernel():
        client.execute_cell(nb.cells[0], 0)  # the import is slow on a busy machine, and no widget yet
        for i, cell in enumerate(nb.cells[1:], 1):
            start = time.perf_counter()
            client.execute_cell(cell, i)
            waited.append(time.perf_counter() - start)
    return waited


def voila_pages(repolling: bool, pages: int, timeout: float) -> list[float]:
    """Seconds each of `pages` loads of a Voila page of CELLS took (inf: no page within 10 cell timeouts)."""
    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
        nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, Path(folder) / "explorers.ipynb")
        server = subprocess.Popen(
            [sys.executable, "-m", "voila", "--no-browser", "--Voila.ip=127.0.0.1", f"--Voila.port={port}",
             "--Voila.token=stall", f"--VoilaExecutor.timeout={timeout:g}", *([SERVER_OPTION] if repolling else []),
             folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}/voila/render/explorers.ipynb?token=stall"
            for _ in range(60):  # the server takes a few seconds to listen
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/voila/tree?token=stall", timeout=5).read()
                    break
                except OSError:
                    time.sleep(1)
            else:
                raise RuntimeError(f"Voila did not answer on port {port} within a minute")
            seconds = []
            for _ in range(pages):
                start = time.perf_counter()
                try:
                    urllib.request.urlopen(url, timeout=10 * timeout).read()  # returns once every cell has run
                    seconds.append(time.perf_counter() - start)
                except OSError:
                    seconds.append(float("inf"))
            return seconds
        finally:
            server.terminate()
            server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=20, help="fresh kernels per client")
    parser.add_argument("--client", choices=["both", "nbclient", "headless", "voila"], default="both")
    parser.add_argument("--timeout", type=float, default=60, help="cell timeout, seconds")
    parser.add_argument("--stall", type=float, default=20, help="a cell waited for longer than this is a stall")
    args = parser.parse_args()
    if args.client == "voila":
        for name, repolling in [("voila", False), ("voila + re-polling client", True)]:
            seconds = voila_pages(repolling, args.kernels, args.timeout)
            stalls = sum(s > args.timeout for s in seconds)
            print(f"{name}: {args.kernels} pages, {stalls} stalled (> {args.timeout:g} s), page seconds "
                  + ", ".join(f"{s:.1f}" for s in seconds), flush=True)
        return
    clients = {"nbclient": NotebookClient, "headless": HeadlessClient}
    for name in clients if args.client == "both" else [args.client]:
        stalls, slowest = 0, 0.0
        for k in range(args.kernels):
            waited = run_kernel(clients[name], args.timeout)
            stalls += sum(seconds > args.stall for seconds in waited)
            slowest = max(slowest, *waited)
            print(f"{name}: kernel {k + 1}/{args.kernels}, cells waited " + ", ".join(f"{s:.1f} s" for s in waited),
                  flush=True)
        print(f"{name}: {args.kernels} kernels, {stalls} stalled cells (> {args.stall:g} s), slowest {slowest:.1f} s")


if __name__ == "__main__":
    main()
