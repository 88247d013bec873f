"""The shared core: loading, per-token log-probs under padding, sampling, masks and bad arguments."""

import copy
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.activations import GELUTanh

from minirlhf.data import encode_preference_pairs, encode_prompt_completion, load_preference_pairs
from minirlhf.logprobs import (
    forward_logits,
    logprobs_on_response,
    packed_response_logprobs,
    response_logprobs,
    sequence_logprobs,
)
from minirlhf.models import SHIPPED, load_model, load_tokenizer, resolve_device
from minirlhf.precision import enable_gradient_checkpointing
from minirlhf.sampling import sample


def test_tokenizer_round_trips_both_tasks(tiny):
    _, tokenizer = tiny
    for text in ["17+25=42", "The acting was not good, but the music was lovely.", "I 100% LOVED it!? ~~ é"]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    # digits are single tokens: the model writes sums digit by digit
    assert len(tokenizer("1234", add_special_tokens=False)["input_ids"]) == 4


def test_special_tokens_are_set_and_eos_is_not_pad(tiny):
    model, tokenizer = tiny
    assert tokenizer.eos_token_id is not None and tokenizer.pad_token_id is not None
    assert tokenizer.eos_token_id != tokenizer.pad_token_id
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.config.bos_token_id == tokenizer.bos_token_id
    assert model.config.pad_token_id == tokenizer.pad_token_id
    assert sum(p.numel() for p in model.parameters()) < 5_000_000


def test_load_model_from_a_local_folder(tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(SHIPPED["tiny"], folder)
    model, tokenizer = load_model(folder, device="cpu")
    reference, _ = load_model("tiny", device="cpu")
    ids = torch.tensor([tokenizer("3+4=")["input_ids"]])
    assert torch.equal(model(ids).logits, reference(ids).logits)


def test_hub_name_fails_fast_and_clearly_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="not reachable"):
        load_model("gpt2", device="cpu")


def test_unknown_names_and_bad_devices_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model("./no/such/folder")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_tokenizer(tmp_path / "empty")
    shutil.copy(SHIPPED["tiny"] / "config.json", tmp_path / "empty")  # a model folder without its tokenizer
    with pytest.raises(FileNotFoundError, match="empty has no tokenizer files"):
        load_tokenizer(tmp_path / "empty")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA"):
            resolve_device("cuda")
    assert resolve_device("auto").type in {"cpu", "cuda", "mps"}


def _batch_from(tokenizer, prompt: str, response: str, left_pad: int, right_pad: int):
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    pad = tokenizer.pad_token_id
    ids = [pad] * left_pad + p + r + [pad] * right_pad
    attn = [0] * left_pad + [1] * (len(p) + len(r)) + [0] * right_pad
    resp = [0] * (left_pad + len(p)) + [1] * len(r) + [0] * right_pad
    return ids, attn, resp


def test_padding_never_changes_a_logprob(tiny):
    """The same sequence alone, left-padded and right-padded in one batch gives the same log-probs."""
    model, tokenizer = tiny
    rows = [
        _batch_from(tokenizer, "The plot was", " slow, but I loved it.", 0, 0),
        _batch_from(tokenizer, "The plot was", " slow, but I loved it.", 5, 0),
        _batch_from(tokenizer, "The plot was", " slow, but I loved it.", 0, 5),
        _batch_from(tokenizer, "The plot was", " slow, but I loved it.", 2, 3),
    ]
    width = max(len(r[0]) for r in rows)
    rows = [(ids, a, m) for ids, a, m in rows if len(ids) == width] + [
        tuple(x + [0 if k else tokenizer.pad_token_id] * (width - len(ids)) for k, x in enumerate((ids, a, m)))
        for ids, a, m in rows
        if len(ids) != width
    ]
    input_ids, attn, resp = (torch.tensor([r[k] for r in rows]) for k in range(3))
    logp = response_logprobs(model, input_ids, attn, resp)
    per_row = [logp[i][resp[i].bool()] for i in range(len(rows))]
    for other in per_row[1:]:
        torch.testing.assert_close(other, per_row[0], atol=1e-5, rtol=0)
    assert torch.all(logp[~resp.bool()] == 0)
    seq = sequence_logprobs(logp, resp)
    torch.testing.assert_close(seq, seq[0].expand_as(seq), atol=1e-5, rtol=0)


