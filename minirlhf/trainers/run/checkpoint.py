"""Checkpoints that resume a run exactly where it stopped, written so that a crash never leaves half of one.

    <out_dir>/checkpoints/step-000040/
        model.safetensors     the weights of every trained module (PPO adds value_head.safetensors)
        trainer_state.pt      optimizer state, every random-number state, the loop's own state
        state.json            step, method, config, the metrics history up to this step, and the sha256 of
                              every other file (a file swapped in from elsewhere is refused on resume)

A resumed run is the SAME run: it continues at step k with the same weights, the same Adam moments and the same
random numbers (python's `random`, the trainer's own `random.Random` for prompts and batch order, numpy, torch's
CPU and CUDA generators for dropout, and the sampling `torch.Generator`). On CPU an interrupted and resumed run
logs the same metrics and ends with bit-identical weights.

Safety: a checkpoint is written into a temporary folder next to its final place and renamed into place only
when complete (`os.replace`), so a folder named step-N is always whole. Loading unpickles nothing: weights come
from safetensors, the rest from `torch.load(weights_only=True)` and JSON. A checkpoint damaged later (a truncated
file, invalid JSON) is refused before anything is loaded from it, one holding inf/NaN weights before the run
starts, each with the previous intact checkpoint named; one with inf/NaN weights is never written (`guard`).

One folder, one run (README, "Checkpoints and resuming"): a run holds its out_dir for as long as it trains
(`hold_run_folder`, a lock file naming its process; let go when the run ends, also by an exception), and knows
what it is (`manifest`: run.json, whose run id every checkpoint carries). A resumed run writes only into the folder
of its checkpoint, and only when that folder's manifest is the checkpoint's run (else `fork_to` starts a new run
folder from it); resuming an older checkpoint moves the newer ones aside (never deletes them); a fresh run refuses
a folder that holds another run's results, and `overwrite=True` deletes only what that run's manifest lists.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import re
import shutil
import socket
import tempfile
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_model
from torch import nn

from minirlhf.errors import CheckpointDamaged, UserError
from minirlhf.trainers.run.guard import NonFiniteError, check_weights, nonfinite_parameters
from minirlhf.trainers.run.manifest import (
    DATA_FIELDS,
    MANIFEST_FILE,
    RUN_FILES,
    fields_problem,
    kind,
    new_manifest,
    read_manifest,
    record_files,
    write_manifest,
)

CHECKPOINTS_DIR = "checkpoints"  # inside out_dir
STATE_FILE = "state.json"
TRAINER_STATE_FILE = "trainer_state.pt"
LOCK_FILE = ".run.lock"  # inside out_dir while a run holds it: {"pid", "host", "started"} of the holder
RESULTS = tuple(name for name in RUN_FILES if name != MANIFEST_FILE)  # what a run leaves in out_dir
# Fields that may change between the interrupted and the resumed run without changing what it computes
# (gradient accumulation: the same update, to rounding; report_to: where the metrics are also written).
RUN_CONTROL_FIELDS = {"steps", "out_dir", "resume", "fork_to", "save_every", "keep_checkpoints", "progress",
                      "eval_every", "device", "debug", "gradient_checkpointing", "compile", "decoder", "overwrite",
                      "gradient_accumulation_steps", "report_to"}

RandomSource = random.Random | torch.Generator


class Checkpointer:
    """Saves everything a trainer's loop depends on every `config.save_every` steps; restores it for `config.resume`.

        checkpointer = Checkpointer(config, optimizer, {"prompts": rng, "sampling": generator}, runtime.scaler,
                                    model=model)
        start, logged, loop_state = checkpointer.resume()      # (0, [], {}) for a fresh run
        history = make_history(config, callbacks, logged)
        for step in range(start, config.steps):
            ...
            history.log(step, **metrics)
            checkpointer.save_if_due(step + 1, history)        # loop state as keywords, e.g. ema=ema

    `modules` (keywords) are saved as `<name>.safetensors`; `rngs` are the run's own generators, saved with the
    global ones; `scaler` is fp16's loss scaler (its current scale is part of the run's state), None otherwise.
    """

    def __init__(self, config: Any, optimizer: torch.optim.Optimizer, rngs: dict[str, RandomSource],
                 scaler: torch.amp.GradScaler | None = None, frozen: dict[str, Any] | None = None,
                 **modules: nn.Module):
        self.config = config
        # the models the run reads but does not train (p_ref, a reward model), by their weights: a scorer with
        # no state_dict (a reward model may be anything with .score) has none to fingerprint
        self.frozen = {name: m for name, m in (frozen or {}).items() if hasattr(m, "state_dict")}
        self.optimizer = optimizer
        self.rngs = rngs
        self.scaler = scaler
        self.modules = modules
        self.run_id: str | None = None  # the manifest's, once `resume` has started or resumed the run

    def resume(self) -> tuple[int, list[dict], dict[str, Any]]:
        """(first step to run, metric rows so far, loop state): from `config.resume`, or a fresh start.

        With an out_dir, the run first takes hold of it (`hold_run_folder`) and checks that it is its own: a resumed
        run's out_dir must be the folder of its checkpoint, whose manifest names the checkpoint's run (or, with
        `config.fork_to`, a fresh folder for a new run forked from it); a fresh run's must not hold another run's
        results (unless `config.overwrite`, which deletes the files its manifest lists)."""
        out_dir = self.config.out_dir
        if out_dir is not None:
            hold_run_folder(out_dir)
        try:
            if self.config.resume is not None:
                check_same_models(recorded_data(self.config.resume).get("models"), self.frozen,
                                  f"--resume {self.config.resume}")
                return self._resume(find_checkpoint(self.config.resume))
            if out_dir is not None:
                _check_fresh_folder(Path(out_dir), self.config.overwrite)
                self._start_manifest()
            return 0, [], {}
        except BaseException:
            if out_dir is not None:
                release_run_folder(out_dir)
            raise

    def _resume(self, checkpoint: Path) -> tuple[int, list[dict], dict[str, Any]]:
        state = read_state(checkpoint, list(self.modules))
        own, method = run_folder(checkpoint), type(self.config).__name__
        if state["step"] > self.config.steps:
            raise UserError(f"checkpoint {checkpoint} is at step {state['step']}, but steps={self.config.steps}: a "
                            f"resumed run cannot do fewer steps than it has done; pass --steps {state['step']} or "
                            f"more, or resume an earlier checkpoint")
        if self.config.out_dir is None:  # a process that writes nothing (of several, any but the main one, which
            return self.restore(checkpoint, state)  # checks the run folders, forks or rewinds them)
        if self.config.fork_to is not None:
            _check_fresh_folder(Path(self.config.out_dir), self.config.overwrite)
            restored = self.restore(checkpoint, state)
            self._start_manifest({"run_id": state.get("run_id"), "checkpoint": str(checkpoint.resolve())})
            return restored
        restored = self.restore(checkpoint, state)  # the checkpoint's own checks (method, config, weights) first
        manifest = _manifest_of_own_run(checkpoint, own, state.get("run_id"))  # then the run's: before any write
        if manifest["method"] != method:
            raise UserError(f"{own / MANIFEST_FILE}: the run is a {manifest['method']} run; this run is a {method}")
        _move_newer_aside(checkpoint, state["step"], own, manifest)
        self.run_id = manifest["run_id"]
        return restored

    def _start_manifest(self, forked_from: dict[str, Any] | None = None) -> None:
        manifest = new_manifest(self.config.to_dict(), type(self.config).__name__, forked_from)
        manifest["models"] = {name: weights_digest(module) for name, module in self.frozen.items()}
        write_manifest(self.config.out_dir, manifest)
        self.run_id = manifest["run_id"]

    def save_if_due(self, step: int, history: list[dict], **loop_state: Any) -> Path | None:
        """Save after `step` completed steps when `save_every` divides it (and out_dir is set)."""
        every = self.config.save_every
        if not every or self.config.out_dir is None or step % every:
            return None
        return self.save(step, history, **loop_state)

    def save(self, step: int, history: list[dict], **loop_state: Any) -> Path:
        check_weights(self.modules, "the checkpoint", step)  # the latest good checkpoint stays the latest
        folder = Path(self.config.out_dir) / CHECKPOINTS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        for unfinished in folder.glob(".step-*.tmp"):  # left by a run killed while saving
            shutil.rmtree(unfinished)
        final = folder / f"step-{step:06d}"
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=folder))
        with writing(final, tmp):
            for name, module in self.modules.items():
                save_model(module, str(tmp / f"{name}.safetensors"), force_contiguous=True)
            torch.save({
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "rng": capture_rng_states(self.rngs),
                "loop": loop_state,
            }, tmp / TRAINER_STATE_FILE)
            state = {"step": step, "method": type(self.config).__name__, "run_id": self.run_id,
                     "config": self.config.to_dict(), "history": list(history), "files": file_digests(tmp)}
            (tmp / STATE_FILE).write_text(json.dumps(state, allow_nan=False))  # JSON, never a bare NaN
            _fsync_files(tmp)
        _replace_folder(tmp, final)
        record_files(self.config.out_dir, CHECKPOINTS_DIR)
        for old in list_checkpoints(self.config.out_dir)[: -self.config.keep_checkpoints]:
            shutil.rmtree(old)
        return final

    def restore(self, path: Path, state: dict[str, Any] | None = None) -> tuple[int, list[dict], dict[str, Any]]:
        """Load checkpoint `path` into the run (its `read_state` when already read): weights, optimizer, random
        states; returns (step, history, loop state). A file that opens but holds the wrong things is refused as
        damaged, naming the file and the field."""
        state = state or read_state(path, list(self.modules))
        method = type(self.config).__name__
        if state["method"] != method:
            raise ValueError(f"checkpoint {path} was written by a {state['method']} run; this run is a {method}")
        saved_config = type(self.config).from_dict(state["config"])  # unknown or invalid fields are errors
        _warn_about_changed_settings(path, saved_config.to_dict(), self.config.to_dict())
        check_own_files(path, state.get("files"))
        trainer_state = _read_trainer_state(path)
        _check_same_streams(path, trainer_state["rng"], self.rngs)
        for name, module in self.modules.items():
            load_weights(module, path / f"{name}.safetensors")
        bad = nonfinite_parameters(self.modules)
        if bad:
            raise NonFiniteError(f"checkpoint {path} holds inf or NaN weights ({', '.join(bad[:3])}): it cannot be "
                                 f"resumed. {_previous_intact(path)}")
        for field, load in (("optimizer", self.optimizer.load_state_dict),
                            ("scaler", self.scaler.load_state_dict if self.scaler is not None else None),
                            ("rng", lambda states: restore_rng_states(states, self.rngs))):
            if load is None or trainer_state[field] is None:  # a run without fp16 saves no scaler
                continue
            try:
                load(trainer_state[field])
            except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as err:
                raise CheckpointDamaged(
                    f"checkpoint {path} is damaged: {path / TRAINER_STATE_FILE}, field {field!r} does not fit this run "
                    f"({type(err).__name__}: {str(err)[:120]}). {_previous_intact(path)}") from None
        return state["step"], state["history"], trainer_state["loop"]


def _check_same_streams(path: Path, saved: Any, rngs: dict[str, RandomSource]) -> None:
    """The checkpoint keeps the random streams this run draws from, by name: a task whose tool gained a stream of its
    own (Tool.rng) or lost it would otherwise replay its draws or drop the saved ones. A malformed field is left to
    the damage checks of `restore`."""
    kept = saved.get("run") if isinstance(saved, dict) else None
    if not isinstance(kept, dict) or sorted(kept) == sorted(rngs):
        return
    missing, extra = sorted(set(rngs) - set(kept)), sorted(set(kept) - set(rngs))
    why = []
    if missing:
        why.append(f"it keeps no state for {missing}, which this run draws from (written before a tool's own stream, "
                   "Tool.rng, was kept, or by a run whose tool had none: its draws cannot be continued)")
    if extra:
        why.append(f"it keeps {extra}, which this run does not draw from (a tool without the stream it had)")
    raise ValueError(f"checkpoint {path}: {path / TRAINER_STATE_FILE}, field 'rng', does not match this run's random "
                     f"streams: {'; '.join(why)}. Resume with the task and tool the run started with, or start a new "
                     "run; the checkpoint is left as it is")


def list_checkpoints(out_dir: str | os.PathLike | None) -> list[Path]:
    """The complete checkpoints of a run, oldest first (temporary folders of an interrupted save are skipped)."""
    if out_dir is None or not (Path(out_dir) / CHECKPOINTS_DIR).is_dir():
        return []
    found = [p for p in (Path(out_dir) / CHECKPOINTS_DIR).iterdir()
             if re.fullmatch(r"step-\d+", p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name.removeprefix("step-")))


def find_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint folder as given, or the latest checkpoint of a run folder (an out_dir)."""
    path = Path(path)
    if (path / STATE_FILE).is_file():
        return path
    existing = list_checkpoints(path)
    if not existing:
        raise FileNotFoundError(
            f"no checkpoint at {path}: resume takes a checkpoint folder (<out_dir>/{CHECKPOINTS_DIR}/step-000040) "
            f"or a run's out_dir that has {CHECKPOINTS_DIR}/ (written with save_every > 0)"
        )
    return existing[-1]


