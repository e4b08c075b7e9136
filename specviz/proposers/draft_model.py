"""`draft`: a separate causal LM (or, for `early-exit`, a cut of the target) with its own KV cache, kept in
step with the target's accepted sequence after every step."""
from __future__ import annotations

import torch

from ..models.loading import check_same_vocabulary
from ..options import EngineOptions
from ..runners.static import StaticRunner, make_runner
from .base import Draft, Feedback, Proposer, ProposerRequest


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case, compared in C
        return n
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def doubts(logits: torch.Tensor, token: int, threshold: float) -> bool:
    """Whether a drafter gives its own token less than `threshold` probability (softmax of its logits, before
    any sampling warp). Ending a draft there keeps verification exact: the length depends on the draft alone."""
    return threshold > 0 and float(logits.float().softmax(-1)[token]) < threshold


def fit_vocabulary(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Drafter logits [..., V_d] -> [..., vocab_size]: models of one family can pad their output layers to
    different sizes (Qwen2.5-0.5B 151,936, -7B 152,064); ids past the real vocabulary are never drafted."""
    size = logits.shape[-1]
    if size > vocab_size:
        return logits[..., :vocab_size]
    if size < vocab_size:
        pad = logits.new_full((*logits.shape[:-1], vocab_size - size), float("-inf"))
        return torch.cat([logits, pad], dim=-1)
    return logits


def spread_vocabulary(logits: torch.Tensor, token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Logits over a draft vocabulary [..., V_d] (the scores of token_ids) -> [..., vocab_size], -inf for every
    other id: q is zero outside the tokens the drafter scores."""
    full = logits.new_full((*logits.shape[:-1], vocab_size), float("-inf"))
    return full.index_copy_(-1, token_ids, logits)


def to_target_vocabulary(logits: torch.Tensor, token_ids: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """A draft model's logits over the target's vocabulary: a draft vocabulary's scores spread to their ids
    (a distilled draft model, distilled.py), else the output layer's rows fitted to the target's size."""
    if token_ids is not None:
        return spread_vocabulary(logits, token_ids.to(logits.device), vocab_size)
    return fit_vocabulary(logits, vocab_size)


class ModelDrafter(Proposer):
    """Drafts autoregressively with a causal LM: up to gamma one-token forwards, sampling from q with the
    run's settings (argmax when greedy); with settings.draft_stop, the chain ends after a token the drafter
    doubts."""

    name = "draft"

    def __init__(self, model: torch.nn.Module, vocab_size: int, options: EngineOptions | None = None):
        # the fast path (static cache, CUDA graphs) where supported
        self.runner = make_runner(model, options=options, exact=False)
        self.vocab_size = vocab_size  # the target's: q must cover the same ids as p
        # a distilled draft model scores only some token ids (distilled.py); others score the whole vocabulary
        self.token_ids = getattr(model, "draft_vocab", None)
        self.cached_ids: list[int] = []  # the tokens whose keys and values are in the runner's cache
        self.sequence: list[int] = []  # host mirror of the accepted sequence

    def runners(self) -> list:
        return [self.runner]

    def reset(self, prompt_ids, settings, generator, target_hidden=None) -> None:
        super().reset(prompt_ids, settings, generator)
        self.runner.reset()
        self.cached_ids = []
        self.sequence = prompt_ids.tolist()  # host mirror of the accepted sequence

    def _rollback_to_common_prefix(self, ids: list[int], keep_last: bool) -> int:
        keep = common_prefix_length(self.cached_ids, ids)
        if keep_last:  # the last token must be fed again to get the logits that follow it
            keep = min(keep, len(ids) - 1)
        self.runner.rollback(keep)
        del self.cached_ids[keep:]
        return keep

    def _feed(self, ids: list[int]) -> torch.Tensor:
        logits, _ = self.runner.forward(torch.tensor(ids, dtype=torch.long), logits_for="last")
        self.cached_ids.extend(ids)
        return to_target_vocabulary(logits[-1], self.token_ids, self.vocab_size)

    def _accepted(self, tokens: torch.Tensor) -> list[int]:
        if len(self.sequence) != tokens.shape[0]:  # a caller that skipped observe()
            self.sequence = tokens.tolist()
        return self.sequence

    def propose(self, tokens: torch.Tensor, gamma: int) -> Draft:
        ids = self._accepted(tokens)
        keep = self._rollback_to_common_prefix(ids, keep_last=True)
        logits = self._feed(ids[keep:])
        drafted, all_probs, all_logits, doubted = [], [], [], False
        for i in range(gamma):
            token, probs = self.choose(logits)  # q
            drafted.append(token)
            all_probs.append(probs)
            all_logits.append(logits)
            doubted = doubts(logits, token, self.settings.draft_stop)
            if doubted:
                break
            if i + 1 < gamma:
                logits = self._feed([token])
        device = tokens.device
        return Draft(
            token_ids=torch.tensor(drafted, dtype=torch.long),  # on the host, where the engine reads them
            probs=torch.stack(all_probs).to(device),
            logits=torch.stack(all_logits).to(device),
            doubted=doubted and len(drafted) < gamma,  # the last of a full chain ends it anyway
        )

    def device_lookup(self, settings, runner):
        """Its chains on the device (draft_model_device.py) where it drafts on the fast path beside the target."""
        if not isinstance(self.runner, StaticRunner) or self.runner.device != runner.device:
            return None
        from .draft_model_device import DraftModelLookup

        return DraftModelLookup(self.runner, self.vocab_size, self.token_ids, settings.gamma, settings.draft_stop)

    def observe(self, feedback: Feedback) -> None:
        # Drop the rejected drafts now, so that the cache always holds a prefix of the accepted sequence.
        if feedback.new_ids is not None and len(self.sequence) + len(feedback.new_ids) == feedback.tokens.shape[0]:
            self.sequence.extend(feedback.new_ids)
        else:
            self.sequence = feedback.tokens.tolist()
        self._rollback_to_common_prefix(self.sequence, keep_last=False)


def build(request: ProposerRequest) -> ModelDrafter:
    """`draft`'s proposer (specviz.methods): the draft model given (api.check_drafter has checked there is one),
    on the target's vocabulary."""
    check_same_vocabulary(request.target, request.draft)
    return ModelDrafter(request.draft.model, request.target.vocab_size, request.options)
