"""Verification: pure tensor functions, names as in Leviathan et al. (2023) and Chen et al. (2023).

gamma draft tokens x_1..x_gamma; the target scored gamma + 1 positions in one forward pass:
p[i] is the target's distribution for the token after the first i draft tokens (p[gamma] gives the bonus).
q[i] is the drafter's distribution that x_{i+1} was drawn from; None means a drafter with no distribution
(n-gram lookup, argmax heads), i.e. a one-hot q.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import draw


@dataclass
class Verdict:
    n_accepted: int
    next_token: int  # resampled at the first rejection, or the bonus token when all were accepted
    accept_probs: list[float]  # min(1, p/q) for each draft position (1/0 for greedy)
    uniforms: list[float] | None  # the draws compared with accept_probs; None for greedy
    next_distribution: torch.Tensor | None  # [V]: what next_token was drawn from (the residual after a
    # rejection); None for greedy, where it is the one-hot at next_token


def leading_true(mask: torch.Tensor) -> int:
    """Number of leading True values of a 1-D bool tensor."""
    return int(mask.long().cumprod(0).sum().item()) if mask.numel() else 0


def verify_greedy(draft_ids: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """Accept x_i iff it is the target's argmax; the next token is the target's argmax after the accepted ones.
    draft_ids [gamma], target_logits [gamma + 1, V]. One device-to-host transfer (the argmaxes); the rest
    is host arithmetic on gamma + 1 numbers."""
    return greedy_verdict(draft_ids.tolist(), target_logits.argmax(-1).tolist())


def greedy_verdict(drafted: list[int], choices: list[int]) -> Verdict:
    """verify_greedy on the host, from the target's argmaxes at the gamma + 1 positions (a batch reads every
    row's in one transfer)."""
    n_accepted = 0
    while n_accepted < len(drafted) and drafted[n_accepted] == choices[n_accepted]:
        n_accepted += 1
    return Verdict(
        n_accepted=n_accepted,
        next_token=choices[n_accepted],
        accept_probs=[float(d == c) for d, c in zip(drafted, choices)],
        uniforms=None,
        next_distribution=None,
    )


def residual_distribution(p: torch.Tensor, q: torch.Tensor | None, rejected_token: int) -> torch.Tensor:
    """norm(max(0, p - q)) [V]. A one-hot q removes the rejected token from p."""
    if q is None:
        residual = p.clone()
        residual[rejected_token] = 0.0
    else:
        residual = (p - q).clamp_min(0.0)
    total = residual.sum()
    if total <= 0:  # p == q up to rounding: a rejection then has probability ~0; fall back to p
        return p
    return residual / total


def verify_sampled(
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> Verdict:
    """Speculative sampling: accept x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection
    draw from norm(max(0, p_i - q_i)); if all are accepted draw the bonus token from p_{gamma+1}.
    The output then has exactly the target's distribution.
    draft_ids [gamma], draft_probs [gamma, V] or None, target_probs [gamma + 1, V]."""
    gamma = draft_ids.shape[0]
    rows = torch.arange(gamma, device=draft_ids.device)
    p_of_draft = target_probs[rows, draft_ids]
    if draft_probs is None:
        q_of_draft = torch.ones_like(p_of_draft)
    else:
        q_of_draft = draft_probs[rows, draft_ids]
    # q(x) > 0 because x was drawn from q; the guard only keeps a 0/0 from turning into NaN
    accept_probs = torch.where(q_of_draft > 0, (p_of_draft / q_of_draft.clamp_min(1e-30)).clamp(max=1.0), 1.0)
    uniforms = torch.rand(gamma, generator=generator, device=generator.device).to(accept_probs.device)
    n_accepted = leading_true(uniforms < accept_probs)
    if n_accepted < gamma:
        q_row = None if draft_probs is None else draft_probs[n_accepted]
        next_distribution = residual_distribution(target_probs[n_accepted], q_row, int(draft_ids[n_accepted]))
    else:
        next_distribution = target_probs[gamma]
    next_token = int(draw(next_distribution, generator))
    return Verdict(
        n_accepted=n_accepted,
        next_token=next_token,
        accept_probs=accept_probs.tolist(),
        uniforms=uniforms.tolist(),
        next_distribution=next_distribution,
    )


# On the device (device_loop.py): the same rule as tensor functions that read nothing back to the host, with the
# uniforms and the final draw's noise given (drawn from the run's generator by the caller).

def accept_sampled(p: torch.Tensor, q: torch.Tensor | None, draft: torch.Tensor, draft_length: torch.Tensor,
                   uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """verify_sampled's acceptance: p [G + 1, V], q [G, V] or None (one-hot), draft [G] (its first draft_length
    real), uniforms [G] -> (min(1, p_i(x_i) / q_i(x_i)) [G], accepted n [])."""
    gamma = draft.shape[0]
    p_of_draft = p[:gamma].gather(1, draft[:, None])[:, 0]
    q_of_draft = torch.ones_like(p_of_draft) if q is None else q.gather(1, draft[:, None])[:, 0]
    accept = torch.where(q_of_draft > 0, (p_of_draft / q_of_draft.clamp_min(1e-30)).clamp(max=1.0), 1.0)
    real = torch.arange(gamma, device=draft.device) < draft_length
    return accept, ((uniforms < accept) & real).int().cumprod(0).sum()


def next_distribution(p: torch.Tensor, q: torch.Tensor | None, draft: torch.Tensor, draft_length: torch.Tensor,
                      accepted: torch.Tensor, residual: bool = True) -> torch.Tensor:
    """What verify_sampled draws the next token from: after a rejection at n (accepted < draft_length) the
    residual norm(max(0, p_n - q_n)) (one-hot q: p_n without x_n), else p_n (the bonus). residual=False is
    verify_sampled_without_residual's mistake (p_n after a rejection too), kept as a control."""
    row = p.index_select(0, accepted[None])[0]
    if not residual:
        return row
    at = accepted.clamp(max=draft.shape[0] - 1)[None] if draft.shape[0] else accepted[None]
    if q is None:
        left = row.scatter(0, draft.index_select(0, at), 0.0) if draft.shape[0] else row
    else:
        left = (row - q.index_select(0, at)[0]).clamp_min(0.0)
    left = torch.where(accepted < draft_length, left, row)
    total = left.sum()
    return torch.where(total > 0, left / total.clamp_min(1e-30), row)  # p == q up to rounding: p, as on the host