def check_fork_target(resume: str | os.PathLike, fork_to: str | os.PathLike) -> None:
    """A fork writes its new run outside what it reads: never into the checkpoint, nor into its run's checkpoints/
    (where the run's pruning and rewinds would reach it)."""
    checkpoint = find_checkpoint(resume).resolve()
    target = Path(fork_to).resolve()
    for folder in [checkpoint, *([checkpoint.parent] if checkpoint.parent.name == CHECKPOINTS_DIR else [])]:
        if target == folder or folder in target.parents:
            raise UserError(f"fork_to={str(fork_to)!r} lies inside {folder}, a folder of the run it forks: a fork "
                            f"writes a new run into a folder of its own; choose one outside it")


def saved_config(resume: str | os.PathLike) -> dict[str, Any]:
    """The config (as a dict) of the run that wrote the checkpoint `resume` points to (see `find_checkpoint`)."""
    path = find_checkpoint(resume)
    check_intact(path)
    return json.loads((path / STATE_FILE).read_text())["config"]


def recorded_data(resume: str | os.PathLike) -> dict[str, Any]:
    """What the run of the checkpoint `resume` points to learned from, as `manifest.check_same_data` reads it: its
    manifest's data and fingerprints, or (a run folder without a manifest) the data fields of the checkpoint's
    config, without fingerprints."""
    found = read_manifest(run_folder(resume))
    return found if found is not None else {"data": saved_config(resume), "fingerprints": {}}


