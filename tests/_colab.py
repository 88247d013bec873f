"""A Colab runtime, simulated without the network: what tests/test_colab.py and the book test (through conftest's
`colab_run` fixture) execute the notebooks in.

- The notebook dependencies are preinstalled, as on Colab: a fresh `python -m venv` whose site-packages holds a
  `.pth` file with one plain line, the path of this interpreter's site-packages. A plain line only adds the folder to
  sys.path; the `.pth` files inside that folder are not run, so the editable install of minirlhf there stays
  invisible and `import minirlhf` fails until the setup cell has installed it (`colab_venv` checks this). pip comes
  from that folder too, and installs into the fresh venv.
- `google.colab` is a fake package in the venv, whose `output.enable_custom_widget_manager()` records each call in
  the file named by WIDGET_MANAGER_LOG.
- The repository is a git repository made from this checkout's files as they are now (tracked and untracked, not
  ignored), reached by the setup cell through its one URL setting, MINIRLHF_REPO_URL=file://... . pip runs with
  PIP_NO_INDEX=1 (no index, so nothing is downloaded) and without build isolation (the build uses the setuptools
  already there instead of fetching one); the `PIP_NO_BUILD_ISOLATION=0` spelling is pip's: 0 turns isolation off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL_NAME = "colab-simulation"
WIDGET_MANAGER_LOG = "FAKE_COLAB_WIDGET_MANAGER_LOG"

FAKE_OUTPUT_MODULE = f'''"""The one piece of google.colab the notebooks use, recording its calls (tests/_colab.py)."""
import os


def enable_custom_widget_manager():
    with open(os.environ["{WIDGET_MANAGER_LOG}"], "a") as log:
        log.write("enable_custom_widget_manager\\n")
'''


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout


def repository_copy(target: Path) -> str:
    """A git repository at `target` holding this checkout's files as they are now; returns its file:// URL."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT).split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    git = ["git", "-c", "user.name=colab-simulation", "-c", "user.email=colab@simulation.invalid"]
    run(git + ["init", "-q"], cwd=target)
    run(git + ["add", "-A"], cwd=target)
    run(git + ["commit", "-q", "-m", "the checkout under test"], cwd=target)
    return target.as_uri()


def environment_without_pythonpath() -> dict[str, str]:
    """This process's environment less PYTHONPATH (it points at the checkout under the tests) and PYTHONHOME."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def colab_venv(target: Path) -> Path:
    """A fresh venv at `target` with the preinstalled dependencies and the fake google.colab; returns its python."""
    venv.create(target, with_pip=False)
    python = target / "bin" / "python"
    site_packages = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             cwd=target, env=environment_without_pythonpath()).strip())
    preinstalled = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site_packages / "colab_preinstalled.pth").write_text("\n".join(sorted(preinstalled)) + "\n")
    colab = site_packages / "google" / "colab"
    colab.mkdir(parents=True)
    (colab / "__init__.py").write_text('"""A stand-in for Colab\'s google.colab (tests/_colab.py)."""\n')
    (colab / "output.py").write_text(FAKE_OUTPUT_MODULE)
    probe = subprocess.run([str(python), "-c", "import minirlhf"], cwd=target, capture_output=True, text=True,
                           env=environment_without_pythonpath())
    if probe.returncode == 0 or "No module named 'minirlhf'" not in probe.stderr:
        raise RuntimeError(f"minirlhf is importable in the fresh venv before any install: {probe.stderr}")
    return python


def write_kernelspec(jupyter_path: Path, python: Path) -> None:
    """A kernelspec KERNEL_NAME under `jupyter_path`/kernels that starts a kernel with `python`."""
    spec = jupyter_path / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Colab simulation",
                                                  "language": "python"}))


def kernel_env(repo_url: str, widget_log: Path) -> dict[str, str]:
    """What the setup cell sees besides the fake google.colab: the URL setting and an offline pip."""
    return {
        "MINIRLHF_REPO_URL": repo_url,
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "HF_HUB_OFFLINE": "1",  # the notebooks load the shipped tiny models, never a hub download
        "TQDM_DISABLE": "1",
        WIDGET_MANAGER_LOG: str(widget_log),
    }

