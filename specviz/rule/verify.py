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


# Deliberately wrong verifiers and drafters -----------------------------------------------------------------------
# Controls for the exactness tests and lesson 7: each one reproduces a way engines broke (or were suspected of
# breaking) speculative sampling, and each docstring says what is wrong and where such a bug was reported. None is
# used by the engine unless passed as its verifier. verify_by_match is here too: it looks like a bug and is not one.

def verify_sampled_without_residual(
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> Verdict:
    """Wrong: it accepts as verify_sampled does, but at a rejection it draws from p instead of
    norm(max(0, p - q)). The output then over-weights the tokens the drafter favours (they get a second chance).
    Claimed of EAGLE's non-greedy path, which draws the replacement from the target's p alone (SafeAILab/EAGLE
    #329, open; its authors hold that its top-k drafting makes q one-hot, #171); a reader suspected it in NJUNLP/MCSD
    (#5), whose code in fact draws from the residual it had written into p."""
    verdict = verify_sampled(draft_ids, draft_probs, target_probs, generator)
    if verdict.n_accepted < draft_ids.shape[0]:
        distribution = target_probs[verdict.n_accepted]
        verdict.next_token = int(draw(distribution, generator))
        verdict.next_distribution = distribution
    return verdict


def verify_residual_unnormalised(
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> Verdict:
    """Wrong: at a rejection it draws from max(0, p - q) without dividing by its total, by the inverse of the
    cumulative sum with one uniform u in [0, 1), as a hand-written sampling kernel does. The residual's total is
    below 1, so whenever u lands past it the draw runs off the end and returns the vocabulary's last token.
    torch.multinomial normalises its input itself, so there the same omission is harmless. No engine was found to
    have shipped it."""
    verdict = verify_sampled(draft_ids, draft_probs, target_probs, generator)
    n = verdict.n_accepted
    if n < draft_ids.shape[0]:
        p = target_probs[n]
        if draft_probs is None:
            residual = p.clone()
            residual[int(draft_ids[n])] = 0.0
        else:
            residual = (p - draft_probs[n]).clamp_min(0.0)
        u = torch.rand(1, generator=generator, device=generator.device).to(p.device)
        verdict.next_token = int(torch.searchsorted(residual.cumsum(0), u).clamp(max=p.shape[0] - 1))
        verdict.next_distribution = residual
    return verdict


def verify_residual_at_drafted_token(
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> Verdict:
    """Wrong: at a rejection the residual subtracts q only at the rejected token x, norm(p with p(x) replaced by
    max(0, p(x) - q(x))), instead of everywhere, norm(max(0, p - q)). Tokens the drafter also favoured keep their
    whole p and come out too often (for a one-hot q the two are the same). Reported in EAGLE's sampling code,
    SafeAILab/EAGLE #20; its authors: "The correct approach should be to subtract the two distributions rather
    than adjust the value of the rejected elements", and fixed it."""
    verdict = verify_sampled(draft_ids, draft_probs, target_probs, generator)
    n = verdict.n_accepted
    if n < draft_ids.shape[0] and draft_probs is not None:
        x = int(draft_ids[n])
        residual = target_probs[n].clone()
        residual[x] = (residual[x] - draft_probs[n, x]).clamp_min(0.0)
        residual = residual / residual.sum()
        verdict.next_token = int(draw(residual, generator))
        verdict.next_distribution = residual
    return verdict


def verify_target_before_temperature(
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
    temperature: float = 1.0,
) -> Verdict:
    """Wrong: the target's probabilities are taken before temperature while the drafter's q is after it. The engine
    hands a verifier p after temperature; softmax(logits / T) ** T renormalised is softmax(logits), so this undoes
    the temperature (exactly so without top-k and top-p) and then verifies as verify_sampled does: the output
    follows the target at temperature 1, not at T. Shipped in vLLM's scorer, which took the target's probabilities
    at temperature 1 and top-p 1 while the drafter's were filtered (vllm-project/vllm #9834, fixed by #10198, "apply
    sampling parameters to target probabilities for consistency in rejection sampling")."""
    untempered = target_probs.double().pow(temperature)
    untempered = (untempered / untempered.sum(-1, keepdim=True)).to(target_probs.dtype)
    return verify_sampled(draft_ids, draft_probs, untempered, generator)


def verify_by_target_argmax(
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> Verdict:
    """Wrong: greedy verification under sampling. A draft is accepted while it equals the target's most likely
    token, and at the first mismatch the next token is drawn from p. Whenever the drafter proposes the target's
    favourite it is emitted for sure, so the output leans towards greedy decoding. lablup/mlxcel #902 described
    its verify loop so and called the output biased; mlxcel #992 then found the loop in fact matched a
    draw from the target (verify_by_match, which is exact): no engine was found to have shipped this rule."""
    choices = target_probs.argmax(-1)
    matches = draft_ids.to(choices.device) == choices[: draft_ids.shape[0]]
    n_accepted = leading_true(matches)
    next_distribution = target_probs[n_accepted]
    return Verdict(n_accepted=n_accepted, next_token=int(draw(next_distribution, generator)),
                   accept_probs=[float(m) for m in matches.tolist()], uniforms=None,
                   next_distribution=next_distribution)


def verify_by_match(
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> Verdict:
    """Match acceptance, NOT wrong: the target draws its own token y_i from p_i at every position; draft x_i is
    accepted while it equals y_i, and at the first mismatch y_i is the next token. Every emitted token is then a
    draw from p whatever the drafter did, so the output is exact; what it costs is acceptance, sum_x p(x) q(x)
    where verify_sampled accepts sum_x min(p(x), q(x)). It has been called a bug (ml-explore/mlx-swift-lm #459);
    lablup/mlxcel #992 proved and measured it exact ("It was never biased; what it loses is acceptance rate"), and
    vLLM's "strict" rejection sampling is this rule (vllm-project/vllm #35461: it "ensures that the target model's
    distribution is being respected")."""
    ys = draw(target_probs, generator)  # [gamma + 1]: the target's own draw at every position
    matches = draft_ids.to(ys.device) == ys[: draft_ids.shape[0]]
    n_accepted = leading_true(matches)
    return Verdict(n_accepted=n_accepted, next_token=int(ys[n_accepted]),
                   accept_probs=[float(m) for m in matches.tolist()],
                   uniforms=None, next_distribution=target_probs[n_accepted])


def draft_argmax_keeping_q(draft_probs: torch.Tensor) -> torch.Tensor:
    """A wrong drafter: it proposes its argmax (drafting at temperature 0) while the q it hands the verifier is its
    distribution at the run's temperature. The ratio p/q then assumes draws that never happened: the drafter's
    favourite is proposed every time and accepted with probability min(1, p/q), so it comes out too often.
    draft_probs [g, V] -> the tokens such a drafter proposes [g]. Shipped in transformers' assisted generation,
    which made the assistant decode greedily for speed (huggingface/transformers #30778), reported in
    #32867 and reverted by #33534 ("the assistant model must sample when the main model is
    sampling"); again in its SinglePositionMultiTokenCandidateGenerator (#47932), and in
    jaymody/speculative-sampling (#3, fixed by #4)."""
    return draft_probs.argmax(-1)


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


# the verifiers the device loop has, by the host verifier they stand for: whether each resamples from the residual
ON_DEVICE = {verify_sampled: True, verify_sampled_without_residual: False}