def checkpoint_problem(path: Path, modules: list[str] | None = None) -> str | None:
    """What makes the checkpoint folder `path` unreadable (naming the file), or None when each file opens.

    A cheap check of the structure, not of every byte: state.json must parse, each `<module>.safetensors` (every
    one in the folder when `modules` is None) must have a complete header covering the file, and
    trainer_state.pt must be a complete zip archive."""
    if modules is None:
        modules = [p.name.removesuffix(".safetensors") for p in path.glob("*.safetensors")]
    try:
        state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        return f"{path / STATE_FILE} cannot be read ({type(err).__name__}: {str(err)[:120]})"
    problem = fields_problem(state, STATE_FIELDS, optional=("run_id", "files"))
    if problem:
        return f"{path / STATE_FILE}: {problem}"
    for name in modules:
        file = path / f"{name}.safetensors"
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except Exception as err:  # safetensors raises its own SafetensorError (or an OSError for a missing file)
            return f"{file} cannot be read ({type(err).__name__}: {err})"
    try:
        with zipfile.ZipFile(path / TRAINER_STATE_FILE):
            pass
    except (OSError, zipfile.BadZipFile) as err:
        return f"{path / TRAINER_STATE_FILE} cannot be read ({type(err).__name__}: {err})"
    return None


# state.json: field -> (what it must be, the check)
STATE_FIELDS = {
    "step": ("an integer >= 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "method": ("a string", lambda v: isinstance(v, str)),
    "config": ("a JSON object", lambda v: isinstance(v, dict)),
    "history": ("a list of metric rows {\"step\": int, ...}",
                lambda v: isinstance(v, list) and all(isinstance(r, dict) and type(r.get("step")) is int for r in v)),
    "run_id": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "files": ("an object of file name -> sha256",
              lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(d, str) for k, d in v.items())),
}


