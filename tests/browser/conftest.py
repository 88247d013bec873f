"""Fixtures for the browser tests: a private JupyterLab (and Voila) server, one headless Chromium, a page per test.

Isolation. Each server runs on 127.0.0.1, on a free port, with a fixed token, from this test's interpreter
(`sys.executable -m jupyterlab` / `-m voila`), on a temporary copy of notebooks/ (the originals are never opened), with
its own JUPYTER_CONFIG_DIR, JUPYTER_DATA_DIR, JUPYTER_RUNTIME_DIR, JUPYTERLAB_SETTINGS_DIR, JUPYTERLAB_WORKSPACES_DIR,
IPYTHONDIR and JupyterLab app-settings directory (whose overrides.json turns off news and update checks), and with
MINIRLHF_QUICK=1 and OMP_NUM_THREADS=1. The "python3" kernelspec in the private data directory starts
`sys.executable -m ipykernel_launcher`, so the kernels run in the environment the tests run in.

Clean-up. Every process the suite starts carries the environment variable MINIRLHF_BROWSER_SUITE=<id of this run>:
the servers and their kernels (which jupyter_client starts in sessions of their own, so outside the server's process
group), the Playwright driver and Chromium with its helpers. A server is started in its own process group
(start_new_session=True) and stopped by SIGTERM to the group (the server then shuts its kernels down), a wait, and
SIGKILL to the group; its kernels (its child processes, listed before the SIGTERM) that are still alive then get
SIGTERM and SIGKILL too. An atexit hook does the same for any server still running and ends every process that
carries the mark; and the session-scoped `no_leftover_processes` fixture, set up first and so torn down last, fails
the run if any process with the mark is still alive after all the other teardowns (and ends it). Signals only ever go
to processes that carry this run's mark, or to the groups of the servers this run started.

Tools. Chromium is Debian's (/usr/bin/chromium, or the binary MINIRLHF_CHROMIUM names), driven by Playwright for
Python without `playwright install`. Outside CI a missing Chromium or Playwright skips these tests with the command
that installs it; in CI (CI=true) it is a failure.

Failures. A failing test leaves a screenshot of its page in test-artifacts/screenshots/<test name>.png.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from minirlhf.course.headless import SERVER_OPTION

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
SCREENSHOT_DIR = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = os.environ.get("MINIRLHF_CHROMIUM", "/usr/bin/chromium")  # Debian's; the variable names another
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]
TOKEN = "minirlhf-browser-test-token"
SERVER_START_TIMEOUT = 180  # seconds; the CPU is shared
STOP_TIMEOUT = 20  # seconds between SIGTERM and SIGKILL
DEFAULT_TIMEOUT_MS = 60_000  # Playwright's default for every wait and action
SUITE_MARK = "MINIRLHF_BROWSER_SUITE"
SUITE_ID = uuid.uuid4().hex  # the value of SUITE_MARK in every process this run starts
IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")

# Lab settings for a student's first visit without the pop-ups that are not the notebook's: no "get news?" toast,
# no update check (they would also reach for the network). No autosave either: every test opens the notebook as it
# was copied, without the outputs of an earlier test.
LAB_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
}


# ---------------------------------------------------------------------------------------------------------
# Processes: marked, stopped by group, and checked for leftovers
# ---------------------------------------------------------------------------------------------------------

_started: list[subprocess.Popen] = []  # servers, each the leader of its own process group


def _marked_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **(extra or {}), SUITE_MARK: SUITE_ID}


def _is_marked(pid: int) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()  # empty for zombies
    except OSError:
        return False
    return f"{SUITE_MARK}={SUITE_ID}".encode() in environ.split(b"\0")


def marked_pids() -> list[int]:
    """Processes alive now whose environment carries this run's mark (never this pytest process itself)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    return sorted(int(entry.name) for entry in proc.iterdir()
                  if entry.name.isdigit() and int(entry.name) != os.getpid() and _is_marked(int(entry.name)))