def test_a_tokenizer_without_a_pad_token_pads_with_eos(tiny):
    """GPT-2's own tokenizer has no pad token: rows of different lengths are padded with EOS, the masks (built from
    lengths) are those of the padded tokenizer, and no log-prob changes. Without EOS either, the error says what to
    set."""
    model, tokenizer = tiny
    no_pad = copy.deepcopy(tokenizer)
    no_pad.pad_token = None
    assert no_pad.pad_token_id is None
    prompts, completions = ["The plot was", "I watched this film and"], [" slow, but I loved it.", " no."]
    padded, bare = (encode_prompt_completion(t, prompts, completions) for t in (tokenizer, no_pad))
    real = padded["attention_mask"].bool()
    assert not real.all()  # the rows differ in length: there is padding on both sides
    assert torch.equal(bare["attention_mask"], padded["attention_mask"])
    assert torch.equal(bare["response_mask"], padded["response_mask"])
    assert torch.equal(bare["input_ids"][real], padded["input_ids"][real])
    assert (bare["input_ids"][~real] == tokenizer.eos_token_id).all()
    torch.testing.assert_close(response_logprobs(model, **bare), response_logprobs(model, **padded), atol=1e-6, rtol=0)
    no_pad.eos_token = None
    with pytest.raises(ValueError, match="no EOS token to end the completions with: set tokenizer.eos_token"):
        encode_prompt_completion(no_pad, prompts, completions)
    with pytest.raises(ValueError, match="neither a pad token nor an EOS token .*: set tokenizer.pad_token"):
        encode_prompt_completion(no_pad, prompts, completions, add_eos=False)


def test_lm_head_only_at_response_positions_changes_nothing(tiny):
    """response_logprobs runs the LM head only where a response token is predicted (logits_to_keep): the same
    log-probs and entropies as full logits (B, T, V) scored afterwards."""
    model, tokenizer = tiny
    batch = encode_preference_pairs(tokenizer, load_preference_pairs("sentiment")[:8])
    logits, _ = forward_logits(model, batch["input_ids"], batch["attention_mask"])
    expected = logprobs_on_response(logits, batch["input_ids"], batch["response_mask"], 0.7, return_entropy=True)
    got = response_logprobs(model, **batch, temperature=0.7, return_entropy=True)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("width", [64, 8])  # 8: narrower than every sequence, so one sequence per row
def test_packed_logprobs_equal_the_padded_forward(width):
    """Packing the sequences into rows without padding changes no log-prob and no gradient."""
    model, tokenizer = load_model("tiny", device="cpu")
    model.train()
    for module in model.modules():  # no dropout, as in every trainer
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    pairs = load_preference_pairs("sentiment")[:24]
    batch = encode_preference_pairs(tokenizer, pairs)  # [left-padded prompt | right-padded completion]
    assert not batch["attention_mask"].bool().all()  # there is padding to remove
    padded = response_logprobs(model, **batch)
    grads = torch.autograd.grad(sequence_logprobs(padded, batch["response_mask"]).sum(), list(model.parameters()))
    packed = packed_response_logprobs(model, **batch, width=width)
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=0)
    assert torch.all(packed[~batch["response_mask"].bool()] == 0)
    packed_grads = torch.autograd.grad(sequence_logprobs(packed, batch["response_mask"]).sum(),
                                       list(model.parameters()))
    for a, b in zip(packed_grads, grads):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="first token"):  # a response token needs a token before it
        first_real = batch["attention_mask"][0].argmax()
        response = batch["response_mask"].clone()
        response[0, first_real] = 1
        packed_response_logprobs(model, batch["input_ids"], batch["attention_mask"], response)


def test_a_shared_prompt_runs_once_and_changes_no_logprob_or_gradient():
    """response_logprobs(..., prompt_length=P) runs each distinct prompt once and lets its rows reuse its keys and
    values: the same log-probs, entropies and parameter gradients as one forward per row. Prompts of different
    lengths (left padding, a one-token prompt) and a shuffled subset of the rows (a minibatch that cuts groups)."""
    model, tokenizer = load_model("tiny", device="cpu")
    model.train()
    for module in model.modules():  # no dropout, as in every trainer
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    rollout = sample(model, tokenizer, ["17+25=", "The acting was", "I", "12+30="], group_size=3, max_new_tokens=6,
                     generator=torch.Generator().manual_seed(0))
    rows = torch.randperm(12, generator=torch.Generator().manual_seed(1))[:8]  # 8 rows of 4 prompts: some repeat
    batch = (rollout.input_ids[rows], rollout.attention_mask[rows], rollout.response_mask[rows])
    positions = []  # how many token positions each forward pass runs
    hook = model.transformer.wte.register_forward_hook(lambda module, args, out: positions.append(args[0].numel()))

    one_pass = response_logprobs(model, *batch, temperature=0.7, return_entropy=True)
    grads = torch.autograd.grad(one_pass[0].sum(), list(model.parameters()))
    shared = response_logprobs(model, *batch, temperature=0.7, return_entropy=True,
                               prompt_length=rollout.prompt_length)
    shared_grads = torch.autograd.grad(shared[0].sum(), list(model.parameters()))
    hook.remove()

    for a, b in zip(shared, one_pass):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    for a, b in zip(shared_grads, grads):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert positions[0] == rollout.input_ids[rows].numel() and sum(positions[1:]) < positions[0]  # it did share
    enable_gradient_checkpointing(model)  # under which transformers keeps no KV cache in training mode:
    checkpointed = response_logprobs(model, *batch, temperature=0.7, prompt_length=rollout.prompt_length)  # unshared
    torch.testing.assert_close(checkpointed, one_pass[0], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="prompt columns"):  # prompt_length must not cut into a response
        response_logprobs(model, *batch, prompt_length=rollout.prompt_length + 1)


