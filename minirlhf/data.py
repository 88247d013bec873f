"""Text -> batch tensors in the layout of `minirlhf.logprobs` (prompt left-padded, response right-padded).

    batch = encode_prompt_completion(tokenizer, ["3+4="], ["7"])
    batch["input_ids"], batch["attention_mask"], batch["response_mask"]   # each (B, P + R)

SFT, the reward model and DPO all score "prompt + completion" texts this way; the completion ends with EOS,
so ending the answer is learned like any other token.

Preference data (reward model, DPO): `load_preference_pairs` reads (prompt, chosen, rejected) triples from JSONL,
HH-RLHF-style full texts, or `datasets`; `preference_data` turns a source into the `PreferenceData` the trainers
take (train pairs, held-out pairs, an optional sampling evaluation); `encode_preference_pairs` puts chosen and
rejected in one batch. SFT's demonstrations travel the same way, as `SFTData`.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from minirlhf.errors import UserError
from minirlhf.models import DATA_DIR, require_hub


def encode_prompt_completion(
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    completions: list[str],
    add_eos: bool = True,
    max_length: int | None = None,
) -> dict[str, torch.Tensor]:
    """Tokenise prompt and completion separately (so the boundary is exact) and lay them out as
    [pad.. prompt | completion EOS ..pad]. With `max_length`, completions are truncated from the right
    (the prompt is never cut); a prompt alone longer than max_length is an error. A tokenizer without a pad token
    (GPT-2's own) pads with its EOS token: the masks, built from lengths, say which positions are padding."""
    if len(prompts) != len(completions):
        raise ValueError(f"prompts and completions differ in length: {len(prompts)} != {len(completions)}")
    if len(prompts) == 0:
        raise ValueError("no examples to encode: prompts and completions are empty")
    prompt_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(list(completions), add_special_tokens=False)["input_ids"]
    if add_eos and tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no EOS token to end the completions with: set tokenizer.eos_token, "
                         "or pass add_eos=False")
    pad = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    if pad is None:
        raise ValueError("the tokenizer has neither a pad token nor an EOS token to pad the rows with: set "
                         "tokenizer.pad_token")
    eos = [tokenizer.eos_token_id] if add_eos else []
    completion_ids = [ids + eos for ids in completion_ids]
    if max_length is not None:
        for i, p in enumerate(prompt_ids):
            if len(p) >= max_length:
                raise ValueError(
                    f"prompt {i} ({prompts[i][:40]!r}...) has {len(p)} tokens, which leaves no room for a "
                    f"completion within max_length={max_length}"
                )
        completion_ids = [c[: max_length - len(p)] for p, c in zip(prompt_ids, completion_ids)]
    P = max(map(len, prompt_ids))
    R = max(map(len, completion_ids))
    input_ids, attention, response = [], [], []
    for p, c in zip(prompt_ids, completion_ids):
        left, right = P - len(p), R - len(c)
        input_ids.append([pad] * left + p + c + [pad] * right)
        attention.append([0] * left + [1] * (len(p) + len(c)) + [0] * right)
        response.append([0] * (left + len(p)) + [1] * len(c) + [0] * right)
    return {
        "input_ids": torch.tensor(input_ids),
        "attention_mask": torch.tensor(attention),
        "response_mask": torch.tensor(response),
    }


# ----------------------------------------------------------------------------- checks at the door