def weights_digest(module: Any) -> str:
    """sha256 of a model's weights (every tensor of its state_dict, by name): what a run records of each model it
    reads but does not train."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode() + b"\0")
        digest.update(tensor.detach().float().contiguous().cpu().numpy().tobytes())
    return "sha256:" + digest.hexdigest()


def check_same_models(recorded: dict[str, str] | None, frozen: dict[str, Any], where: str) -> None:
    """A resumed run reads the same frozen models (p_ref, a learned reward model) as its run did: refuse, naming
    which, a model whose weights differ. A run recorded without them (`recorded` None) is not checked."""
    for name, digest in (recorded or {}).items():
        if name in frozen and weights_digest(frozen[name]) != digest:
            raise UserError(f"{where}: the {name} is not the one the run started with (its weights' sha256 differs "
                            f"from the run's record, {digest[:19]}...); resume with the run's own {name}, or start a "
                            "new run")


FULL_DISK_BYTES = 1 << 20  # less free space than this after a failed write: the disk is full


@contextlib.contextmanager
def writing(target: Path, partial: Path | None = None):
    """Write `target` (through the folder `partial`, removed on failure): an OSError or torch's RuntimeError while
    writing becomes an OSError that names the target and, when the disk is full, says so ("no space left on
    device"), instead of torch's own "file write failed". A checkpoint's partial folder goes, the previous one
    stays."""
    try:
        yield
    except (OSError, RuntimeError) as err:
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        where = target.parent if target.parent.exists() else Path(target.anchor)
        free = shutil.disk_usage(where).free
        full = getattr(err, "errno", None) == errno.ENOSPC or free < FULL_DISK_BYTES
        if not full and isinstance(err, OSError):
            raise
        why = f"no space left on device ({free} bytes free on the disk of {where})" if full else \
            f"{type(err).__name__}: {str(err)[:160]}"
        kept = "; the previous checkpoint is intact" if partial is not None else ""
        raise OSError(errno.ENOSPC if full else errno.EIO, f"cannot write {target}: {why}{kept}") from err


def file_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file a checkpoint holds besides state.json: saved in state.json, so that a file swapped in
    from another checkpoint or run is found before it is resumed."""
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())
            if f.is_file() and f.name != STATE_FILE}


