"""Nothing lost, nothing silent: a run holds its folder, a resumed run writes into its own folder, training
that goes non-finite stops with the last good checkpoint intact, and damaged checkpoints and bad inputs are named."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _checkpoints import restamp_checkpoint
from safetensors.torch import save_model

from minirlhf.__main__ import main
from minirlhf.data import PreferenceData, PreferencePair, load_preference_pairs, preference_data
from minirlhf.errors import UserError
from minirlhf.losses import (
    KL_K3_LINEAR_ABOVE,
    KL_K3_LINEAR_ABOVE_FP16,
    bradley_terry_loss,
    dpo_loss,
    gae,
    grpo_advantages,
    grpo_loss,
    kl_k3,
    ppo_clip_loss,
    reinforce_loss,
    rloo_advantages,
    value_loss,
)
from minirlhf.tasks import arithmetic, call_reward
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.reward_model import train_reward_model
from minirlhf.trainers.run import History, optimizer_step
from minirlhf.trainers.run.checkpoint import (
    LOCK_FILE,
    Checkpointer,
    checkpoint_problem,
    find_checkpoint,
    hold_run_folder,
    list_checkpoints,
    release_run_folder,
    saved_config,
)
from minirlhf.trainers.run.guard import NonFiniteError, check_gradients
from minirlhf.trainers.run.manifest import MANIFEST_FILE, new_manifest, write_manifest

REPO = Path(__file__).resolve().parent.parent
ONLINE = dict(model="tiny-sft", device="cpu", prompts_per_step=2, group_size=4, max_new_tokens=4, eval_every=1000,
              progress=False)
CLI = ["grpo", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "3", "--eval-every", "100",
       "--save-every", "1", "--progress", "false"]


def _length_task(reward=lambda completions: [len(c) / 4 for c in completions]):
    task = arithmetic.task()
    return dataclasses.replace(task, evaluate=None, reward_fn=lambda p, completions, **_: reward(completions))


def _rows(path: Path) -> list[dict]:
    """metrics.jsonl parsed strictly: the tokens NaN / Infinity are not JSON."""
    def refuse(token):
        raise ValueError(f"not JSON: {token}")
    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def _tiny_checkpointer(out: Path, **overrides) -> Checkpointer:
    config = GRPOConfig(out_dir=str(out), save_every=1, **overrides)
    module = torch.nn.Linear(3, 2)
    return Checkpointer(config, torch.optim.AdamW(module.parameters()), {}, model=module)


# ----------------------------------------------------------------------------- one folder, one run

HOLDER = textwrap.dedent("""
    import sys, time
    from minirlhf.trainers.run.checkpoint import hold_run_folder
    try:
        hold_run_folder(sys.argv[1])
    except ValueError as err:  # errors.UserError
        print("refused:", err, flush=True)
        sys.exit(3)
    print("held", flush=True)
    time.sleep(60)