def check_text(value: str, where: str, field: str) -> None:
    """A text field must be encodable (UTF-8): a lone surrogate (JSON's "\\ud800") would reach the tokenizer as a
    raw TypeError mid-run; here it is a UserError naming `where` (file and line; "" to leave it to the caller), the
    field and the position."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        prefix = f"{where}: " if where else ""
        raise UserError(f"{prefix}field {field!r} holds a lone surrogate {value[err.start]!r} at character {err.start} "
                        f"({value[max(0, err.start - 20) : err.start]!r}...): not valid text") from None


BYTE_ORDER_MARK = "\ufeff"  # what some editors (Windows Notepad, Excel's "CSV UTF-8") write at a file's start


class DuplicateKeyError(ValueError):
    """A JSON object of a data file names one key twice (json.loads would keep the last value silently)."""


def load_json_line(line: str) -> Any:
    """One line of a JSONL data file: `json.loads`, except that an object naming a key twice is a
    DuplicateKeyError naming the key (which of the two values was meant cannot be known)."""
    return json.loads(line, object_pairs_hook=_unique_keys)


def _unique_keys(items: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in items:
        if key in seen:
            raise DuplicateKeyError(f"key {key!r} appears twice in one object ({_short(seen[key])} and "
                                    f"{_short(value)}): which one is meant cannot be known, keep one")
        seen[key] = value
    return seen


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 30 else text[:27] + "..."


def check_prompt_room(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], max_new_tokens: int, context: int,
    sources: Sequence[str] = (),
) -> None:
    """Every prompt leaves room for `max_new_tokens` within the model's `context`, checked for all of them before
    the first step (not when a prompt is first drawn): a UserError names the first that does not."""
    lengths = [len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]
    for i, n in enumerate(lengths):
        if n + max_new_tokens > context:
            raise UserError(f"{_source(sources, i, 'prompt')}: field 'prompt' ({prompts[i][:40]!r}...) has {n} tokens; "
                            f"with max_new_tokens={max_new_tokens} it does not fit the model's context of {context} "
                            f"positions: shorten it, or lower max_new_tokens")


def check_example_lengths(
    tokenizer: PreTrainedTokenizerBase, examples: Sequence[tuple[str, str]], context: int, sources: Sequence[str] = ()
) -> None:
    """Every (prompt, completion) demonstration fits the model's `context` with its EOS, checked for all of them
    before the first step: a UserError names the first that does not."""
    prompts = tokenizer([p for p, _ in examples], add_special_tokens=False)["input_ids"]
    completions = tokenizer([c for _, c in examples], add_special_tokens=False)["input_ids"]
    for i, (p, c) in enumerate(zip(prompts, completions)):
        if len(p) + len(c) + 1 > context:
            raise UserError(f"{_source(sources, i, 'example')}: prompt + completion + EOS are {len(p) + len(c) + 1} "
                            f"tokens, longer than the model's context of {context} positions "
                            f"({examples[i][0][:30]!r}...): shorten or drop it")


def _source(sources: Sequence[str], i: int, unit: str) -> str:
    return sources[i] if i < len(sources) else f"{unit} {i}"


# ----------------------------------------------------------------------------- preference pairs
#
#   pairs = load_preference_pairs("sentiment")              # the shipped data/sentiment_pairs/train.jsonl
#   pairs = load_preference_pairs("my_pairs.jsonl")          # {"prompt": ..., "chosen": ..., "rejected": ...}
#   batch = encode_preference_pairs(tokenizer, pairs[:8])    # 2B rows: chosen 0..B-1, then rejected B..2B-1


@dataclass(frozen=True)
class PreferencePair:
    """One comparison (x, y_w, y_l): for the prompt x, completion y_w (chosen) is preferred to y_l (rejected).

    `chosen` and `rejected` are completions only (usually starting with a space); the model reads
    prompt + completion, scored as in `encode_prompt_completion`.
    """

    prompt: str
    chosen: str
    rejected: str


PREFERENCE_DATASETS = {"sentiment": DATA_DIR / "sentiment_pairs"}  # shipped short name -> folder of split.jsonl
HH_ASSISTANT = "\n\nAssistant:"  # the turn marker of Anthropic's HH-RLHF transcripts


def load_preference_pairs(
    path_or_name: str | os.PathLike, split: str = "train", skip_invalid: bool = False
) -> list[PreferencePair]:
    """Read preference pairs from one of:

    * a shipped short name ("sentiment" -> data/sentiment_pairs/{split}.jsonl),
    * a folder holding `{split}.jsonl` (any other folder goes to `datasets.load_dataset(folder, split=split)`),
    * a local `.jsonl` file, one JSON object per line (blank lines are ignored; `split` is not used),
    * another local file (.json, .csv, .parquet) or a Hugging Face hub name, through `datasets.load_dataset`.

    Each row has the standard columns `prompt`, `chosen`, `rejected` (all non-empty strings, chosen != rejected),
    or, HH-RLHF style, only full texts `chosen` and `rejected` that share their beginning: the prompt is then cut
    off that shared prefix (see `split_shared_prefix`). Extra columns are ignored.

    A malformed row (bad JSON, missing or non-string field, empty text, chosen == rejected) raises a ValueError
    naming the file, the line (or row) and the field; with `skip_invalid=True` such rows are skipped and one
    warning reports how many. A source without any valid pair is always an error.
    """
    source = str(path_or_name)
    path = PREFERENCE_DATASETS.get(source, Path(source).expanduser())
    if path.is_dir():
        if (path / f"{split}.jsonl").is_file():
            return _pairs_from_jsonl(path / f"{split}.jsonl", skip_invalid)
        if source in PREFERENCE_DATASETS:
            raise FileNotFoundError(
                f"the shipped preference data {source!r} has no split {split!r} at {path / f'{split}.jsonl'}; "
                f"regenerate it with `python scripts/make_preference_pairs.py`"
            )
        rows, where = _rows_from_datasets(str(path), split, local=True), f"{path} ({split} split)"
        return _pairs_from_rows(rows, where, "row", skip_invalid)
    if path.is_file():
        if path.suffix == ".jsonl":
            return _pairs_from_jsonl(path, skip_invalid)
        if path.suffix == ".json":
            return _pairs_from_json(path, skip_invalid)
        if path.stat().st_size == 0:
            raise ValueError(f"{path} is empty: it holds no preference pairs")
        return _pairs_from_rows(_rows_from_datasets(str(path), split, local=True), str(path), "row", skip_invalid)
    if source.startswith((".", "/", "~")) or Path(source).suffix in (".jsonl", ".json", ".csv", ".parquet"):
        raise FileNotFoundError(
            f"preference file {source!r} does not exist (shipped preference data: {sorted(PREFERENCE_DATASETS)})"
        )
    rows = _rows_from_datasets(source, split, local=False)
    return _pairs_from_rows(rows, f"{source} ({split} split)", "row", skip_invalid)


# The one shape of every held-out evaluation (a Task's, an SFTData's, a PreferenceData's):
#     evaluate(model, tokenizer, **settings) -> {metric: value}
# The trainers call it through `trainers.run.held_out_metrics` (eval mode, keys logged as eval/<metric>); the
# settings are what a trainer's config says about evaluating (DPO: ref_model=, n_prompts=, samples_per_prompt=,
# seed=, max_new_tokens=; the online trainers and SFT: none).
Evaluation = Callable[..., dict[str, float]]


@dataclass(frozen=True)
class SFTData:
    """What `train_sft` learns from: (prompt, completion) demonstrations, and optionally a held-out `Evaluation`
    (e.g. `arithmetic.task().evaluate`)."""

    examples: Sequence[tuple[str, str]]
    evaluate: Evaluation | None = None
    sources: Sequence[str] = ()  # where each example came from ("prompts.jsonl, line 3"), for the errors


@dataclass(frozen=True)
class PreferenceData:
    """What `train_reward_model` and `train_dpo` learn from.

    `test` pairs, when given, are scored at every evaluation (eval/accuracy, eval/margin, ...). `evaluate`, when
    given, is an `Evaluation` that samples from a policy on held-out prompts, given DPO's settings (ref_model=,
    n_prompts=, samples_per_prompt=, seed=, max_new_tokens=), as `tasks.sentiment.evaluate_sentiment` (DPO only;
    `tasks.registry.shipped_preference_data` attaches it to the shipped pairs).
    """

    train: Sequence[PreferencePair]
    test: Sequence[PreferencePair] | None = None
    evaluate: Evaluation | None = None


def preference_data(source: PreferenceData | Sequence[PreferencePair] | str | os.PathLike) -> PreferenceData:
    """The `PreferenceData` of a source: itself, a list of pairs (no held-out set), or anything
    `load_preference_pairs` reads: its "train" split, and its "test" split when the source is a folder (or a
    shipped name) that has one. (`tasks.registry.shipped_preference_data` adds a shipped set's evaluation.)"""
    if isinstance(source, PreferenceData):
        data = source
    elif isinstance(source, str | os.PathLike):
        folder = PREFERENCE_DATASETS.get(str(source), Path(source))
        test = load_preference_pairs(source, "test") if (folder / "test.jsonl").is_file() else None
        data = PreferenceData(load_preference_pairs(source, "train"), test)
    else:
        data = PreferenceData(source)
    if isinstance(data.train, list | tuple) and len(data.train) == 0:
        raise ValueError("PreferenceData.train is empty: preference training needs at least one pair")
    # the checks of the file loader, for the Python API too (dicts become pairs; a bad item names its index)
    test = validate_pairs(data.test, "PreferenceData.test") if data.test else None
    return PreferenceData(validate_pairs(data.train, "PreferenceData.train"), test, data.evaluate)


def split_shared_prefix(chosen: str, rejected: str) -> tuple[str, str, str]:
    """(prompt, chosen completion, rejected completion) from two full texts that begin with the same prompt.

    The cut lies inside the longest common prefix of the two texts, at the first of these that exists:
    1. just after the last "\\n\\nAssistant:" in it (HH-RLHF: the prompt is the dialogue up to the final
       assistant turn, and each completion is the whole final answer, even where the two answers begin alike);
    2. just before the last white space in it (a word boundary), so that a word both texts start alike
       ("gr|eat" / "gr|im") stays whole, and each completion keeps its leading space as GPT-2's BPE expects.
    Without either, there is no usable prompt and a ValueError is raised.
    """
    n = 0
    for a, b in zip(chosen, rejected):
        if a != b:
            break
        n += 1
    shared = chosen[:n]
    marker = shared.rfind(HH_ASSISTANT)
    if marker >= 0:
        cut = marker + len(HH_ASSISTANT)
    else:
        cut = max(shared.rfind(c) for c in " \t\n")
        if cut <= 0:
            raise ValueError(
                "chosen and rejected share no prompt (no common prefix up to a word boundary or an "
                f"{HH_ASSISTANT.strip()!r} turn); give a 'prompt' field"
            )
    return chosen[:cut], chosen[cut:], rejected[cut:]


def encode_preference_pairs(
    tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair], max_length: int | None = None
) -> dict[str, torch.Tensor]:
    """Chosen and rejected completions of B pairs in ONE batch of 2B rows (one forward pass for both):

        rows 0 .. B-1     prompt_i + chosen_i       (y_w)
        rows B .. 2B-1    prompt_i + rejected_i     (y_l)

    so `seq[:B]` and `seq[B:]` of any per-row result are the chosen and rejected halves. Layout and
    `max_length` as in `encode_prompt_completion`."""
    if len(pairs) == 0:
        raise ValueError("no preference pairs to encode")
    prompts = [p.prompt for p in pairs]
    completions = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    return encode_prompt_completion(tokenizer, prompts + prompts, completions, max_length=max_length)