def check_own_files(path: Path, digests: dict[str, str] | None) -> None:
    """Refuse a checkpoint whose files are not the ones it was saved with (a checkpoint written before digests
    were kept, `digests` None, is read as it is)."""
    if digests is None:
        return
    found = file_digests(path)
    for name, digest in digests.items():
        if found.get(name) != digest:
            state = "is missing" if name not in found else "is not the file this checkpoint was saved with"
            raise CheckpointDamaged(f"checkpoint {path} is damaged: {path / name} {state} (its sha256 differs from "
                                    f"the one in {STATE_FILE}: copied in from another checkpoint or run?). "
                                    f"{_previous_intact(path)}")
# trainer_state.pt: field -> (what it must hold, in words; the test)
TRAINER_STATE_FIELDS = {"optimizer": kind(dict), "scaler": kind(dict, type(None)), "rng": kind(dict),
                        "loop": kind(dict)}


def read_state(path: Path, modules: list[str] | None = None) -> dict[str, Any]:
    """The state.json of checkpoint `path`, after `check_intact`."""
    check_intact(path, modules)
    return json.loads((path / STATE_FILE).read_text(encoding="utf-8"))


def _read_trainer_state(path: Path) -> dict[str, Any]:
    """trainer_state.pt, loaded without unpickling, with each field of the type a checkpoint writes."""
    file = path / TRAINER_STATE_FILE
    try:
        trainer_state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for a damaged archive
        raise CheckpointDamaged(f"checkpoint {path} is damaged: {file} cannot be loaded ({type(err).__name__}: "
                                f"{str(err)[:120]}). {_previous_intact(path)}") from None
    problem = fields_problem(trainer_state, TRAINER_STATE_FIELDS)
    if problem:
        raise CheckpointDamaged(f"checkpoint {path} is damaged: {file}: {problem}. {_previous_intact(path)}")
    return trainer_state


