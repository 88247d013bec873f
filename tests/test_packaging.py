"""The package as a user installs it: a wheel built from this repository, in a fresh virtual environment, used from a
directory that is not the repository, must find its shipped models and preference pairs and run the demo.

The environment is built the way the Makefile builds one: `python -m venv`, torch pinned first, then the wheel with
its dependencies, all through pip's own cache (the `make` install has filled it, so nothing large is downloaded
again). PYTHONPATH is dropped, so that the package can only come from the wheel; the child checks that it did.
Run alone with `pytest -m slow tests/test_packaging.py` (a few minutes on 2 cores, most of it installing torch).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # building a wheel and an sdist, and a fresh environment with torch

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"  # the pin of requirements.txt and the Makefile: the CPU build, never a CUDA download
SHIPPED_FILES = sorted(p.relative_to(ROOT / "data").as_posix() for p in (ROOT / "data").rglob("*") if p.is_file())

# Run by the fresh environment's interpreter from a temporary directory.
USE_THE_PACKAGE = """
import sys
from pathlib import Path

import minirlhf
from minirlhf.data import load_preference_pairs
from minirlhf.models import load_model

where = Path(minirlhf.__file__).resolve()
assert where.is_relative_to(Path(sys.prefix).resolve()), f"minirlhf imported from {where}, not from the wheel"
for name in ("tiny", "tiny-sft", "tiny-lab"):
    model, tokenizer = load_model(name, device="cpu")
    print(name, sum(p.numel() for p in model.parameters()), "parameters")
pairs = load_preference_pairs("sentiment")
print(len(pairs), "sentiment pairs")
"""


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None, with_stderr: bool = False) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
    return result.stdout + result.stderr if with_stderr else result.stdout


@pytest.fixture(scope="module")
def dist_dir(tmp_path_factory) -> Path:
    """The wheel and the sdist built from the repository, and what the builds printed (build.log beside them):
    pip -v passes on the build backend's output, which pip hides otherwise."""
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # a user's build byte-compiles
    wheel = run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-v", "-w", str(out)], out, env, True)
    build_sdist = f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})"
    sdist = run([sys.executable, "-c", build_sdist], ROOT, env, True)
    # the editable wheel `make` installs (pip install -e .), built the same way into its own folder
    build_editable = f"from setuptools import build_meta; build_meta.build_editable({str(out / 'editable')!r})"
    editable = run([sys.executable, "-c", build_editable], ROOT, env, True)
    (out / "build.log").write_text(wheel + sdist + editable)
    return out


def test_the_build_prints_no_warning(dist_dir):
    """setuptools wraps every warning of its own in a "!!" banner under a line naming its class (e.g.
    SetuptoolsDeprecationWarning for a licence written as a TOML table, or for a data folder that "would be
    ignored", BuildBackendWarning "Editable installation." for an editable install through an import hook): a clean
    build of the wheel, the sdist and the editable wheel prints none of them."""
    lines = (dist_dir / "build.log").read_text().splitlines()
    warned = [line for line in lines if "Warning" in line or "deprecat" in line.lower() or line.strip() == "!!"]
    assert not warned, "building minirlhf warns:\n" + "\n".join(warned)


def test_wheel_and_sdist_carry_the_shipped_data(dist_dir):
    (wheel,) = dist_dir.glob("minirlhf-*.whl")
    (sdist,) = dist_dir.glob("minirlhf-*.tar.gz")
    in_wheel = {name.removeprefix("minirlhf/shipped/") for name in zipfile.ZipFile(wheel).namelist()}
    root = sdist.name.removesuffix(".tar.gz")
    in_sdist = {name.removeprefix(f"{root}/data/") for name in tarfile.open(sdist).getnames()}
    assert SHIPPED_FILES, "data/ holds no files"
    assert not set(SHIPPED_FILES) - in_wheel, f"{wheel.name} lacks {sorted(set(SHIPPED_FILES) - in_wheel)}"
    assert not set(SHIPPED_FILES) - in_sdist, f"{sdist.name} lacks {sorted(set(SHIPPED_FILES) - in_sdist)}"


def test_installed_wheel_works_outside_the_repository(dist_dir, tmp_path):
    (wheel,) = dist_dir.glob("minirlhf-*.whl")
    # Without PYTHONPATH, which points at this checkout under the tests: there pip would take the checkout's
    # minirlhf.egg-info for an installed minirlhf and skip the wheel.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=env)
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "--quiet", TORCH], cwd=tmp_path, env=env)
    run([python, "-m", "pip", "install", "--quiet", str(wheel)], cwd=tmp_path, env=env)

    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env |= {"HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}  # offline: the shipped files, never a hub lookup
    printed = run([python, "-c", USE_THE_PACKAGE], cwd=workdir, env=env)
    assert "sentiment pairs" in printed, printed
    demo = run([python, "-m", "minirlhf", "demo", "--quick"], cwd=workdir, env=env)
    assert (workdir / "outputs" / "demo" / "summary.md").is_file(), demo
