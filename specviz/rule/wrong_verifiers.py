"""Deliberately wrong verifiers and drafters, kept to be caught: the controls of the exactness tests and the
bugs of lesson 7. Each reproduces a way engines broke (or were suspected of breaking) speculative sampling, and
its docstring says what is wrong and where such a bug was reported. None is used by the engine unless passed as
its verifier. verify_by_match is here too: it looks like a bug and is not one."""
from __future__ import annotations

import torch

from .sampling import draw
from .verify import Verdict, leading_true, verify_sampled


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

# the verifiers the device loop has, by the host verifier they stand for: whether each resamples from the residual
ON_DEVICE = {verify_sampled: True, verify_sampled_without_residual: False}