def check_intact(path: Path, modules: list[str] | None = None) -> None:
    """Raise a CheckpointDamaged naming the damaged file of checkpoint `path` and the previous intact checkpoint."""
    problem = checkpoint_problem(path, modules)
    if problem:
        raise CheckpointDamaged(f"checkpoint {path} is damaged: {problem}. {_previous_intact(path)}")


def _previous_intact(path: Path) -> str:
    """Where to resume from instead of the damaged checkpoint `path`: the newest earlier one that opens."""
    step = int(path.name.removeprefix("step-")) if re.fullmatch(r"step-\d+", path.name) else None
    earlier = [p for p in list_checkpoints(path.parent.parent) if step is not None and int(p.name[5:]) < step]
    for candidate in reversed(earlier):
        if checkpoint_problem(candidate) is None:
            return f"The previous intact checkpoint is {candidate}: resume from it (resume={str(candidate)!r})"
    return "No earlier intact checkpoint exists: the run must start again"


def hold_run_folder(out_dir: str | os.PathLike) -> None:
    """Take hold of `out_dir` for this process's run, or raise naming the run that holds it.

    The hold is an exclusive `flock` on <out_dir>/.run.lock, which records the holder (pid, host, start time).
    The operating system lets go of it when the process ends, however it ends, so the lock of a killed run is
    taken over (with a warning naming it). A later run of the same process (a notebook cell run again after an
    error) takes over its own earlier hold."""
    import fcntl  # POSIX only

    folder = Path(out_dir).resolve()
    release_run_folder(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_of_held_lock(fd)
            os.close(fd)
            raise UserError(
                f"{folder} is in use by another run ({holder}); wait for it to finish, or choose another out_dir"
            ) from None
        if path.exists() and os.stat(path).st_ino == os.fstat(fd).st_ino:
            break
        os.close(fd)  # its holder removed the file between our open and our lock: try again with a fresh one
    previous = _read_lock(fd)
    if previous:
        warnings.warn(f"{folder}: taking over the lock of a run that is no longer running ({previous})", stacklevel=3)
    holder = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)
    _HELD[folder] = fd


def release_run_folder(out_dir: str | os.PathLike) -> None:
    """End this process's hold on `out_dir` (nothing happens when it holds none)."""
    folder = Path(out_dir).resolve()
    fd = _HELD.pop(folder, None)
    if fd is not None:
        (folder / LOCK_FILE).unlink(missing_ok=True)  # removed while still locked, so no other run sees it half-done
        os.close(fd)


_HELD: dict[Path, int] = {}  # out_dir (resolved) -> the open, locked lock file of this process's run


def _holder_of_held_lock(fd: int, wait: float = 2.0) -> str:
    """The holder of a lock file that another process holds, in words. The holder writes its record just after it
    takes the lock, so a process refused in between finds the file empty: it reads again for up to `wait` seconds."""
    deadline = time.monotonic() + wait
    while True:
        holder = _read_lock(fd)
        if holder.startswith("pid ") or time.monotonic() > deadline:
            return holder or "its holder has not recorded itself yet"
        time.sleep(0.02)


def _read_lock(fd: int) -> str:
    """The holder recorded in a lock file, in words ("" for an empty file)."""
    text = os.pread(fd, 4096, 0).decode(errors="replace")
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on {holder['host']}, started {holder['started']}"
    except (ValueError, KeyError, TypeError):
        return text.strip()