def check_pair_lengths(
    tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair], max_length: int | None
) -> None:
    """The truncation policy, applied to the whole data set before training rather than at some later batch:
    a prompt must leave room for at least one completion token within `max_length` (else a ValueError names the
    pair); a longer completion is cut from the right (its EOS too), which is reported once with a warning."""
    if max_length is None or not pairs:
        return
    prompt_lengths = [len(ids) for ids in tokenizer([p.prompt for p in pairs], add_special_tokens=False)["input_ids"]]
    for i, n in enumerate(prompt_lengths):
        if n >= max_length:
            raise ValueError(
                f"pair {i}: the prompt ({pairs[i].prompt[:40]!r}...) has {n} tokens, which leaves no room for a "
                f"completion within max_length={max_length} (the model's context): shorten or drop such prompts"
            )
    cut = 0
    for field in ("chosen", "rejected"):
        completions = tokenizer([getattr(p, field) for p in pairs], add_special_tokens=False)["input_ids"]
        cut += sum(n + len(c) + 1 > max_length for n, c in zip(prompt_lengths, completions))  # + 1: the EOS
    if cut:
        warnings.warn(
            f"{cut} of {2 * len(pairs)} completions do not fit in max_length={max_length} tokens with their prompt "
            f"and EOS: they are cut from the right (prompts are never cut)",
            stacklevel=2,
        )