def _describe(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmdline = "?"
    return f"{pid}: {cmdline[:200]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


def _group_members(pgid: int) -> list[int]:
    """Processes alive now in process group `pgid` that carry this run's mark."""
    members = []
    for entry in Path("/proc").glob("[0-9]*/stat") if Path("/proc").is_dir() else []:
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(entry.read_text().rsplit(") ", 1)[1].split()[2]) == pgid and _is_marked(int(entry.parent.name)):
                members.append(int(entry.parent.name))
    return members


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    """Signal the group `process` leads, while the leader is running or marked members of its group are left."""
    if process.poll() is None or _group_members(process.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)


def descendants(pid: int) -> list[int]:
    """Children, grandchildren, ... of `pid` alive now (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat") if Path("/proc").is_dir() else []:
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int(entry.read_text().rsplit(") ", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _terminate(pids: list[int], timeout: float = 5.0) -> None:
    """SIGTERM each process that carries this run's mark, wait up to `timeout` for them to exit, SIGKILL the rest."""
    pids = [pid for pid in pids if _is_marked(pid)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _alive(pid) and _is_marked(pid)]
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _kill_marked(timeout: float = 5.0) -> list[str]:
    """SIGTERM, then SIGKILL, every process still carrying this run's mark; returns what was found."""
    pids = marked_pids()
    found = [_describe(pid) for pid in pids]
    _terminate(pids, timeout)
    return found


def stop_process_group(process: subprocess.Popen, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM the group `process` leads, wait for it, SIGKILL the group; then its kernels if any outlived it.

    Kernels run in sessions of their own (jupyter_client starts them so), so the group signals miss them; the server
    shuts them down on SIGTERM, and whichever is still alive afterwards is ended here.
    """
    children = descendants(process.pid)
    if process.poll() is None:
        _signal_group(process, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout)
    _signal_group(process, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)
    _terminate(children)
    if process in _started:
        _started.remove(process)


@atexit.register
def _cleanup_at_exit() -> None:
    """Last resort (an interrupted run): nothing this run started may outlive it."""
    for process in list(_started):
        stop_process_group(process, timeout=5)
    _kill_marked()


def _interrupt_on_sigterm(signum, frame) -> None:
    # A CI timeout or `kill` sends SIGTERM, which by default ends Python without running teardowns or atexit hooks.
    # As an interrupt, pytest stops the session and tears the fixtures down: the servers and Chromium are stopped.
    raise KeyboardInterrupt(f"signal {signum} received")


@pytest.fixture(scope="session", autouse=True)
def no_leftover_processes():
    """Set up first and torn down last: after every other fixture has stopped its processes, none may be left."""
    previous = signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    yield
    signal.signal(signal.SIGTERM, previous)
    deadline = time.monotonic() + 10  # kernels and Chromium helpers may take a moment to exit
    while marked_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    leftovers = _kill_marked()
    assert not leftovers, "processes started by the browser tests were still alive after teardown:\n" + "\n".join(
        leftovers)


# ---------------------------------------------------------------------------------------------------------
# Tools: Chromium and Playwright (skip outside CI, fail in CI)
# ---------------------------------------------------------------------------------------------------------


def _missing(what: str, install: str) -> None:
    message = f"{what} is missing; install it with `{install}` to run the browser tests (tests/browser)"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: browser tests must run in CI)", pytrace=False)
    pytest.skip(message)


def _pip_install(package: str) -> str:
    """`python -m pip install NAME==VERSION` with the version pinned in requirements.txt."""
    pins = dict(line.split("==", 1) for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.lstrip().startswith("#"))
    return f"{sys.executable} -m pip install {package}" + (f"=={pins[package].split()[0]}" if package in pins else "")


@pytest.fixture(scope="session")
def browser_tools() -> None:
    """Checked before any server starts, so a machine without a browser skips (or, in CI, fails) quickly."""
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"Chromium ({CHROMIUM})", "apt-get install chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("Playwright for Python", _pip_install("playwright"))  # and no `playwright install`: Chromium is apt's


# ---------------------------------------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Server:
    url: str  # http://127.0.0.1:PORT
    token: str
    root: Path  # the temporary copy of notebooks/ it serves
    log: Path
    process: subprocess.Popen

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def api(self, method: str, path: str, timeout: float = 30):
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """End every notebook session (and so its kernel): the next test starts from a fresh kernel."""
        for session in self.api("GET", "/api/sessions"):
            with contextlib.suppress(urllib.error.HTTPError):
                self.api("DELETE", f"/api/sessions/{session['id']}", timeout=60)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def isolated_jupyter_env(base: Path) -> dict[str, str]:
    """Private Jupyter/IPython directories under `base`, a python3 kernelspec for this interpreter, quick mode."""
    dirs = {name: base / name for name in ("config", "data", "runtime", "lab-user-settings", "lab-workspaces",
                                           "lab-app-settings", "ipython")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    (dirs["lab-app-settings"] / "overrides.json").write_text(json.dumps(LAB_OVERRIDES, indent=2))

    from ipykernel.kernelspec import write_kernel_spec

    write_kernel_spec(dirs["data"] / "kernels" / "python3")  # argv[0] = sys.executable, found before any other
    env = _marked_env({
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_DATA_DIR": str(dirs["data"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        "JUPYTERLAB_SETTINGS_DIR": str(dirs["lab-user-settings"]),
        "JUPYTERLAB_WORKSPACES_DIR": str(dirs["lab-workspaces"]),
        "IPYTHONDIR": str(dirs["ipython"]),
        "MINIRLHF_QUICK": "1",
        "OMP_NUM_THREADS": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "PYTHONUNBUFFERED": "1",
    })
    for name in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "MPLBACKEND", "JUPYTER_TOKEN"):
        env.pop(name, None)  # a student's kernel gets matplotlib's inline backend, not CI's Agg
    return env


def copy_notebooks(base: Path) -> Path:
    root = base / "notebooks"
    shutil.copytree(NOTEBOOK_DIR, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return root


def wait_until_serving(server: Server, status_path: str, timeout: float = SERVER_START_TIMEOUT) -> None:
    """Poll `status_path` (with the token) until it answers 200; fail with the server's log if it dies or hangs."""
    url = f"{server.url}{status_path}"
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            pytest.fail(f"server exited with code {server.process.returncode} before answering {url}:\n"
                        f"{server.log_tail()}", pytrace=False)
        try:
            request = urllib.request.Request(url, headers={"Authorization": f"token {server.token}"})
            with urllib.request.urlopen(request, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"server did not answer {url} within {timeout} s:\n{server.log_tail()}", pytrace=False)
        time.sleep(0.5)


def start_server(args: list[str], base: Path, status_path: str) -> Server:
    """Start `sys.executable <args>` (with --port added) in its own process group, isolated under `base`."""
    env = isolated_jupyter_env(base)
    root = copy_notebooks(base)
    port = free_port()
    log = base / "server.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, *args, f"--port={port}"], cwd=root, env=env, stdin=subprocess.DEVNULL,
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )
    _started.append(process)
    server = Server(url=f"http://127.0.0.1:{port}", token=TOKEN, root=root, log=log, process=process)
    try:
        wait_until_serving(server, status_path)
    except BaseException:
        stop_process_group(process)
        raise
    return server


@pytest.fixture(scope="session")
def lab_server(no_leftover_processes, browser_tools, tmp_path_factory) -> Iterator[Server]:
    """JupyterLab on a temporary copy of notebooks/; stopped, with its kernels, at the end of the session."""
    base = tmp_path_factory.mktemp("jupyterlab")
    root = base / "notebooks"
    server = start_server([
        "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",
        "--ServerApp.allow_root=True",
        f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--LabApp.app_settings_dir={base / 'lab-app-settings'}",
    ], base, "/api/status")
    yield server
    stop_process_group(server.process)


@pytest.fixture
def lab(lab_server) -> Iterator[Server]:
    """The session's JupyterLab for one test; its kernels are shut down after the test (after its page closed)."""
    yield lab_server
    lab_server.shutdown_kernels()


@pytest.fixture(scope="session")
def voila_server(no_leftover_processes, browser_tools, tmp_path_factory) -> Iterator[Server]:
    """Voila serving a temporary copy of notebooks/ (pages at /voila/render/<name>.ipynb)."""
    if importlib.util.find_spec("voila") is None:
        _missing("Voila", _pip_install("voila"))
    base = tmp_path_factory.mktemp("voila")
    server = start_server([
        "-m", "voila", "--no-browser", "--Voila.ip=127.0.0.1", f"--Voila.token={TOKEN}",
        "--VoilaConfiguration.show_tracebacks=True",
        SERVER_OPTION, str(base / "notebooks"),
    ], base, "/voila/tree")  # Voila has no /api/status; its tree page needs the token too
    yield server
    stop_process_group(server.process)


# ---------------------------------------------------------------------------------------------------------
# The rendered book (test_book_offline.py)
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def book(request) -> Path:
    """The rendered course. In CI, build/book/ as tests/conftest.py's `book_site` renders it from the simulated-Colab
    run; elsewhere the folder MINIRLHF_BOOK_DIR names, or build/book/ as `make book` or an earlier run left it, and
    the test skips when there is none."""
    if IN_CI:
        return request.getfixturevalue("book_site")
    folder = Path(os.environ.get("MINIRLHF_BOOK_DIR", ROOT / "build" / "book"))
    if not (folder / "index.html").is_file():
        pytest.skip(f"no book in {folder}: build it with `make book` (in CI the tests render it)")
    return folder


@pytest.fixture
def book_page(book):
    """notebook path -> its page in the book; a missing page skips the test (a book built from some of the
    notebooks), and fails it in CI."""
    def page_of(notebook: Path) -> Path:
        page = book / f"{notebook.stem}.html"
        if not page.is_file():
            message = f"{notebook.name} has no page in {book}"
            if IN_CI:
                pytest.fail(message, pytrace=False)
            pytest.skip(message + " (a book built from some of the notebooks)")
        return page
    return page_of


# ---------------------------------------------------------------------------------------------------------
# Browser and pages
# ---------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _marked_os_environ() -> Iterator[None]:
    """Playwright starts its driver (which starts Chromium) with os.environ: mark it for that moment only."""
    os.environ[SUITE_MARK] = SUITE_ID
    try:
        yield
    finally:
        os.environ.pop(SUITE_MARK, None)


@pytest.fixture(scope="session")
def browser(no_leftover_processes, browser_tools):
    """One headless Chromium for the session."""
    from playwright.sync_api import sync_playwright

    with _marked_os_environ():
        playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, env=_marked_env(),
        )
    except Exception:
        playwright.stop()
        raise
    yield chromium
    try:
        chromium.close()
    finally:
        playwright.stop()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (item.rep_setup / rep_call / rep_teardown) for the page fixture."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _screenshot_name(test_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-\[\]]+", "_", test_name) + ".png"


@pytest.fixture
def page(browser, request):
    """A fresh browser context and page for each test; a screenshot when the test failed."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = context.new_page()
    console_errors: list[str] = []
    page.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: console_errors.append(f"uncaught: {error}"))
    yield page
    report = getattr(request.node, "rep_call", None)
    try:
        if report is not None and report.failed:
            SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
            path = SCREENSHOT_DIR / _screenshot_name(request.node.name)
            page.screenshot(path=str(path))
            print(f"\nscreenshot of the failing page: {path}")
            if console_errors:
                print("browser console errors:\n  " + "\n  ".join(console_errors[-20:]))
    finally:
        context.close()
