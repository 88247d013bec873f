"""Checkpoints that resume a run exactly where it stopped, written so that a crash never leaves half of one.

    <out_dir>/checkpoints/step-000040/
        model.safetensors     the weights of every trained module (PPO adds value_head.safetensors)
        trainer_state.pt      optimizer state, every random-number state, the loop's own state
        state.json            step, method, config, and the metrics history up to this step

A resumed run is the SAME run: it continues at step k with the same weights, the same Adam moments and the same
random numbers (python's `random`, the trainer's own `random.Random` for prompts and batch order, numpy, torch's
CPU and CUDA generators for dropout, and the sampling `torch.Generator`). On CPU an interrupted and resumed run
logs the same metrics and ends with bit-identical weights.

Safety: a checkpoint is written into a temporary folder next to its final place and renamed into place only
when complete (`os.replace`), so a folder named step-N is always whole. Loading unpickles nothing: weights come
from safetensors, the rest from `torch.load(weights_only=True)` and JSON. A checkpoint damaged later (a truncated
file, invalid JSON) is refused before anything is loaded from it, one holding inf/NaN weights before the run
starts, each with the previous intact checkpoint named; one with inf/NaN weights is never written (`guard`).

One folder, one run: a run holds its out_dir for as long as it trains (`hold_run_folder`, a lock file naming
its process), a resumed run writes into the folder it resumes from, and a fresh run refuses a folder that already
holds another run's results unless `overwrite=True`.
"""

from __future__ import annotations

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

from minirlhf.trainers.guard import NonFiniteError, check_weights, nonfinite_parameters

CHECKPOINTS_DIR = "checkpoints"  # inside out_dir
STATE_FILE = "state.json"
TRAINER_STATE_FILE = "trainer_state.pt"
LOCK_FILE = ".run.lock"  # inside out_dir while a run holds it: {"pid", "host", "started"} of the holder
RESULTS = ("metrics.jsonl", "config.json", "model", "reward_model", CHECKPOINTS_DIR)  # what a run leaves in out_dir
# Fields that may change between the interrupted and the resumed run without changing what it computes.
RUN_CONTROL_FIELDS = {"steps", "out_dir", "resume", "save_every", "keep_checkpoints", "progress", "eval_every",
                      "device", "debug", "gradient_checkpointing", "compile", "decoder", "overwrite"}

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
                 scaler: torch.amp.GradScaler | None = None, **modules: nn.Module):
        self.config = config
        self.optimizer = optimizer
        self.rngs = rngs
        self.scaler = scaler
        self.modules = modules

    def resume(self) -> tuple[int, list[dict], dict[str, Any]]:
        """(first step to run, metric rows so far, loop state): from `config.resume`, or a fresh start.

        With an out_dir, the run first takes hold of it (`hold_run_folder`) and checks that it is its own: a resumed
        run's out_dir must be the folder of its checkpoint; a fresh run's must not hold another run's results
        (unless `config.overwrite`, which deletes them)."""
        out_dir = self.config.out_dir
        if out_dir is not None:
            hold_run_folder(out_dir)
        try:
            if self.config.resume is not None:
                checkpoint = find_checkpoint(self.config.resume)
                _check_own_folder(self.config.resume, out_dir)
                return self.restore(checkpoint)
            if out_dir is not None:
                _check_fresh_folder(Path(out_dir), getattr(self.config, "overwrite", False))
            return 0, [], {}
        except BaseException:
            if out_dir is not None:
                release_run_folder(out_dir)
            raise

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
        for name, module in self.modules.items():
            save_model(module, str(tmp / f"{name}.safetensors"), force_contiguous=True)
        torch.save({
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": capture_rng_states(self.rngs),
            "loop": loop_state,
        }, tmp / TRAINER_STATE_FILE)
        state = {"step": step, "method": type(self.config).__name__, "config": self.config.to_dict(),
                 "history": list(history)}
        (tmp / STATE_FILE).write_text(json.dumps(state))
        _fsync_files(tmp)
        _replace_folder(tmp, final)
        for old in list_checkpoints(self.config.out_dir)[: -self.config.keep_checkpoints]:
            shutil.rmtree(old)
        return final

    def restore(self, path: Path) -> tuple[int, list[dict], dict[str, Any]]:
        check_intact(path, list(self.modules))
        state = json.loads((path / STATE_FILE).read_text())
        method = type(self.config).__name__
        if state["method"] != method:
            raise ValueError(f"checkpoint {path} was written by a {state['method']} run; this run is a {method}")
        saved_config = type(self.config).from_dict(state["config"])  # unknown or invalid fields are errors
        _warn_about_changed_settings(path, saved_config.to_dict(), self.config.to_dict())
        trainer_state = torch.load(path / TRAINER_STATE_FILE, map_location="cpu", weights_only=True)
        for name, module in self.modules.items():
            load_weights(module, path / f"{name}.safetensors")
        bad = nonfinite_parameters(self.modules)
        if bad:
            raise NonFiniteError(f"checkpoint {path} holds inf or NaN weights ({', '.join(bad[:3])}): it cannot be "
                                 f"resumed. {_previous_intact(path)}")
        self.optimizer.load_state_dict(trainer_state["optimizer"])
        if self.scaler is not None and trainer_state.get("scaler"):
            self.scaler.load_state_dict(trainer_state["scaler"])
        restore_rng_states(trainer_state["rng"], self.rngs)
        return state["step"], state["history"], trainer_state["loop"]


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