def test_fused_gelu_keeps_the_shipped_models_outputs():
    """load_model runs GPT-2's gelu_new as one fused kernel (gelu_pytorch_tanh): the same function, so token
    log-probs of real text move by float rounding only (< 1e-5)."""
    for name in ("tiny", "tiny-sft"):
        model, tokenizer = load_model(name, device="cpu")
        unfused = AutoModelForCausalLM.from_pretrained(SHIPPED[name], local_files_only=True)
        assert unfused.config.activation_function == "gelu_new"
        assert model.config.activation_function == "gelu_pytorch_tanh"
        assert all(isinstance(block.mlp.act, GELUTanh) for block in model.transformer.h)
        batch = encode_preference_pairs(tokenizer, load_preference_pairs("sentiment")[:32])
        with torch.no_grad():
            torch.testing.assert_close(response_logprobs(model.eval(), **batch),
                                       response_logprobs(unfused.eval(), **batch), atol=1e-5, rtol=0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_equal_the_training_forward(tiny, temperature):
    model, tokenizer = tiny
    prompts = ["17+25=", "The acting was", "I watched this film and"]
    gen = torch.Generator().manual_seed(0)
    rollout = sample(model, tokenizer, prompts, group_size=4, max_new_tokens=12, temperature=temperature,
                     generator=gen)
    recomputed = response_logprobs(
        model, rollout.input_ids, rollout.attention_mask, rollout.response_mask, temperature=temperature
    )
    torch.testing.assert_close(recomputed, rollout.logprobs, atol=1e-4, rtol=0)
    assert len(rollout.completions) == 12 and rollout.prompts[:4] == ["17+25="] * 4


def test_a_group_shares_one_prompt_pass_in_sampling(tiny):
    """sample(..., group_size=G) runs each prompt once and repeats its KV cache G times: the same tokens and
    log-probs as listing every prompt G times (group_size=1, one prompt pass per row), from the same seed."""
    model, tokenizer = tiny
    prompts = ["17+25=", "The acting was", "I"]
    grouped = sample(model, tokenizer, prompts, group_size=4, max_new_tokens=10,
                     generator=torch.Generator().manual_seed(3))
    row_by_row = sample(model, tokenizer, [p for p in prompts for _ in range(4)], group_size=1, max_new_tokens=10,
                        generator=torch.Generator().manual_seed(3))
    assert torch.equal(grouped.input_ids, row_by_row.input_ids)
    assert grouped.completions == row_by_row.completions
    torch.testing.assert_close(grouped.logprobs, row_by_row.logprobs, atol=1e-5, rtol=0)


def test_eos_is_kept_and_everything_after_it_is_masked(tiny):
    model, tokenizer = tiny
    rollout = sample(model, tokenizer, ["3+4=", "12+30="], group_size=8, max_new_tokens=10,
                     generator=torch.Generator().manual_seed(1))
    P, eos = rollout.prompt_length, tokenizer.eos_token_id
    responses, mask = rollout.input_ids[:, P:], rollout.response_mask[:, P:].bool()
    assert bool(rollout.ended_with_eos.any())
    for row, m, ended in zip(responses, mask, rollout.ended_with_eos):
        n = int(m.sum())
        assert m[:n].all() and not m[n:].any()  # one contiguous block from the first column
        if ended:
            assert row[n - 1] == eos and (row[: n - 1] != eos).all()  # EOS kept, counted once
            assert (row[n:] == tokenizer.pad_token_id).all()
        else:
            assert n == responses.shape[1]
    assert torch.equal(rollout.attention_mask[:, P:].bool(), mask)


def test_greedy_tiny_model_writes_recognisable_text(tiny):
    model, tokenizer = tiny
    rollout = sample(model, tokenizer, ["23+14=", "The music was"], max_new_tokens=20, greedy=True)
    answer, review = rollout.completions
    assert answer.isdigit()
    assert len(review.split()) >= 2 and review.strip()[-1] in ".,"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(prompts=[]), "prompts is empty"),
        (dict(prompts="3+4="), "list of strings"),
        (dict(prompts=["3+4=", ""]), r"prompts\[1\]"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(temperature=0.0), "temperature"),
        (dict(group_size=0), "group_size"),
        (dict(top_p=0.0), "top_p"),
        (dict(max_new_tokens=100), "context"),
    ],
)
def test_sampling_rejects_bad_arguments(tiny, kwargs, message):
    model, tokenizer = tiny
    args = dict(prompts=["3+4="], max_new_tokens=4) | kwargs
    with pytest.raises(ValueError, match=message):
        sample(model, tokenizer, **args)


def test_mismatched_masks_raise(tiny):
    model, _ = tiny
    ids = torch.ones(2, 6, dtype=torch.long)
    ones = torch.ones(2, 6, dtype=torch.long)
    with pytest.raises(ValueError, match="response_mask has shape"):
        response_logprobs(model, ids, ones, torch.ones(2, 5))
    padded = ones.clone()
    padded[:, -1] = 0
    resp = torch.zeros_like(ones)
    resp[:, -2:] = 1
    with pytest.raises(ValueError, match="padding"):
        response_logprobs(model, ids, padded, resp)
