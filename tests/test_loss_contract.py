"""The losses keep their own contract: an inf or NaN on a real token is a ValueError naming the argument."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType
from typing import Any

import pytest
import torch

from minirlhf import losses

# Every public loss (a function of the minirlhf.losses package named *_loss, in whichever chapter module) promises
# that an inf or NaN on a real token is a ValueError naming the argument. The modules, their losses and the losses'
# tensor arguments are found by introspection, so a new loss, or a new module, is walked too (and fails below until
# each loss has an entry in VALID_INPUTS).


def _modules() -> list[ModuleType]:
    """Every module of the minirlhf.losses package: the chapters, the aggregation they share, the contract."""
    return [importlib.import_module(f"{losses.__name__}.{info.name}") for info in pkgutil.iter_modules(losses.__path__)]


def _public_functions() -> dict[str, Any]:
    """The public functions defined in the package's modules (not the names a module imports from another)."""
    return {name: fn for module in _modules() for name, fn in inspect.getmembers(module, inspect.isfunction)
            if fn.__module__ == module.__name__ and not name.startswith("_")}


def _public_losses() -> dict[str, Any]:
    return {name: fn for name, fn in _public_functions().items() if name.endswith("_loss")}


def _tensor_arguments(fn) -> list[str]:
    """The arguments that take tensors of values (not the mask of real tokens, not KTO's labels)."""
    return [name for name, p in inspect.signature(fn).parameters.items()
            if "Tensor" in str(p.annotation) and name not in ("mask", "desirable")]


def _logps(*shape: int) -> torch.Tensor:
    return -torch.rand(*shape, dtype=torch.float64) - 0.1


VALID_INPUTS = {  # loss -> valid arguments (B = 2 sequences of 3 real tokens)
    "bradley_terry_loss": lambda: dict(chosen_scores=torch.randn(2), rejected_scores=torch.randn(2)),
    "dpo_loss": lambda: dict(policy_chosen_logps=_logps(2), policy_rejected_logps=_logps(2),
                             ref_chosen_logps=_logps(2), ref_rejected_logps=_logps(2), beta=0.1,
                             chosen_lengths=torch.full((2,), 3.0), rejected_lengths=torch.full((2,), 3.0),
                             all_chosen_lengths=torch.full((4,), 3.0)),
    "bradley_terry_per_pair_loss": lambda: VALID_INPUTS["bradley_terry_loss"](),
    "grpo_loss": lambda: dict(logp=_logps(2, 3), old_logp=_logps(2, 3), ref_logp=_logps(2, 3),
                              advantages=torch.randn(2), mask=torch.ones(2, 3), eps=0.2, beta=0.04,
                              behaviour_logp=_logps(2, 3), behaviour_correction="token-truncate"),
    "grpo_per_token_loss": lambda: VALID_INPUTS["grpo_loss"](),
    "clip_cov_per_token_loss": lambda: dict(logp=_logps(2, 3), old_logp=_logps(2, 3), advantages=torch.randn(2),
                                            mask=torch.ones(2, 3), eps=0.2),
    "kl_cov_per_token_loss": lambda: dict(logp=_logps(2, 3), old_logp=_logps(2, 3), advantages=torch.randn(2),
                                          mask=torch.ones(2, 3)),
    "clip_cov_loss": lambda: VALID_INPUTS["clip_cov_per_token_loss"](),
    "kl_cov_loss": lambda: VALID_INPUTS["kl_cov_per_token_loss"](),
    "kto_loss": lambda: dict(policy_logps=_logps(2), ref_logps=_logps(2), desirable=torch.tensor([True, False]),
                             policy_kl_logps=_logps(3), ref_kl_logps=_logps(3), beta=0.1),
    "orpo_loss": lambda: dict(policy_chosen_logps=_logps(2), policy_rejected_logps=_logps(2),
                              chosen_lengths=torch.full((2,), 3.0), rejected_lengths=torch.full((2,), 3.0), lam=0.1),
    "ppo_clip_loss": lambda: dict(logp=_logps(2, 3), old_logp=_logps(2, 3), advantages=torch.randn(2, 3),
                                  mask=torch.ones(2, 3), eps=0.2),
    "ppo_clip_per_token_loss": lambda: VALID_INPUTS["ppo_clip_loss"](),
    "reinforce_loss": lambda: dict(logp=_logps(2, 3), advantages=torch.randn(2), mask=torch.ones(2, 3)),
    "reinforce_per_token_loss": lambda: VALID_INPUTS["reinforce_loss"](),
    "simpo_loss": lambda: dict(policy_chosen_logps=_logps(2), policy_rejected_logps=_logps(2),
                               chosen_lengths=torch.full((2,), 3.0), rejected_lengths=torch.full((2,), 3.0),
                               beta=2.0, gamma=0.5),
    "value_loss": lambda: dict(values=torch.randn(2, 3), old_values=torch.randn(2, 3), returns=torch.randn(2, 3),
                               mask=torch.ones(2, 3), clip=0.2),
    "value_per_token_loss": lambda: VALID_INPUTS["value_loss"](),
    "generalized_jsd_loss": lambda: dict(logits=torch.randn(2, 3, 5), teacher_logits=torch.randn(2, 3, 5),
                                         mask=torch.ones(2, 3), beta=0.5),
    "generalized_jsd_per_token_loss": lambda: VALID_INPUTS["generalized_jsd_loss"](),
}


