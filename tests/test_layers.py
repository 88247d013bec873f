"""Every import points down: the floors of the house, drawn from the imports of every module of minirlhf.

    core  <  data  <  tasks  <  trainers  <  the command line, the lab   course reads up to tasks, and nothing reads it

and inside the trainers, three levels over the run's plumbing:

    run/ (the run, history, checkpoints, manifest, guard)  <  config  <  the wings (online, preference)  <  methods

A module may import its own floor or a lower one, never a higher one, and no chain of imports may come back to
where it started. Imports inside functions count (a lazy import is still a dependency), read with the import
reader of tests/test_architecture.py. A failure names both files and the line of the import.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_architecture import PACKAGE, ROOT, imported_names, module_name

# module (or package prefix) -> floor. The core: formulas, model loading, log-probs, sampling, and the utilities
# they and everything above share (precision, the multi-process runtime, the tiny GPT-2, GPU presets, CUDA graphs,
# live diagnostics). `minirlhf` is the package's __init__ (it re-exports core functions).
FLOORS = {
    "minirlhf": 0,
    "minirlhf.losses": 0,
    "minirlhf.models": 0,
    "minirlhf.logprobs": 0,
    "minirlhf.sampling": 0,
    "minirlhf.precision": 0,
    "minirlhf.distributed": 0,
    "minirlhf.gpt2": 0,
    "minirlhf.presets": 0,
    "minirlhf.cuda_graphs": 0,
    "minirlhf.diagnostics": 0,
    "minirlhf.checks": 0,  # the argument checks (positive, interval, choice) the losses and the configs share
    "minirlhf.paths": 0,  # absolute paths and the rule that no write reaches a read
    "minirlhf.errors": 0,  # UserError and the environment-flag reader: every floor raises and reads them
    "minirlhf.data": 1,
    "minirlhf.tasks": 2,
    "minirlhf.trainers": 3,
    "minirlhf.cli": 4,
    "minirlhf.__main__": 4,
    "minirlhf.demo": 4,
    "minirlhf.lab": 4,  # the effects of the lab: experiments that run the trainers, read by notebooks and benchmarks
}
FLOOR_NAMES = ["core", "data", "tasks", "trainers", "command line and lab"]
COURSE = "minirlhf.course"  # its own wing: it may import itself and the floors up to COURSE_READS, nothing imports it
# the capstone and the silent-bug runs train on the arithmetic task (its problems, reward and accuracy): the course
# reads the tasks floor, never the trainers (whose loops the student writes) or the command line
COURSE_READS = 2


def floor_of(module: str) -> int | str:
    """The floor of a module: its own entry, else its package's (minirlhf.trainers.dpo -> minirlhf.trainers);
    "course" for the course. A module missing from FLOORS is an error: a new module must be given its floor."""
    if module == COURSE or module.startswith(COURSE + "."):
        return "course"
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in FLOORS and (end == len(parts) or end > 1):
            return FLOORS[".".join(parts[:end])]
    raise KeyError(f"{module} has no floor: add it to FLOORS in tests/test_layers.py")


def import_edges(sources: dict[str, tuple[str, str]]) -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every import of one module of `sources` by another. `sources`: module name ->
    (file name, source text). An imported name resolves to the longest module it starts with
    (minirlhf.tasks.Task -> minirlhf.tasks; minirlhf.trainers.dpo.DPOConfig -> minirlhf.trainers.dpo)."""
    edges = set()
    for module, (path, text) in sources.items():
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        for line, name in imported_names(text, package):
            parts = name.split(".")
            target = next((".".join(parts[:end]) for end in range(len(parts), 0, -1)
                           if ".".join(parts[:end]) in sources), None)
            if target is not None and target != module:
                edges.add((module, target, line))
    return sorted(edges)


def upward_imports(sources: dict[str, tuple[str, str]]) -> list[str]:
    """Every import that points up a floor, into the course from outside it, or out of the course above the
    tasks floor (COURSE_READS)."""
    found = []
    for module, target, line in import_edges(sources):
        here, there = floor_of(module), floor_of(target)
        if here == there:
            continue
        if here == "course":
            wrong = there > COURSE_READS
        else:
            wrong = there == "course" or there > here
        if wrong:
            found.append(f"{sources[module][0]}:{line} imports {sources[target][0]} "
                         f"({_floor_name(here)} may not import {_floor_name(there)})")
    return found