def validate_pairs(pairs: object, where: str) -> list[PreferencePair]:
    """The Python API's pairs, checked like a file's rows: a list of `PreferencePair`s or of dicts with the fields
    prompt / chosen / rejected (or HH-style chosen / rejected), each a non-empty string, chosen != rejected. A bad
    item is a ValueError naming `where` (the argument), the item's index and the field."""
    if isinstance(pairs, str | bytes | dict | PreferencePair) or not isinstance(pairs, list | tuple):
        raise ValueError(f"{where} must be a list of PreferencePair (or of dicts with prompt/chosen/rejected), "
                         f"got {type(pairs).__name__}")
    rows = [asdict(p) if isinstance(p, PreferencePair) else p for p in pairs]
    return _collect(enumerate(rows), where, "item", skip_invalid=False)


def save_preference_pairs(pairs: list[PreferencePair], path: str | os.PathLike) -> Path:
    """Write pairs as JSONL with the standard columns prompt / chosen / rejected."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for pair in pairs:
            f.write(json.dumps(asdict(pair)) + "\n")
    return path


def _pair_from_row(row: object) -> PreferencePair:
    """Validate one row; a ValueError message starts with the offending field."""
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object with prompt/chosen/rejected, got {type(row).__name__}")
    fields = ("prompt", "chosen", "rejected") if "prompt" in row else ("chosen", "rejected")
    for name in fields:
        if name not in row or row[name] is None:
            raise ValueError(
                f"missing field {name!r} (a row needs 'prompt', 'chosen' and 'rejected', or HH-style full "
                f"texts 'chosen' and 'rejected' only)"
            )
        value = row[name]
        if not isinstance(value, str):
            hint = " (conversational message lists are not supported)" if isinstance(value, list) else ""
            raise ValueError(f"field {name!r} must be a string, got {type(value).__name__}{hint}")
        if not value.strip():
            raise ValueError(f"field {name!r} is empty")
        check_text(value, "", name)  # _collect names the file and line
    if row["chosen"] == row["rejected"]:
        raise ValueError("field 'rejected' is identical to 'chosen': a pair must compare two different texts")
    if "prompt" in row:
        return PreferencePair(row["prompt"], row["chosen"], row["rejected"])
    try:
        prompt, chosen, rejected = split_shared_prefix(row["chosen"], row["rejected"])
    except ValueError as err:
        raise ValueError(f"field 'chosen'/'rejected' (HH-style row): {err}") from None
    for name, value in (("chosen", chosen), ("rejected", rejected)):
        if not value.strip():
            raise ValueError(f"field {name!r} (HH-style row) is empty after removing the shared prompt")
    return PreferencePair(prompt, chosen, rejected)


def _pairs_from_jsonl(path: Path, skip_invalid: bool) -> list[PreferencePair]:
    """Parse a JSONL file line by line, so that every error can name its line number (1-based)."""
    rows = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                rows.append((number, _BadJSON(f"not UTF-8 text (byte {err.start + 1})")))
                continue
            if number == 1:
                line = line.removeprefix(BYTE_ORDER_MARK)  # a mark at the file's start is no part of the data
            if not line.strip():
                continue
            try:
                rows.append((number, load_json_line(line)))
            except DuplicateKeyError as err:
                rows.append((number, _BadJSON(str(err))))
            except json.JSONDecodeError as err:
                rows.append((number, _BadJSON(f"invalid JSON ({err.msg} at column {err.colno})")))
            except (ValueError, RecursionError) as err:  # e.g. an integer of 5000 digits, or nesting 10^5 deep
                rows.append((number, _BadJSON(f"invalid JSON ({type(err).__name__}: {str(err)[:80]})")))
    if not rows:
        raise ValueError(f"{path} is empty: it holds no preference pairs")
    return _collect(rows, str(path), "line", skip_invalid)


def _pairs_from_json(path: Path, skip_invalid: bool) -> list[PreferencePair]:
    """A .json file: one JSON array of pair objects, or one object per line (read as JSONL). The rules are the
    JSONL file's: an object naming a key twice is refused, naming its item and line."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8").removeprefix(BYTE_ORDER_MARK)
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text (byte {err.start + 1})") from None
    start = len(text) - len(text.lstrip())
    if not text[start:start + 1] == "[":  # not one array: JSON Lines in a .json file
        return _pairs_from_jsonl(path, skip_invalid)
    decoder, rows, at = json.JSONDecoder(object_pairs_hook=_unique_keys), [], start + 1
    while True:
        at += len(text[at:]) - len(text[at:].lstrip())
        if text[at:at + 1] == "]" and not rows:
            break
        line = text.count("\n", 0, at) + 1
        try:
            row, at = decoder.raw_decode(text, at)
        except DuplicateKeyError as err:
            row = _BadJSON(f"{err} (line {line})")
            at = _skip_value(text, at)
        except json.JSONDecodeError as err:  # its line and column count from the file's start
            raise UserError(f"{path}, line {err.lineno}: invalid JSON ({err.msg} at column {err.colno})") from None
        except (ValueError, RecursionError) as err:  # an integer of 5000 digits, nesting 10^5 deep
            raise UserError(f"{path}, line {line}: invalid JSON ({type(err).__name__}: {str(err)[:80]})") from None
        rows.append((len(rows), row))
        at += len(text[at:]) - len(text[at:].lstrip())
        if text[at:at + 1] == "]":
            break
        if text[at:at + 1] != ",":
            raise UserError(f"{path}, line {text.count(chr(10), 0, at) + 1}: invalid JSON (expected ',' or ']')")
        at += 1
    if text[at + 1:].strip():
        raise UserError(f"{path}, line {text.count(chr(10), 0, at + 1) + 1}: invalid JSON (extra data after the array)")
    if not rows:
        raise ValueError(f"{path} is empty: it holds no preference pairs")
    return _collect(rows, str(path), "item", skip_invalid)