def saved_config(resume: str | os.PathLike) -> dict[str, Any]:
    """The config (as a dict) of the run that wrote the checkpoint `resume` points to (see `find_checkpoint`)."""
    path = find_checkpoint(resume)
    check_intact(path)
    return json.loads((path / STATE_FILE).read_text())["config"]


def checkpoint_problem(path: Path, modules: list[str] | None = None) -> str | None:
    """What makes the checkpoint folder `path` unreadable (naming the file), or None when each file opens.

    A cheap check of the structure, not of every byte: state.json must parse, each `<module>.safetensors` (every
    one in the folder when `modules` is None) must have a complete header covering the file, and
    trainer_state.pt must be a complete zip archive."""
    if modules is None:
        modules = [p.name.removesuffix(".safetensors") for p in path.glob("*.safetensors")]
    try:
        state = json.loads((path / STATE_FILE).read_text())
        if not isinstance(state, dict) or not {"step", "method", "config", "history"} <= state.keys():
            return f"{path / STATE_FILE} lacks the fields step, method, config and history"
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return f"{path / STATE_FILE} cannot be read ({type(err).__name__}: {err})"
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


def check_intact(path: Path, modules: list[str] | None = None) -> None:
    """Raise a ValueError naming the damaged file of checkpoint `path` and the previous intact checkpoint."""
    problem = checkpoint_problem(path, modules)
    if problem:
        raise ValueError(f"checkpoint {path} is damaged: {problem}. {_previous_intact(path)}")


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
            holder = _read_lock(fd)
            os.close(fd)
            raise RuntimeError(
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


def _read_lock(fd: int) -> str:
    """The holder recorded in a lock file, in words ("" for an empty file)."""
    text = os.pread(fd, 4096, 0).decode(errors="replace")
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on {holder['host']}, started {holder['started']}"
    except (ValueError, KeyError, TypeError):
        return text.strip()


def _check_own_folder(resume: str | os.PathLike, out_dir: str | None) -> None:
    """A resumed run writes into the folder of the checkpoint it resumes from, nowhere else."""
    own = run_folder(resume)
    if out_dir is not None and Path(out_dir).resolve() != own.resolve():
        raise ValueError(
            f"resume={str(resume)!r} belongs to the run folder {own}, but out_dir={out_dir!r}: a resumed run writes "
            f"into its own folder; leave out_dir unset (or set it to {str(own)!r})"
        )


def _check_fresh_folder(out_dir: Path, overwrite: bool) -> None:
    """A fresh run must not mix with (or silently replace) the results of another run in out_dir."""
    existing = list_checkpoints(out_dir)
    if existing and not overwrite:
        raise FileExistsError(
            f"{out_dir} already holds checkpoints of a run (latest: {existing[-1].name}); pass "
            f"resume={str(out_dir)!r} to continue it, overwrite=True to replace it, or choose another out_dir"
        )
    found = [name for name in RESULTS if (out_dir / name).exists()]
    if found and not overwrite:
        raise FileExistsError(
            f"{out_dir} already holds the results of another run ({', '.join(found)}); pass overwrite=True "
            f"(--overwrite) to replace them, or choose another out_dir"
        )
    for name in found:
        if (out_dir / name).is_dir():
            shutil.rmtree(out_dir / name)
        else:
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
    changed = [f"{k}: {saved[k]!r} -> {current[k]!r}" for k in saved
               if k not in RUN_CONTROL_FIELDS and saved[k] != current[k]]
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