def check_own_folder(resume: str | os.PathLike, out_dir: str | None) -> None:
    """A resumed run writes into the folder of the checkpoint it resumes from, nowhere else (checked by the config,
    before anything is loaded). A resume of nothing says so first, not that nothing is another run's folder."""
    find_checkpoint(resume)
    own = run_folder(resume)
    if out_dir is not None and Path(out_dir).resolve() != own.resolve():
        raise UserError(
            f"resume={str(resume)!r} belongs to the run folder {own}, but out_dir={out_dir!r}: a resumed run writes "
            f"into its own folder; leave out_dir unset (or set it to {str(own)!r})"
        )


def _manifest_of_own_run(checkpoint: Path, own: Path, run_id: str | None) -> dict[str, Any]:
    """The manifest of the run folder `own` the checkpoint sits in, when it is the checkpoint's run; else a refusal
    (a checkpoint copied out of its run would otherwise write into whatever folder holds it)."""
    manifest = read_manifest(own) if checkpoint.parent.name == CHECKPOINTS_DIR else None
    if manifest is not None and run_id is not None and manifest["run_id"] == run_id:
        return manifest
    if checkpoint.parent.name != CHECKPOINTS_DIR or manifest is None:
        why = f"{own} is not a run folder (it has no {MANIFEST_FILE})"
    elif run_id is None:
        why = "the checkpoint carries no run id (it was written before run manifests)"
    else:
        why = f"{own / MANIFEST_FILE} is run {manifest['run_id']}, the checkpoint belongs to run {run_id}"
    raise UserError(f"checkpoint {checkpoint} is not inside its own run's folder: {why}, and resuming would write "
                    f"into {own.resolve()}. To continue it as a new run in a folder of its own, pass --fork-to DIR "
                    f"(fork_to=DIR)")


def _move_newer_aside(checkpoint: Path, step: int, own: Path, manifest: dict[str, Any]) -> None:
    """A rewind (resuming an older checkpoint than the run's latest): the abandoned branch's newer checkpoints, its
    final model and config, and a copy of its metrics move to checkpoints/abandoned-<time>-step-<N>/ (never
    deleted), so that the next resume of the run continues this branch."""
    newer = [p for p in list_checkpoints(own) if int(p.name.removeprefix("step-")) > step]
    if not newer:
        return
    aside = own / CHECKPOINTS_DIR / f"abandoned-{time.strftime('%Y%m%d-%H%M%S')}-{newer[-1].name}"
    aside.mkdir()
    for path in newer:
        os.replace(path, aside / path.name)
    if (own / "metrics.jsonl").is_file():
        shutil.copy2(own / "metrics.jsonl", aside / "metrics.jsonl")  # the resumed run rewrites its own
    for name in ("model", "reward_model", "value_head.safetensors", "config.json"):
        if name in manifest["files"] and (own / name).exists():
            os.replace(own / name, aside / name)
            manifest["files"].remove(name)
    manifest["rewinds"].append({"from_step": int(newer[-1].name.removeprefix("step-")), "to_step": step,
                                "moved_to": str(aside.relative_to(own))})
    write_manifest(own, manifest)
    warnings.warn(f"rewinding {own} to {checkpoint.name}: the newer checkpoints ({', '.join(p.name for p in newer)}) "
                  f"were moved aside to {aside}", stacklevel=4)


def _check_fresh_folder(out_dir: Path, overwrite: bool) -> None:
    """A fresh run must not mix with (or silently replace) the results of another run in out_dir (that it never
    writes over what it reads, the model folder included, its config checked: `paths.check_apart`); `overwrite`
    deletes only the files the earlier run's manifest lists."""
    existing = list_checkpoints(out_dir)
    if existing and not overwrite:
        raise FileExistsError(
            f"{out_dir} already holds checkpoints of a run (latest: {existing[-1].name}); pass "
            f"resume={str(out_dir)!r} to continue it, overwrite=True to replace it, or choose another out_dir"
        )
    found = [name for name in (MANIFEST_FILE, *RESULTS) if (out_dir / name).exists()]
    if found and not overwrite:
        raise FileExistsError(
            f"{out_dir} already holds the results of another run ({', '.join(found)}); pass overwrite=True "
            f"(--overwrite) to replace them, or choose another out_dir"
        )
    manifest = read_manifest(out_dir)
    listed = [name for name in manifest["files"] if name != LOCK_FILE] if manifest else []
    foreign = [name for name in found if name not in listed]
    if foreign:
        model_folder = any((out_dir / name).is_file() for name in ("model.safetensors", "pytorch_model.bin"))
        what = " (it is a model folder, not a run's out_dir)" if model_folder else ""
        raise FileExistsError(
            f"{out_dir} holds {', '.join(foreign)}, which no minirlhf run wrote there{what} (no {MANIFEST_FILE} "
            f"lists them): overwrite deletes only a run's own files; move them away, or choose another out_dir"
        )
    for name in listed:
        if (out_dir / name).is_dir() and not (out_dir / name).is_symlink():
            shutil.rmtree(out_dir / name)
        elif (out_dir / name).exists() or (out_dir / name).is_symlink():
            (out_dir / name).unlink()