def _skip_value(text: str, at: int) -> int:
    """The end of the JSON value that starts at `at`, read without the duplicate-key rule (to go on to the next)."""
    return json.JSONDecoder().raw_decode(text, at)[1]


def _pairs_from_rows(rows, where: str, unit: str, skip_invalid: bool) -> list[PreferencePair]:
    numbered = list(enumerate(rows))
    if not numbered:
        raise ValueError(f"{where} is empty: it holds no preference pairs")
    return _collect(numbered, where, unit, skip_invalid)


class _BadJSON:
    def __init__(self, message: str):
        self.message = message


def _collect(numbered_rows, where: str, unit: str, skip_invalid: bool) -> list[PreferencePair]:
    pairs, skipped, first_error = [], 0, None
    for number, row in numbered_rows:
        try:
            if isinstance(row, _BadJSON):
                raise ValueError(row.message)
            pairs.append(_pair_from_row(row))
        except ValueError as err:
            message = f"{where}, {unit} {number}: {err}"
            if not skip_invalid:
                raise ValueError(message) from None
            skipped += 1
            first_error = first_error or message
    if skipped:
        warnings.warn(
            f"skipped {skipped} invalid row(s) of {skipped + len(pairs)} in {where}; first: {first_error}",
            stacklevel=3,
        )
    if not pairs:
        raise ValueError(f"{where} holds no valid preference pair ({skipped} invalid rows skipped)")
    return pairs


