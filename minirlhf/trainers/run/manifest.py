"""A run folder knows what it is: <out_dir>/run.json, written when the run starts.

    {"run_id": "3f2a9c...", "method": "GRPOConfig", "model": "tiny-sft",
     "data": {"pairs": "my_pairs.jsonl"},                 the config's data fields (what the run learns from)
     "fingerprints": {"pairs": "sha256:..."},             of each data field that names a file
     "by_name_only": {"prompts": "hub dataset ..."},      a hub dataset: checked by its name alone, and why
     "files": ["run.json", "metrics.jsonl", ...],         what this run wrote into out_dir (top-level names)
     "forked_from": null | {"run_id": ..., "checkpoint": ...},
     "rewinds": [{"from_step": 6, "to_step": 2, "moved_to": "checkpoints/abandoned-..."}]}

Every checkpoint's state.json carries the same run_id. A resume checks the checkpoint against the manifest of the
folder it sits in (same run id, same method, same data, the data files unchanged), so a checkpoint copied out of
its run, or a run given other data, is refused before anything is written. `--overwrite` deletes only the files a
manifest lists.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minirlhf.data import PREFERENCE_DATASETS
from minirlhf.errors import CheckpointDamaged, UserError
from minirlhf.tasks.registry import DEFAULT_TASK, absolute_task_options, canonical_task_options, folder_knobs

MANIFEST_FILE = "run.json"  # inside out_dir
TENSORBOARD_FOLDER = "tensorboard"  # inside out_dir: the event files of report_to="tensorboard"
# every name a run may write into its out_dir (and so the only names `files` may list, and --overwrite delete)
RUN_FILES = (MANIFEST_FILE, "metrics.jsonl", "config.json", "model", "reward_model", "value_head.safetensors",
             "checkpoints", TENSORBOARD_FOLDER)
# the config fields that name what a run learns from: the one list (a config has those of its wing)
DATA_FIELDS = ("pairs", "task", "task_option", "prompts", "reward", "reward_weights")


def data_identity(config_dict: dict[str, Any]) -> dict[str, Any]:
    """What a run learns from: the config's data fields (those it has) and their values, with the default task
    spelled out (a config with a task field that names no task and no prompts learns from DEFAULT_TASK) and the
    task's knobs in one spelling (`canonical_task_options`). Two runs learn from the same data exactly when these
    are equal (data files compared by absolute path)."""
    identity = {name: config_dict[name] for name in DATA_FIELDS if name in config_dict}
    if "task" in identity and identity["task"] is None and not identity.get("prompts"):
        identity["task"] = DEFAULT_TASK
    options = canonical_task_options(identity.get("task"), identity.pop("task_option", None))
    if options:  # knobs left at their defaults are no knobs: such a run learns from the task as it comes
        identity["task_option"] = options
    return absolute_data_paths(identity)


def fingerprints(data: dict[str, Any]) -> dict[str, str]:
    """sha256 of every file or folder a data field names (`x.jsonl`, a pairs folder, or the file of
    `path/to/file.py:function`) and of the folders a task's knob names (reward-models' models=F1,F2: one digest of
    them all, keyed task_option[i]); a folder's covers the name and bytes of every file under it."""
    found = {}
    for name, value in data.items():
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            path = _path_of(item, name)
            if path is not None:
                key = name if not isinstance(value, list) else f"{name}[{i}]"
                found[key] = "sha256:" + _digest(path)
    knobs = folder_knobs(data.get("task"))
    for i, option in enumerate(data.get("task_option") or []):
        knob, sep, folders = option.partition("=") if isinstance(option, str) else ("", "", "")
        if sep and knob in knobs:  # a reward model retrained in place would change the reward under a resume
            digests = "".join(_digest(Path(folder)) for folder in folders.split(","))
            found[f"task_option[{i}]"] = "sha256:" + hashlib.sha256(digests.encode()).hexdigest()
    return found