def import_cycles(sources: dict[str, tuple[str, str]]) -> list[str]:
    """Every cycle of imports (one per strongly connected set of modules), each written as its chain of
    file:line imports back to its start."""
    graph: dict[str, dict[str, int]] = {}
    for module, target, line in import_edges(sources):
        graph.setdefault(module, {}).setdefault(target, line)
    cycles, seen = [], set()
    for start in sorted(graph):
        if start in seen:
            continue
        path = _path_back(graph, start)
        if path:
            seen.update(path)
            hops = [f"{sources[a][0]}:{graph[a][b]} imports {sources[b][0]}" for a, b in zip(path, path[1:])]
            cycles.append("cycle: " + ", and ".join(hops))
    return cycles


def _path_back(graph: dict[str, dict[str, int]], start: str) -> list[str] | None:
    """A chain of imports start -> ... -> start (depth first), or None."""
    stack, visited = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, {})):
            if nxt == start:
                return path + [start]
            if nxt not in visited:
                visited.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def _floor_name(floor: int | str) -> str:
    return floor if isinstance(floor, str) else FLOOR_NAMES[floor]


def package_sources() -> dict[str, tuple[str, str]]:
    return {module_name(p): (str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in PACKAGE.rglob("*.py")}


# inside minirlhf.trainers: module (or package prefix) -> level. A method module (every other one) is the top level.
TRAINER_LEVELS = {"minirlhf.trainers.run": 0, "minirlhf.trainers.config": 1, "minirlhf.trainers.online": 2,
                  "minirlhf.trainers.preference": 2}
TRAINER_LEVEL_NAMES = ["the run", "the config base", "a wing", "a method"]
METHOD = 3


def trainer_level(module: str) -> int:
    """The level of a module of minirlhf.trainers: its own entry, else its package's, else a method's."""
    parts = module.split(".")
    for end in range(len(parts), 2, -1):
        if ".".join(parts[:end]) in TRAINER_LEVELS:
            return TRAINER_LEVELS[".".join(parts[:end])]
    return METHOD


def sideways_or_upward_trainer_imports(sources: dict[str, tuple[str, str]]) -> list[str]:
    """Every import inside minirlhf.trainers that does not point to a lower level: a method importing another method,
    a wing importing the other wing, anything importing a level above. The run/ package's modules read each other."""
    found = []
    for module, target, line in import_edges(sources):
        if not (module.startswith("minirlhf.trainers.") and target.startswith("minirlhf.trainers.")):
            continue
        here, there = trainer_level(module), trainer_level(target)
        if there < here or (here == there == 0):
            continue
        found.append(f"{sources[module][0]}:{line} imports {sources[target][0]} ({TRAINER_LEVEL_NAMES[here]} may "
                     f"import only lower levels, not {TRAINER_LEVEL_NAMES[there]})")
    return found


def test_trainers_import_only_lower_levels():
    """A method imports neither another method nor anything above it; a wing neither the other wing nor a method;
    the run's plumbing no wing, no method and not the config base."""
    assert sideways_or_upward_trainer_imports(package_sources()) == []


@pytest.mark.parametrize("importer, source, message", [
    ("minirlhf.trainers.dpo", "from minirlhf.trainers.kto import KTOConfig\n",
     "minirlhf/trainers/dpo.py:1 imports minirlhf/trainers/kto.py (a method may import only lower levels, not a "
     "method)"),
    ("minirlhf.trainers.online", "\nfrom minirlhf.trainers.preference import DPOConfig\n",
     "minirlhf/trainers/online.py:2 imports minirlhf/trainers/preference.py (a wing may import only lower levels, "
     "not a wing)"),
    ("minirlhf.trainers.run.history", "from minirlhf.trainers.online import OnlineConfig\n",
     "minirlhf/trainers/run/history.py:1 imports minirlhf/trainers/online.py (the run may import only lower "
     "levels, not a wing)"),
    ("minirlhf.trainers.run.checkpoint", "from minirlhf.trainers.grpo import GRPOConfig\n",
     "minirlhf/trainers/run/checkpoint.py:1 imports minirlhf/trainers/grpo.py (the run may import only lower "
     "levels, not a method)"),
])
def test_a_trainer_import_across_or_up_the_levels_fails_naming_it(importer, source, message):
    sources = _fake(minirlhf__trainers__dpo="", minirlhf__trainers__kto="", minirlhf__trainers__grpo="",
                    minirlhf__trainers__online="", minirlhf__trainers__preference="",
                    minirlhf__trainers__run__history="from minirlhf.trainers.run.checkpoint import x\n",
                    minirlhf__trainers__run__checkpoint="")
    assert sideways_or_upward_trainer_imports(sources) == []  # inside run/ is fine
    sources[importer] = (sources[importer][0], source)
    assert sideways_or_upward_trainer_imports(sources) == [message]


def test_every_module_has_a_floor():
    for module in package_sources():
        floor_of(module)  # raises for a module missing from FLOORS


def test_every_import_points_down():
    assert upward_imports(package_sources()) == []


def test_no_import_cycles():
    assert import_cycles(package_sources()) == []


def _fake(**modules: str) -> dict[str, tuple[str, str]]:
    """Synthetic modules: name -> source (a package is written with a trailing ".__init__")."""
    sources = {}
    for key, text in modules.items():
        name = key.replace("__", ".")
        if name.endswith("..init"):
            name = name[: -len("..init")]
            sources[name] = (str(Path(*name.split(".")) / "__init__.py"), text)
        else:
            sources[name] = (str(Path(*name.split("."))) + ".py", text)
    return sources


LOWER = {"minirlhf.losses": "import torch\n", "minirlhf.data": "from minirlhf.losses import masked_mean\n"}


@pytest.mark.parametrize("importer, source, message", [
    ("minirlhf.data", "\n\nfrom minirlhf.tasks.sentiment import MAX_NEW_TOKENS\n",
     "minirlhf/data.py:3 imports minirlhf/tasks/sentiment.py (data may not import tasks)"),
    ("minirlhf.tasks.custom", "def f():\n    from ..trainers.config import choice\n",
     "minirlhf/tasks/custom.py:2 imports minirlhf/trainers/config.py (tasks may not import trainers)"),
    ("minirlhf.losses", "import importlib\nimportlib.import_module('minirlhf.course.toy')\n",
     "minirlhf/losses.py:2 imports minirlhf/course/toy.py (core may not import course)"),
    ("minirlhf.course.toy", "from minirlhf.trainers import config\n",
     "minirlhf/course/toy.py:1 imports minirlhf/trainers/config.py (course may not import trainers)"),
])
def test_an_upward_import_fails_naming_both_files_and_the_line(importer, source, message):
    sources = {**_fake(**{m.replace(".", "__"): t for m, t in LOWER.items()}),
               **_fake(minirlhf__tasks__sentiment="", minirlhf__tasks__custom="", minirlhf__trainers__config="",
                       minirlhf__course__toy="")}
    sources[importer] = (sources[importer][0], source)
    assert upward_imports(sources) == [message]
    assert upward_imports({**sources, importer: (sources[importer][0], "")}) == []


def test_a_cycle_fails_naming_every_file_and_line():
    sources = _fake(
        minirlhf__trainers__dpo="import torch\n\ndef f():\n    from minirlhf.trainers.kto import train_kto\n",
        minirlhf__trainers__kto="from minirlhf.trainers.dpo import DPOConfig\n",
        minirlhf__trainers__config="",
    )
    assert import_cycles(sources) == [
        "cycle: minirlhf/trainers/dpo.py:4 imports minirlhf/trainers/kto.py, "
        "and minirlhf/trainers/kto.py:1 imports minirlhf/trainers/dpo.py"
    ]
    three = _fake(minirlhf__a="import minirlhf.b\n", minirlhf__b="import minirlhf.c\n",
                  minirlhf__c="import minirlhf.a\n")
    assert len(import_cycles(three)) == 1 and import_cycles(three)[0].count("imports") == 3
    del sources["minirlhf.trainers.kto"]
    assert import_cycles(sources) == []


def test_a_module_without_a_floor_is_named():
    with pytest.raises(KeyError, match="minirlhf.newthing has no floor"):
        floor_of("minirlhf.newthing")
    assert floor_of("minirlhf.trainers.preference") == 3 and floor_of("minirlhf.course.quiz") == "course"