PAIR_SET = ("preference dataset", "'prompt', 'chosen' and 'rejected' fields")  # (what, the fields its rows hold)


def _rows_from_datasets(source: str, split: str, local: bool, kind: tuple[str, str] = PAIR_SET) -> list[dict]:
    """Rows of a local file/folder or a hub dataset via `datasets.load_dataset`. The hub is probed first, so that
    an offline machine gets a clear error in seconds instead of a minute of retries. `kind`: what the rows are and
    the fields they hold, for the errors."""
    import datasets

    what, holding = kind
    if local:
        path = Path(source)
        if path.is_file():
            builder = {".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(path.suffix)
            if builder is None:
                raise ValueError(f"{path}: unknown {what} file type {path.suffix!r}; use .jsonl, .json, .csv "
                                 f"or .parquet")
            if builder == "csv":
                _check_csv_header(path)
            try:
                return list(datasets.load_dataset(builder, data_files=str(path), split="train"))
            except Exception as err:  # datasets wraps the parser's error in a DatasetGenerationError
                cause = err
                while cause.__cause__ is not None or cause.__context__ is not None:
                    cause = cause.__cause__ or cause.__context__
                raise ValueError(f"{path} cannot be read as a {path.suffix} file of {what} rows: "
                                 f"{type(cause).__name__}: {str(cause)[:200]}") from err
        return list(datasets.load_dataset(str(path), split=split))
    shipped = f", or the shipped data: {sorted(PREFERENCE_DATASETS)}" if kind == PAIR_SET else ""
    require_hub(f"{what} {source!r}", f"and it is not a local file or folder. Use a local JSONL file with {holding}"
                f"{shipped}")
    return list(datasets.load_dataset(source, split=split))


def _check_csv_header(path: Path) -> None:
    """A CSV header naming a column twice is refused, as a JSON key written twice is (pandas would rename the second
    `chosen.1` and the pair would silently take the first)."""
    import csv

    with path.open(newline="", encoding="utf-8-sig", errors="replace") as f:
        header = next(csv.reader(f), [])
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise UserError(f"{path}, line 1: column {twice[0]!r} appears twice in the header: which one is meant cannot "
                        "be known, keep one")


# ----------------------------------------------------------------------------- unpaired examples (KTO)


@dataclass(frozen=True)
class UnpairedExample:
    """One completion of a prompt with a thumbs-up or thumbs-down label: the data KTO learns from."""

    prompt: str
    completion: str
    desirable: bool


def unpaired_examples(pairs: list[PreferencePair]) -> list[UnpairedExample]:
    """Split each pair (x, y_w, y_l) into two unpaired examples, (x, y_w) desirable and (x, y_l) undesirable,
    in the order [y_w of pair 0, y_l of pair 0, y_w of pair 1, ...]: as many desirable as undesirable examples.

    The two examples of a pair share their prompt, so a KL estimate from mismatched pairs (KTO's z_ref) must not
    pair one with the other's completion: that completion was written for the same prompt."""
    if len(pairs) == 0:
        raise ValueError("no preference pairs to split into unpaired examples")
    examples = []
    for pair in pairs:
        examples.append(UnpairedExample(pair.prompt, pair.chosen, desirable=True))
        examples.append(UnpairedExample(pair.prompt, pair.rejected, desirable=False))
    return examples