def run_folder(resume: str | os.PathLike) -> Path:
    """The out_dir a checkpoint belongs to: where a resumed run keeps writing when no out_dir is given."""
    path = Path(resume)
    return path.parent.parent if (path / STATE_FILE).is_file() else path


def load_weights(module: nn.Module, path: Path) -> None:
    """Load safetensors weights into `module`, refusing (before touching anything) a file of another shape."""
    expected = {name: tuple(t.shape) for name, t in module.state_dict().items()}
    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():
            found = tuple(f.get_slice(name).get_shape())
            if name not in expected or expected[name] != found:
                here = f"shape {expected[name]} here" if name in expected else "no such parameter here"
                raise ValueError(
                    f"checkpoint {path} was written for a different model: {name} has shape {found} there, {here}; "
                    f"resume with the model the run started from"
                )
    missing, unexpected = load_model(module, str(path), strict=False, device=str(_device_of(module)))
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} was written for a different model: missing {sorted(missing)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]}; resume with the model the run started from")


def capture_rng_states(rngs: dict[str, RandomSource]) -> dict[str, Any]:
    """Every random-number state the loop draws from, as tensors and plain python values."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached_gaussian),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "run": {name: rng.getstate() if isinstance(rng, random.Random) else rng.get_state()
                for name, rng in rngs.items()},
    }


def restore_rng_states(states: dict[str, Any], rngs: dict[str, RandomSource]) -> None:
    random.setstate(states["python"])
    kind, keys, position, has_gauss, cached_gaussian = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached_gaussian))
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    for name, rng in rngs.items():
        if isinstance(rng, random.Random):
            rng.setstate(states["run"][name])
        else:
            rng.set_state(states["run"][name])


def _warn_about_changed_settings(path: Path, saved: dict[str, Any], current: dict[str, Any]) -> None:
    # what the run learns from (DATA_FIELDS) is compared in one spelling by manifest.check_same_data, which refuses
    # other data before this: here a field differs only in how it is written ("mix=.5,.5,0" for "mix=0.5,0.5,0.0")
    changed = [f"{k}: {saved[k]!r} -> {current[k]!r}" for k in saved
               if k not in RUN_CONTROL_FIELDS and k not in DATA_FIELDS and saved[k] != current[k]]
    schedule = saved.get("lr_schedule", "constant")
    if schedule != "constant" and saved["steps"] != current["steps"]:  # a decay runs to the last step
        changed.append(f"steps: {saved['steps']} -> {current['steps']}, over which the {schedule} lr schedule "
                       "decays: the lr jumps where the run resumes")
    if changed:
        warnings.warn(f"resuming {path} with other settings ({'; '.join(changed)}): the continued run is not the "
                      f"one that was interrupted", stacklevel=3)


def _device_of(module: nn.Module) -> torch.device:
    return next(module.parameters()).device


def _fsync_files(folder: Path) -> None:
    """Flush the checkpoint to disk before it is renamed into place, so that it survives a power cut too."""
    for path in folder.iterdir():
        with path.open("rb") as f:
            os.fsync(f.fileno())


def _replace_folder(tmp: Path, final: Path) -> None:
    """Rename the finished folder into place (atomic); an older checkpoint of the same step is replaced."""
    if final.exists():
        old = final.with_name(f".{final.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old)
    else:
        os.replace(tmp, final)
