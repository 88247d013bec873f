"""report_to="tensorboard": the metrics of metrics.jsonl also as TensorBoard scalars in <out_dir>/tensorboard, read
back with TensorBoard's own reader; a resumed run drops the events the interrupted one wrote after its checkpoint;
without the package, or without an out_dir, the setting is refused before anything runs."""

from __future__ import annotations

import importlib.util
import json

import pytest
from _checkpoints import Interrupt, stop_after

from minirlhf.errors import UserError
from minirlhf.tasks import arithmetic
from minirlhf.trainers.grpo import GRPOConfig
from minirlhf.trainers.run.manifest import TENSORBOARD_FOLDER
from minirlhf.trainers.sft import SFTConfig, train_sft

SETTINGS = dict(model="tiny", device="cpu", batch_size=4, eval_every=2, progress=False, report_to="tensorboard")
EXAMPLES = arithmetic.sft_data()


def _scalars(out) -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard reads from the run's event files: tag -> [(step, value), ...]."""
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    events = event_accumulator.EventAccumulator(str(out / TENSORBOARD_FOLDER))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _jsonl(out) -> dict[str, list[tuple[int, float]]]:
    columns: dict[str, list[tuple[int, float]]] = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key, value in row.items():
            if key != "step":
                columns.setdefault(key, []).append((row["step"], value))
    return columns


def test_tensorboard_holds_every_metric_of_metrics_jsonl(tmp_path):
    pytest.importorskip("tensorboard")
    train_sft(EXAMPLES, SFTConfig(**SETTINGS, steps=3, out_dir=str(tmp_path)))
    logged, read = _jsonl(tmp_path), _scalars(tmp_path)
    assert {"loss", "lr", "grad_norm", "eval/accuracy"} <= read.keys()
    assert read.keys() == logged.keys()
    for tag, points in logged.items():  # same steps, same values (TensorBoard keeps float32)
        assert [s for s, _ in read[tag]] == [s for s, _ in points], tag
        assert [v for _, v in read[tag]] == pytest.approx([v for _, v in points], rel=1e-6), tag



def test_a_resumed_run_leaves_each_step_once_in_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    config = dict(SETTINGS, steps=5, save_every=2, eval_every=0)
    with pytest.raises(Interrupt):  # killed after logging step 2; its checkpoint is at step 2
        train_sft(EXAMPLES, SFTConfig(**config, out_dir=str(tmp_path)), callbacks=[stop_after(2)])
    assert [s for s, _ in _scalars(tmp_path)["loss"]] == [0, 1, 2]  # step 2 is in TensorBoard, not in the checkpoint
    train_sft(EXAMPLES, SFTConfig(**config, resume=str(tmp_path)))
    read = _scalars(tmp_path)
    assert [s for s, _ in read["loss"]] == [0, 1, 2, 3, 4]  # step 2 of the killed run purged, not doubled
    assert [v for _, v in read["loss"]] == pytest.approx([v for _, v in _jsonl(tmp_path)["loss"]], rel=1e-6)


def test_without_the_package_the_setting_is_refused_with_the_install_line(tmp_path, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard"
                        else find_spec(name, *a))
    with pytest.raises(UserError, match=r"SFTConfig\.report_to='tensorboard' needs the tensorboard package.*"
                                        r"pip install tensorboard"):
        SFTConfig(report_to="tensorboard", out_dir=str(tmp_path))
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(("settings", "message"), [
    (dict(report_to="tensorboard"), r"GRPOConfig\.report_to='tensorboard' needs an out_dir"),
    (dict(report_to="wandb"), r"GRPOConfig\.report_to must be one of: none, tensorboard; got 'wandb'"),
])
def test_report_to_settings_that_cannot_work_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**settings)
