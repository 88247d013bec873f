"""The core and the course are two packages: nothing in the core (minirlhf/ outside minirlhf/course/) imports the
course, matplotlib or ipywidgets, so `pip install minirlhf` without the [course] extra imports and trains.

Two checks: every import statement of every core module, read with `ast` (imports inside functions count too);
and a subprocess in which importing matplotlib or ipywidgets raises ImportError, where every core module imports
and the CLI trains GRPO for two steps.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "minirlhf"
FORBIDDEN = ("minirlhf.course", "matplotlib", "ipywidgets")
CORE_FILES = sorted(p for p in PACKAGE.rglob("*.py") if "course" not in p.relative_to(PACKAGE).parts)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source: str, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of everything `source` imports: `import a.b`, `from a import b` (as a.b), relative
    imports resolved against `package`, and importlib.import_module / __import__ with a literal name."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.append((node.lineno, node.args[0].value))
    return names


def is_forbidden(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)


def forbidden_imports(path: Path) -> list[str]:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return [f"{path.relative_to(ROOT)}:{line} imports {imported}"
            for line, imported in imported_names(path.read_text(encoding="utf-8"), package) if is_forbidden(imported)]


def test_core_modules_are_found():
    names = {module_name(p) for p in CORE_FILES}
    assert {"minirlhf", "minirlhf.losses", "minirlhf.demo", "minirlhf.trainers.grpo"} <= names
    assert not any(name.startswith("minirlhf.course") for name in names)


@pytest.mark.parametrize("source, name", [
    ("from minirlhf.course import viz", "minirlhf.course.viz"),
    ("from minirlhf import course", "minirlhf.course"),
    ("def f():\n    import matplotlib.pyplot as plt", "matplotlib.pyplot"),
    ("from .course import quiz", "minirlhf.course.quiz"),
    ("from ..course.widgets import clip_explorer", "minirlhf.course.widgets.clip_explorer"),
    ("import importlib\nimportlib.import_module('ipywidgets')", "ipywidgets"),
])
def test_the_import_reader_sees_every_spelling(source, name):
    package = "minirlhf.trainers" if source.startswith("from ..") else "minirlhf"
    found = [imported for _, imported in imported_names(source, package)]
    assert name in found and any(is_forbidden(imported) for imported in found)


def test_no_core_module_imports_the_course_matplotlib_or_ipywidgets():
    problems = [problem for path in CORE_FILES for problem in forbidden_imports(path)]
    assert not problems, "the core must not import the course or its libraries:\n" + "\n".join(problems)


# Run in a fresh interpreter: importing matplotlib or ipywidgets fails as if they were not installed.
WITHOUT_COURSE_LIBRARIES = """
import importlib, runpy, sys

class Uninstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("matplotlib", "ipywidgets"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by test_architecture)", name=name)
        return None

sys.meta_path.insert(0, Uninstalled())
for module in sys.argv[1].split(","):
    importlib.import_module(module)
sys.argv = ["python -m minirlhf", *sys.argv[2:]]
runpy.run_module("minirlhf", run_name="__main__", alter_sys=True)
"""


def run_without_course_libraries(modules: list[str], cli: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", WITHOUT_COURSE_LIBRARIES, ",".join(modules), *cli],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_the_core_imports_and_trains_without_matplotlib_and_ipywidgets(tmp_path):
    modules = [module_name(p) for p in CORE_FILES if p.name != "__main__.py"]
    cli = ["grpo", "--steps", "2", "--prompts-per-step", "2", "--eval-every", "1000", "--progress", "false"]
    done = run_without_course_libraries(modules, cli, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"step": 2' in done.stdout  # the final metrics row: both steps ran
    blocked = run_without_course_libraries(["minirlhf.course.viz"], ["--help"], tmp_path)
    assert blocked.returncode != 0 and "No module named 'matplotlib" in blocked.stderr  # the blocker blocks


def test_the_trainer_lengths_script_counts_every_trainer():
    """scripts/trainer_lengths.py (each train_x's code lines) knows every `train_x` in minirlhf/trainers/,
    and its preamble and loop lie inside the total."""
    found = {node.name.removeprefix("train_") for path in (PACKAGE / "trainers").glob("*.py")
             for node in ast.parse(path.read_text()).body
             if isinstance(node, ast.FunctionDef) and node.name.startswith("train_")}
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "trainer_lengths.py")], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    rows = {name: tuple(map(int, numbers)) for name, *numbers in (line.split() for line in out[1:])}
    assert set(rows) == found
    for name, (total, preamble, loop) in rows.items():
        assert 0 < preamble + loop < total, name