def _digest(path: Path) -> str:
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    digest = hashlib.sha256()
    for file in sorted(f for f in path.rglob("*") if f.is_file()):
        digest.update(str(file.relative_to(path)).encode() + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def hub_datasets(data: dict[str, Any]) -> dict[str, str]:
    """field -> why it is checked by name only, for each data field that names a Hugging Face hub dataset (a
    `prompts` or `pairs` value that is no local file or folder and no shipped name): its rows are not
    fingerprinted, so a new revision pushed to the hub between a run and its resume goes unseen (offline there is
    nothing to compare it with)."""
    return {name: f"hub dataset {value!r}: recorded by name only; its rows are not fingerprinted, so a change on "
                  "the hub since the run started is not detected"
            for name, value in data.items()
            if name in ("prompts", "pairs") and isinstance(value, str) and value.strip()
            and value not in PREFERENCE_DATASETS and not Path(value).expanduser().exists()}


def absolute_data_paths(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with every data field that names a local file or folder (`p.jsonl`, a pairs folder, `rewards.py:f`,
    a task's folder knob `models=F1,F2`) made absolute, so that a run resumed from another working directory reads
    its own data (and compares equal to the same data named relatively), never a folder of the same name where it
    happens to run."""
    def absolute(name: str, item: Any) -> Any:
        path = _path_of(item, name, modules=False)
        if path is None:
            return item
        where, sep, function = item.rpartition(":")
        return f"{path.resolve()}:{function}" if sep and where.endswith(".py") else str(path.resolve())

    made = {name: ([absolute(name, v) for v in value] if isinstance(value, list) else absolute(name, value))
            if name in DATA_FIELDS else value for name, value in values.items()}
    if "task_option" in made:  # a task's knobs that name folders (reward-models: models=F1,F2)
        made["task_option"] = absolute_task_options(made.get("task"), made["task_option"])
    return made


FOLDER_FIELDS = ("prompts", "pairs")  # the data fields that may name a folder (a shipped name is not one)


def _path_of(value: Any, field: str, modules: bool = True) -> Path | None:
    """The file or folder a data value names: a path (a folder for FOLDER_FIELDS only), the file of
    `path.py:function`, or (`modules`) the source file of the module of `package.module:function`, so that an edit
    of it is seen too."""
    if not isinstance(value, str) or not value or field == "task_option":  # its folders: `fingerprints`
        return None
    where, sep, _ = value.rpartition(":")
    candidate = Path(where if sep and where.endswith(".py") else value).expanduser()
    if candidate.is_file():
        return candidate
    if field in FOLDER_FIELDS and value not in PREFERENCE_DATASETS and candidate.is_dir():
        return candidate
    if modules and sep and where.replace(".", "").replace("_", "").isalnum():
        try:
            origin = getattr(importlib.util.find_spec(where), "origin", None)
        except (ImportError, ValueError):  # not importable from here: resolving the task says so
            return None
        return Path(origin) if origin and Path(origin).is_file() else None
    return None


def kind(*types: type) -> tuple[str, Callable[[Any], bool]]:
    """A field of a run's record that holds one of `types`: (what it must hold, in words; the test)."""
    words = " or ".join("None" if t is type(None) else f"a {t.__name__}" for t in types)
    return words, lambda value: isinstance(value, types)


def fields_problem(record: Any, fields: dict[str, tuple[str, Callable[[Any], bool]]],
                   optional: tuple[str, ...] = ()) -> str | None:
    """What is wrong with a record read back from a run's files (the manifest, a checkpoint's state.json and
    trainer_state.pt): not a dict, or a field missing or holding what it must not; None when every field holds what
    it should. `fields`: name -> (what it must hold, in words; the test); an `optional` field may be absent."""
    if not isinstance(record, dict):
        return f"expected a dict of the fields {', '.join(fields)}, got a {type(record).__name__}"
    for field, (expected, ok) in fields.items():
        if field not in record and field not in optional:
            return f"field {field!r} is missing"
        if not ok(record.get(field)):
            return f"field {field!r} must be {expected}, got {_short(record[field])}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...({len(text)} characters)"


def new_manifest(config_dict: dict[str, Any], method: str, forked_from: dict[str, Any] | None = None) -> dict:
    data = data_identity(config_dict)
    return {"run_id": uuid.uuid4().hex[:16], "method": method, "model": config_dict.get("model"), "data": data,
            "fingerprints": fingerprints(data), "by_name_only": hub_datasets(data), "files": [MANIFEST_FILE],
            "forked_from": forked_from,
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime()), "rewinds": []}


MANIFEST_FIELDS = {"run_id": kind(str), "method": kind(str), "data": kind(dict), "fingerprints": kind(dict),
                   "files": kind(list), "rewinds": kind(list)}


def read_manifest(out_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest of the run folder `out_dir`, or None when it has none; a damaged one is a CheckpointDamaged
    naming the file and the field."""
    path = Path(out_dir) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointDamaged(f"run manifest {path} is damaged: it cannot be read "
                                f"({type(err).__name__}: {err})") from None
    problem = fields_problem(manifest, MANIFEST_FIELDS)
    if problem:
        raise CheckpointDamaged(f"run manifest {path} is damaged: {problem}")
    foreign = [name for name in manifest["files"] if name not in RUN_FILES]
    if foreign:  # a tampered list must never make --overwrite delete what no run writes (../.., a user's file)
        raise CheckpointDamaged(f"run manifest {path} is damaged: field 'files' lists {foreign[0]!r:.80}, which no "
                                f"run writes (only {', '.join(RUN_FILES)})")
    return manifest


def write_manifest(out_dir: str | os.PathLike, manifest: dict[str, Any]) -> None:
    path = Path(out_dir) / MANIFEST_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, path)  # never a half-written manifest


def record_files(out_dir: str | os.PathLike | None, *names: str) -> None:
    """Add `names` (entries of out_dir) to the files its run wrote (nothing happens for a folder without a run)."""
    manifest = read_manifest(out_dir) if out_dir is not None else None
    if manifest is not None and not set(names) <= set(manifest["files"]):
        manifest["files"] += [name for name in names if name not in manifest["files"]]
        write_manifest(out_dir, manifest)


def check_same_data(recorded: dict[str, Any], config_dict: dict[str, Any], where: str) -> None:
    """A resumed run learns from what its run learned from: the same `data_identity`, and every data file the run
    fingerprinted unchanged. `recorded`: {"data": ..., "fingerprints": ...} of the run (its manifest's, or the
    checkpoint's config for a run without one); `where` names the run in the error."""
    data, before = data_identity(config_dict), data_identity(recorded["data"])
    if data != before:
        changed = "; ".join(f"{k}: {before.get(k)!r} -> {data.get(k)!r}"
                            for k in sorted(set(data) | set(before)) if data.get(k) != before.get(k))
        raise UserError(f"{where}: the run learns from other data ({changed}); a resume continues on its own data: "
                        "drop --task/--prompts/--reward/--pairs, or start a new run")
    now = fingerprints(data)
    for key, saved in recorded["fingerprints"].items():
        if now.get(key) != saved:
            state = ("is missing" if key not in now
                     else f"changed since the run started ({saved[:19]}... -> {now[key][:19]}...)")
            raise UserError(f"{where}: data file {key}={_lookup(data, key)!r} {state}; resume with the run's own "
                            "data, or start a new run")


def _lookup(data: dict[str, Any], key: str) -> Any:
    name, _, index = key.partition("[")
    return data[name][int(index[:-1])] if index else data.get(name)