@pytest.mark.parametrize("loss_name, argument, bad", [
    (name, argument, bad) for name, fn in _public_losses().items() for argument in _tensor_arguments(fn)
    for bad in (float("nan"), float("inf"))
])
def test_every_loss_names_the_argument_that_holds_inf_or_nan(loss_name, argument, bad):
    loss = _public_losses()[loss_name]
    inputs = VALID_INPUTS[loss_name]()
    loss(**inputs)  # the valid inputs pass
    broken = inputs[argument].clone()
    broken.view(-1)[-1] = bad  # the last real token
    with pytest.raises(ValueError, match=rf"\b{argument}\b"):
        loss(**inputs | {argument: broken})


def test_the_walk_covers_every_public_loss():
    assert set(_public_losses()) == set(VALID_INPUTS)
    assert len(_public_losses()) >= 14 and all(_tensor_arguments(fn) for fn in _public_losses().values())


def test_the_walk_reads_every_chapter():
    """The walk reads the package's modules, each chapter's losses among them (not only what __init__ imports)."""
    chapters = {module.__name__.rpartition(".")[2] for module in _modules()}
    assert {"policy_gradient", "ppo", "grpo", "preference", "aggregation", "_contract"} <= chapters
    assert {fn.__module__ for fn in _public_losses().values()} >= {
        "minirlhf.losses.policy_gradient", "minirlhf.losses.ppo", "minirlhf.losses.grpo", "minirlhf.losses.preference"}


def test_the_package_exports_every_public_name_of_its_modules():
    """`from minirlhf.losses import X` works for every public function and constant of every module, X is the
    module's own object, and no two modules define the same public name."""
    defined = [(name, module) for module in _modules() for name, value in vars(module).items()
               if not name.startswith("_") and (getattr(value, "__module__", None) == module.__name__
                                                or (name.isupper() and isinstance(value, (int, float, str, tuple))))]
    names = [name for name, _ in defined]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert set(names) == set(losses.__all__), set(names) ^ set(losses.__all__)
    for name, module in defined:
        assert getattr(losses, name) is getattr(module, name), name


# The public functions of the losses package on tensors that are not losses (its own words: a loss is named *_loss
# and returns something to minimise); the contract above is not theirs: an elementwise estimator maps each input to
# its output, and the rest are the losses' helpers and logging.
NOT_LOSSES = {
    "estimators": {"kl_k1", "kl_k2", "kl_k3", "clipped_surrogate", "sequence_ratio", "ema_baseline", "gae",
                   "grpo_advantages", "rloo_advantages", "reinforce_plus_plus_advantages", "kl_shaped_rewards",
                   "token_rewards", "dual_clip_surrogate", "cispo_surrogate", "sapo_surrogate", "gmpo_log_ratio",
                   "gmpo_ratio", "ratio_objective", "behaviour_log_ratio", "behaviour_weight", "token_covariance"},
    "helpers": {"aggregate", "masked_sum", "masked_mean", "masked_whiten", "informative_groups", "mask_truncated",
                "ratio_function_grid", "clip_cov_candidates", "clip_cov_selection", "kl_cov_selection",
                "entropy_bonus"},  # the bonus: a term a loss adds
    "logging": {"explained_variance", "pair_accuracy", "behaviour_metrics", "covariance_share"},
}


def test_every_public_function_on_tensors_is_a_walked_loss_or_named_as_no_loss():
    """A new function of any module of the losses package on tensors fails here until it is either walked as a loss
    (VALID_INPUTS, which it must be when named *_loss) or named in NOT_LOSSES: a loss under another name cannot slip
    past the walk."""
    on_tensors = {name for name, fn in _public_functions().items() if _tensor_arguments(fn)}
    not_losses = set().union(*NOT_LOSSES.values())
    assert not not_losses & set(VALID_INPUTS), not_losses & set(VALID_INPUTS)
    assert on_tensors == set(VALID_INPUTS) | not_losses, (on_tensors ^ (set(VALID_INPUTS) | not_losses))