""")


def test_two_processes_racing_for_one_out_dir_one_holds_it_the_other_names_the_holder(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    racers = [subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "run")], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    try:
        first_lines = [racer.stdout.readline().strip() for racer in racers]
        assert sorted(line.split(":")[0].split()[0] for line in first_lines) == ["held", "refused"], first_lines
        winner = racers[first_lines.index("held")]
        refusal = next(line for line in first_lines if line.startswith("refused"))
        assert f"is in use by another run (pid {winner.pid} on " in refusal and "started" in refusal
    finally:
        for racer in racers:
            racer.kill()
            racer.wait()
    stale = f"taking over the lock of a run that is no longer running \\(pid {winner.pid}"
    with pytest.warns(UserWarning, match=stale):
        hold_run_folder(tmp_path / "run")  # the killed holder's lock is stale: taken over, with a note
    release_run_folder(tmp_path / "run")
    assert not (tmp_path / "run" / LOCK_FILE).exists()


def test_a_run_refused_before_the_holder_has_recorded_itself_still_names_it(tmp_path):
    """The holder takes the lock, then writes its record: a run refused in between waits for the record instead of
    naming an empty one."""
    import fcntl
    import threading

    folder = tmp_path / "run"
    folder.mkdir()
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held, nothing recorded yet
    record = json.dumps({"pid": 4242, "host": "elsewhere", "started": "2026-12-03 07:00:00 UTC"}).encode()
    writer = threading.Timer(0.3, lambda: os.pwrite(fd, record, 0))
    writer.start()
    try:
        with pytest.raises(UserError, match=r"in use by another run \(pid 4242 on elsewhere, started 2026-12-03"):
            hold_run_folder(folder)
    finally:
        writer.join()
        os.close(fd)


def test_resuming_a_moved_run_writes_into_its_own_folder(tmp_path, capsys):
    """Run into exp, move it to exp-old, start another run in exp, resume exp-old: the new run stays untouched."""
    main([*CLI, "--steps", "1", "--out-dir", str(tmp_path / "exp")])
    (tmp_path / "exp").rename(tmp_path / "exp-old")
    main([*CLI, "--steps", "1", "--out-dir", str(tmp_path / "exp")])
    other = {p: p.read_bytes() for p in (tmp_path / "exp").rglob("*") if p.is_file()}
    main(["grpo", "--resume", str(tmp_path / "exp-old"), "--steps", "2"])
    assert {p: p.read_bytes() for p in (tmp_path / "exp").rglob("*") if p.is_file()} == other
    assert [r["step"] for r in _rows(tmp_path / "exp-old" / "metrics.jsonl")] == [0, 1, 2]
    assert [p.name for p in list_checkpoints(tmp_path / "exp-old")] == ["step-000001", "step-000002"]
    old = tmp_path / "exp-old"
    for out_dir in (tmp_path / "exp", old / "model", old / "checkpoints", tmp_path, old / ".." / "exp"):
        # refused by the config, before a model is loaded or a folder touched
        with pytest.raises(UserError, match="belongs to the run folder .*exp-old, but out_dir=.*a resumed run writes"):
            GRPOConfig(out_dir=str(out_dir), resume=str(old))
    for out_dir in (old, old / ".", old / "model" / ".."):  # its own folder, however spelled
        assert Path(GRPOConfig(out_dir=str(out_dir), resume=str(old)).out_dir).resolve() == old.resolve()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["grpo", "--resume", str(old), "--out-dir", str(old / "model"), "--steps", "3"])
    assert "Loading weights" not in capsys.readouterr().err


def test_resuming_from_another_working_directory_writes_into_the_runs_folder(tmp_path, monkeypatch, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    main([*CLI, "--steps", "1", "--out-dir", "runs/exp"])  # a relative out_dir, saved as such in the checkpoint
    monkeypatch.chdir(tmp_path / "b")
    main(["grpo", "--resume", "../a/runs/exp", "--steps", "2"])
    assert not (tmp_path / "b" / "runs").exists()
    assert [r["step"] for r in _rows(tmp_path / "a" / "runs" / "exp" / "metrics.jsonl")] == [0, 1, 2]


def test_a_fresh_run_refuses_a_finished_runs_folder_unless_overwrite(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n')
    (tmp_path / "model").mkdir()
    with pytest.raises(FileExistsError, match=r"results of another run \(metrics.jsonl, model\); pass overwrite=True"):
        _tiny_checkpointer(tmp_path).resume()
    assert (tmp_path / "metrics.jsonl").exists() and not (tmp_path / LOCK_FILE).exists()  # refused: nothing touched
    with pytest.raises(FileExistsError, match=r"holds metrics.jsonl, model, which no minirlhf run wrote there"):
        _tiny_checkpointer(tmp_path, overwrite=True).resume()  # no run.json lists them: not a run's results
    write_manifest(tmp_path, new_manifest({}, "GRPOConfig") | {"files": [MANIFEST_FILE, "metrics.jsonl", "model"]})
    assert _tiny_checkpointer(tmp_path, overwrite=True).resume() == (0, [], {})
    assert not (tmp_path / "metrics.jsonl").exists() and not (tmp_path / "model").exists()
    release_run_folder(tmp_path)


def test_a_finished_run_lets_go_of_its_folder(tmp_path):
    train_grpo(_length_task(), GRPOConfig(**ONLINE, steps=1, out_dir=str(tmp_path)))
    assert not (tmp_path / LOCK_FILE).exists()


# ----------------------------------------------------------------------------- the non-finite guard


@pytest.mark.parametrize("huge, error, message", [
    (1e30, NonFiniteError, r"gradient norm is (inf|nan) at optimizer update 3.*rewards too large"),
    (3e38, ValueError, r"advantages overflow float32: rewards reach 3e\+38.*rescale the reward function"),
])
def test_huge_rewards_stop_the_run_and_keep_the_last_good_checkpoint(tmp_path, huge, error, message):
    """Sane rewards for two steps, then rewards of 1e30 (or near float32's limit): the run stops at the third
    step with an error naming the update (or the advantages) and the likely cause; the step-2 checkpoint is intact,
    metrics.jsonl is JSON, and no final model is written."""
    calls = []

    def reward(completions):
        calls.append(1)
        scale = huge if len(calls) > 2 else 1.0
        return [scale * (i % 2) for i in range(len(completions))]

    config = GRPOConfig(**ONLINE, steps=5, save_every=1, scale="none", out_dir=str(tmp_path))
    with pytest.raises(error, match=message):
        train_grpo(_length_task(reward), config)
    assert find_checkpoint(tmp_path).name == "step-000002"
    assert checkpoint_problem(find_checkpoint(tmp_path)) is None
    assert [r["step"] for r in _rows(tmp_path / "metrics.jsonl")] == [0, 1]
    assert not (tmp_path / "model").exists()
    _, _, history = train_grpo(_length_task(), dataclasses.replace(config, resume=str(tmp_path)))  # resumes
    # the steps, then the final evaluation: this task has no evaluate of its own, eval/kl_ref is measured anyway
    assert [r["step"] for r in history] == [0, 1, 2, 3, 4, 5] and set(history[-1]) == {"step", "eval/kl_ref"}


def test_non_finite_metrics_are_written_as_null_and_flagged(tmp_path):
    history = History(tmp_path / "metrics.jsonl")
    history.log(0, loss=float("nan"), grad_norm=float("inf"), reward=1.0)
    assert _rows(tmp_path / "metrics.jsonl") == [
        {"step": 0, "loss": None, "grad_norm": None, "reward": 1.0, "nonfinite": ["loss", "grad_norm"]}]


def test_fp16_overflow_is_left_to_the_scaler_until_its_scale_falls_below_one():
    inf = torch.tensor(float("inf"))
    optimizer = torch.optim.AdamW(torch.nn.Linear(2, 1).parameters())
    check_gradients(torch.tensor(2.0), optimizer)
    with pytest.raises(NonFiniteError, match="gradient norm is inf at optimizer update 1"):
        check_gradients(inf, optimizer)
    for scale, fires in [(1024.0, False), (1.0, False), (0.5, True)]:
        scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        scaler.scale(torch.ones(()))  # the scale tensor is created at its first use
        if fires:
            with pytest.raises(NonFiniteError, match="loss scale fell to 0.5"):
                check_gradients(inf, optimizer, scaler)
        else:
            check_gradients(inf, optimizer, scaler)  # the scaler skips this update and retries at a lower scale


def test_optimizer_step_skips_fp16_overflows_and_stops_once_the_scaler_cannot_recover():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0)
    before = [p.detach().clone() for p in model.parameters()]
    for fires in (False, True):  # the overflow halves the scale: 2 -> 1 (skipped, retried), then 1 -> 0.5 (stop)
        scaler.scale(model(torch.ones(1, 2)).sum()).backward()
        model.weight.grad.fill_(float("inf"))
        if fires:
            with pytest.raises(NonFiniteError, match="at optimizer update 1 .the fp16 loss scale fell to 0.5"):
                optimizer_step(optimizer, model.parameters(), 1.0, scaler)
        else:
            optimizer_step(optimizer, model.parameters(), 1.0, scaler)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # no update was applied


def test_non_finite_weights_are_never_written_nor_resumed(tmp_path):
    checkpointer = _tiny_checkpointer(tmp_path)
    checkpointer.resume()  # the run starts: its manifest, whose run id its checkpoints carry
    good = checkpointer.save(1, [])
    with torch.no_grad():
        checkpointer.modules["model"].weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match=r"the checkpoint at step 2: weights hold inf or NaN \(model/weight\)"):
        checkpointer.save(2, [])
    assert list_checkpoints(tmp_path) == [good]
    bad = tmp_path / "checkpoints" / "step-000002"
    (tmp_path / "checkpoints" / "step-000001").rename(bad)  # a NaN checkpoint written by some older version
    fresh = _tiny_checkpointer(tmp_path)  # finite weights again, in the same run
    fresh.run_id = checkpointer.run_id
    good = fresh.save(1, [])
    save_model(checkpointer.modules["model"], str(bad / "model.safetensors"))
    restamp_checkpoint(bad)  # as an older version would have written it, digests and all
    with pytest.raises(NonFiniteError, match=f"holds inf or NaN weights .*previous intact checkpoint is {good}"):
        _tiny_checkpointer(tmp_path, resume=str(tmp_path)).resume()


# ----------------------------------------------------------------------------- damaged checkpoints


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("file, damage, message", [
    ("model.safetensors", _truncate, "SafetensorError"),
    ("trainer_state.pt", _truncate, "BadZipFile"),
    ("state.json", lambda p: p.write_text('{"step": 2, "meth'), "JSONDecodeError"),
])
def test_a_damaged_checkpoint_names_the_file_and_the_previous_intact_one(tmp_path, file, damage, message):
    checkpointer = _tiny_checkpointer(tmp_path)
    checkpointer.resume()
    previous = checkpointer.save(1, [{"step": 0}])
    damage(checkpointer.save(2, [{"step": 0}, {"step": 1}]) / file)
    expected = f"step-000002/{file} cannot be read \\({message}.*previous intact checkpoint is {previous}"
    with pytest.raises(ValueError, match=expected):
        _tiny_checkpointer(tmp_path, resume=str(tmp_path)).resume()
    with pytest.raises(ValueError, match=expected):
        saved_config(tmp_path)  # what the CLI's --resume reads first
    with pytest.warns(UserWarning, match="rewinding .* moved aside"):  # the damaged step-000002 is kept aside
        assert _tiny_checkpointer(tmp_path, resume=str(previous)).resume()[:2] == (1, [{"step": 0}])


# ----------------------------------------------------------------------------- the losses at their extremes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_kl_k3_is_finite_non_negative_and_exact_up_to_its_bound(dtype):
    d = torch.tensor([-1e4, -100.0, -20.0, -1.0, -1e-6, 0.0, 1e-6, 1.0, 10.0, 20.0, 25.0, 100.0, 1e4])  # log p_ref/p_θ
    logp = torch.zeros_like(d, dtype=dtype, requires_grad=True)
    k3 = kl_k3(logp, d.to(dtype))
    k3.sum().backward()
    assert k3.dtype == torch.float32
    assert torch.isfinite(k3).all() and (k3 >= 0).all() and torch.isfinite(logp.grad).all()
    d = d.to(dtype).double()  # as rounded to the input's precision
    bound = KL_K3_LINEAR_ABOVE_FP16 if dtype == torch.float16 else KL_K3_LINEAR_ABOVE
    exact = torch.expm1(d) - d
    low = d <= bound
    assert torch.allclose(k3.double()[low], exact[low], rtol=1e-5, atol=1e-12)
    assert (k3.double()[~low] <= exact[~low]).all()  # beyond the bound: the tangent, below the convex k3


def test_grpo_loss_with_a_kl_penalty_stays_finite_at_a_log_ratio_of_100():
    logp = torch.full((2, 3), -101.0, requires_grad=True)
    ref_logp = torch.full((2, 3), -1.0)
    loss, stats = grpo_loss(logp, logp.detach(), ref_logp, torch.tensor([1.0, -1.0]), torch.ones(2, 3), eps=0.2,
                            beta=0.04)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all() and stats["kl"] > 1e8


def test_losses_refuse_empty_inputs_naming_the_argument():
    empty, mask = torch.zeros(0, 3), torch.zeros(0, 3)
    with pytest.raises(ValueError, match="logp is empty"):
        grpo_loss(empty, empty, None, torch.zeros(0), mask, eps=0.2, beta=0.0)
    with pytest.raises(ValueError, match="logp is empty"):
        reinforce_loss(empty, torch.zeros(0), mask)
    with pytest.raises(ValueError, match="logp is empty"):
        ppo_clip_loss(empty, empty, empty, mask, eps=0.2)
    with pytest.raises(ValueError, match="values is empty"):
        value_loss(empty, empty, empty, mask)
    with pytest.raises(ValueError, match="chosen_scores is empty"):
        bradley_terry_loss(torch.zeros(0), torch.zeros(0))
    with pytest.raises(ValueError, match="policy_chosen_logps is empty"):
        dpo_loss(*[torch.zeros(0)] * 4, beta=0.1)


def test_elementwise_estimators_map_empty_to_empty():
    for B, T in [(0, 3), (2, 0)]:
        advantages, returns = gae(torch.zeros(B, T), torch.zeros(B, T), torch.ones(B, T), gamma=1.0, lam=0.95)
        assert advantages.shape == returns.shape == (B, T)
    assert grpo_advantages(torch.zeros(0), 4).shape == rloo_advantages(torch.zeros(0), 4).shape == (0,)
    assert kl_k3(torch.zeros(0, 3), torch.zeros(0, 3)).shape == (0, 3)


def test_nan_on_a_real_token_is_an_error_naming_the_argument_nan_in_padding_is_not():
    logp, mask = torch.zeros(2, 3), torch.tensor([[1, 1, 0], [1, 1, 1]])
    logp[0, 2] = float("nan")  # padding
    loss, _ = grpo_loss(logp, torch.zeros(2, 3), None, torch.ones(2), mask, eps=0.2, beta=0.0)
    assert torch.isfinite(loss)
    ref_logp = torch.zeros(2, 3)
    ref_logp[1, 1] = float("-inf")
    with pytest.raises(ValueError, match=r"ref_logp holds 1 inf/NaN value\(s\) on real tokens, first at index \(1, 1"):
        grpo_loss(logp, torch.zeros(2, 3), ref_logp, torch.ones(2), mask, eps=0.2, beta=0.1)
    with pytest.raises(ValueError, match="advantages holds 2 inf/NaN"):
        reinforce_loss(torch.zeros(2, 3), torch.tensor([float("nan"), 1.0]), mask)
    with pytest.raises(ValueError, match="rejected_scores holds 1 inf/NaN"):
        bradley_terry_loss(torch.zeros(2), torch.tensor([0.0, float("nan")]))


# ----------------------------------------------------------------------------- bad input, named


@pytest.mark.parametrize("rewards, message", [
    (1.0, "returned a single float \\(1.0\\) instead of a list of 2 floats"),
    ([10**400, 1.0], "returned 10{19}\\.\\.\\.\\(401 characters\\) for completion 0"),
    ([1e39, 1.0], "returned 1e\\+39 for completion 0 .*within float32's range"),
    ([float("inf"), 1.0], "returned inf for completion 0"),
])
def test_reward_functions_breaking_the_contract_are_named(rewards, message):
    def my_reward(prompts, completions, **_):
        return rewards

    with pytest.raises(ValueError, match=f"reward function my_reward {message}"):
        call_reward(my_reward, ["1+1="] * 2, ["2", "3"])


@pytest.mark.parametrize("pairs, message", [
    ([{"prompt": "Hi", "chosen": " a", "rejected": " a"}], "train, item 0: field 'rejected' is identical"),
    ([PreferencePair("", " a", " b")], "PreferenceData.train, item 0: field 'prompt' is empty"),
    ([PreferencePair("Hi", " a", " b"), PreferencePair(3, " a", " b")], "item 1: field 'prompt' must be a string"),
    ([{"prompt": "Hi", "chosen": " a"}], "item 0: missing field 'rejected'"),
    ({"prompt": "Hi", "chosen": " a", "rejected": " b"}, "PreferenceData.train must be a list of PreferencePair"),
])
def test_pairs_given_to_the_python_api_get_the_file_loaders_checks(pairs, message):
    with pytest.raises(ValueError, match=message):
        train_reward_model(pairs)
    dicts = [{"prompt": "Hi", "chosen": " a", "rejected": " b"}]
    data = preference_data(PreferenceData(dicts, dicts))
    assert (data.train, data.test) == ([PreferencePair("Hi", " a", " b")],) * 2


def test_a_malformed_json_preference_file_names_the_file_and_the_cause(tmp_path):
    path = tmp_path / "pairs.json"
    path.write_text('{"prompt": "Hi", "chosen": ')
    with pytest.raises(ValueError, match=rf"{path}, line 1: invalid JSON \(Expecting value at column 28\)"):
        load_preference_pairs(path)
    path.write_text('[{"prompt": "Hi",\n "chosen": ')  # an array cut short: its line is named too
    with pytest.raises(ValueError, match=rf"{path}, line 2: invalid JSON"):
        load_preference_pairs(path)


def test_max_new_tokens_zero_is_refused_not_replaced_by_the_default():
    with pytest.raises(ValueError, match="GRPOConfig.max_new_tokens must be > 0, got 0"):
        GRPOConfig(max_new_tokens=0)


CACHE_SCRIPT = textwrap.dedent("""
    import sys, torch
    from pathlib import Path
    from minirlhf.models import load_model
    model, tokenizer = load_model("tiny", device="cpu")
    for name, files in [("st-only", "s"), ("bin-only", "b"), ("both", "sb")]:
        snapshot = Path(sys.argv[1]) / f"models--org--{name}" / "snapshots" / ("0" * 40)
        model.save_pretrained(snapshot)
        tokenizer.save_pretrained(snapshot)
        (snapshot.parent.parent / "refs").mkdir()
        (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
        if "b" in files:  # a pickle whose weights differ from the safetensors ones (+1), to see which one loads
            torch.save({k: v + 1 for k, v in model.state_dict().items()}, snapshot / "pytorch_model.bin")
        if "s" not in files:
            (snapshot / "model.safetensors").unlink()
    first = lambda m: round(float(next(m.parameters()).flatten()[0]), 4)
    print(first(model))
    for name, kwargs in [("st-only", {}), ("both", {}), ("bin-only", {"allow_pickle": True}), ("bin-only", {})]:
        try:
            print(first(load_model(f"org/{name}", device="cpu", **kwargs)[0]))
        except OSError as err:
            print(str(err).replace(chr(10), " "))
""")


def test_hub_models_load_safetensors_and_a_pickle_only_when_asked(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_CACHE=str(tmp_path), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CACHE_SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    original, st_only, both, pickle_asked, pickle_refused = out
    assert st_only == both == original  # a cache with only safetensors works; with both, safetensors win
    assert float(pickle_asked) == pytest.approx(float(original) + 1)
    assert "not in the local cache as safetensors" in pickle_refused and "allow_pickle=True" in pickle_refused
