"""`adaptive`: choose each step's draft length from what speculation has earned and cost so far in this run.

With per-token acceptance alpha, a draft of g tokens yields (1 - alpha^(g+1)) / (1 - alpha) tokens per step
(Leviathan et al. 2023) and costs g * d + t(g + 1): d the drafter's time per token, t(K) the target's time
to verify K positions. Both are measured as the run goes; each step takes the g in 0..gamma that maximises
tokens per second, where g = 0 is a plain decoding step. So speculation is used only where it pays, and a
few cheap probes keep the estimates fresh when it does not.

Two refinements that matter in practice:
- t(K) is kept per K (a GPU's cost is a step: K = 1 runs other kernels than K > 1), with a line fitted
  over all K for the sizes not seen yet;
- a drafter that costs nothing (n-gram lookup, `free_drafts = True`) is asked for its whole draft first,
  and alpha is kept per kind of draft the drafter reports (`draft_key`: for n-gram lookup, the size of the matched n-gram), so a
  confident 3-gram match and a weak 1-gram match are judged apart;
- with a `lookup` drafter beside a model drafter (n-gram lookup beside EAGLE), the free lookup goes first and
  the model drafts only where the lookup has nothing worth verifying: text copied from the prompt (extraction,
  summaries, RAG) is looked up, new text is drafted; each keeps its own alpha.
"""
from __future__ import annotations

from ..theory import expected_tokens_per_step
from .base import Draft, Feedback, Proposer

DECAY = 0.9  # weight of the past per step: recent text matters more (acceptance changes with content)


class DecayedLine:
    """Least-squares fit y = a + b * x over decayed observations, with a weak prior on the slope
    (b = prior_slope * a) so that it predicts sensibly from a single x."""

    def __init__(self, prior_slope: float, prior_weight: float = 0.5):
        self.prior_slope = prior_slope
        self.prior_weight = prior_weight
        self.w = self.sx = self.sy = self.sxx = self.sxy = 0.0

    def add(self, x: float, y: float) -> None:
        self.w, self.sx, self.sy = DECAY * self.w + 1, DECAY * self.sx + x, DECAY * self.sy + y
        self.sxx, self.sxy = DECAY * self.sxx + x * x, DECAY * self.sxy + x * y

    def predict(self, x: float) -> float | None:
        if self.w == 0:
            return None
        mean_x, mean_y = self.sx / self.w, self.sy / self.w
        variance = self.sxx / self.w - mean_x ** 2
        covariance = self.sxy / self.w - mean_x * mean_y
        # intercept at x = 1 under the prior slope, then a ridge estimate of the slope towards the prior
        prior_b = self.prior_slope * mean_y / (1 + self.prior_slope * (mean_x - 1))
        slope = (covariance * self.w + self.prior_weight * prior_b) / (variance * self.w + self.prior_weight)
        slope = max(0.0, slope)  # more positions never cost less; noisy timings must not say otherwise
        # a floor keeps a noisy fit from predicting a free (or negative-time) forward pass
        return max(mean_y + slope * (x - mean_x), 0.05 * mean_y, 1e-9)


class VerifyCosts:
    """Seconds of a target forward over K positions: a decayed mean per K once K has been seen (robust to
    a single slow outlier); for a K not seen yet, the line through all of them, but never less than for a
    smaller K already seen (a guess should not be the cheapest option). A measured K keeps its own time even
    when it is below a smaller K's: on a CPU, MKL runs 4 or 5 rows faster than 2 or 3."""

    def __init__(self):
        self.line = DecayedLine(prior_slope=0.05)
        self.by_size: dict[int, float] = {}

    def add(self, size: int, seconds: float) -> None:
        old = self.by_size.get(size)
        if old is not None:
            seconds = min(seconds, 2 * old)  # a scheduler hiccup moves the estimate, but not by much
        self.line.add(size, seconds)
        self.by_size[size] = seconds if old is None else DECAY * old + (1 - DECAY) * seconds

    def predict(self, size: int) -> float:
        if size in self.by_size:
            return self.by_size[size]
        known = [t for k, t in self.by_size.items() if k < size]
        return max([self.line.predict(size) or 0.0, *known])


def best_draft_length(alpha: float, draft_cost: float, verify_cost, gamma_max: int, margin: float = 0.05) -> int:
    """The g in 0..gamma_max with the most expected tokens per second; verify_cost(K) is the time of a
    target forward over K positions. Drafting must promise `margin` more than a plain step: measured
    costs are noisy, and a marginal gain is not worth the risk of a loss."""
    def rate(g: int) -> float:
        seconds = g * draft_cost + verify_cost(g + 1)
        return expected_tokens_per_step(alpha, g) / max(seconds, 1e-12)  # a fit can extrapolate to 0 s
    best = max(range(1, gamma_max + 1), key=rate, default=0)
    return best if best and rate(best) > (1 + margin) * rate(0) else 0


def truncate(draft: Draft, length: int) -> Draft:
    return Draft(draft.token_ids[:length], None if draft.probs is None else draft.probs[:length],
                 None if draft.logits is None else draft.logits[:length])


class AdaptiveProposer(Proposer):
    def __init__(self, base: Proposer, warmup_steps: int = 2, lookup: Proposer | None = None):
        self.base = base
        self.lookup = lookup  # a free drafter tried before the base (n-gram lookup), or None
        self.name = f"adaptive({base.name})" if lookup is None else f"adaptive({lookup.name}+{base.name})"
        self.needs_target_hidden = base.needs_target_hidden
        self.warmup_steps = warmup_steps

    def reset(self, prompt_ids, settings, generator, target_hidden=None) -> None:
        super().reset(prompt_ids, settings, generator)
        self.base.reset(prompt_ids, settings, generator, target_hidden)
        if self.lookup is not None:
            self.lookup.reset(prompt_ids, settings, generator)
        self.counts: dict = {}  # draft key -> [accepted, rejected]: decayed counts, prior alpha = 0.5
        self.draft_cost = None  # seconds per draft token (decayed mean)
        self.verify_costs = VerifyCosts()
        self.steps = 0
        self.plain_streak = 0
        self.probe_interval = 4
        self.last_choice = 0
        self.last_key = None
        self.last_from_lookup = False  # the last draft came from the lookup, not the base drafter

    def release(self) -> None:
        self.base.release()

    def warm_up(self, max_length: int, gamma: int, tree: int) -> None:
        self.base.warm_up(max_length, gamma, tree)

    def alpha(self, key=None) -> float:
        accepted, rejected = self.counts.get(key, (1.0, 1.0))
        return accepted / (accepted + rejected)

    @property
    def drafter_is_free(self) -> bool:
        """A drafter that says its drafts cost next to nothing, whatever their length (n-gram lookup)."""
        return getattr(self.base, "free_drafts", False)

    def choose_length(self, gamma_max: int, key=None, free: bool | None = None) -> int:
        """free: whether this draft costs nothing (default: whether the base drafter says so)."""
        free = self.drafter_is_free if free is None else free
        if gamma_max <= 0:
            return 0
        if free and self.steps >= self.warmup_steps:
            pass  # its cost is nothing: decide from alpha and the verify costs alone
        elif self.steps < self.warmup_steps or self.draft_cost is None:
            return gamma_max if free else max(1, gamma_max // 2)
        alpha = min(self.alpha(key), 0.999)
        draft_cost = 0.0 if free else self.draft_cost
        choice = best_draft_length(alpha, draft_cost, self.verify_costs.predict, gamma_max)
        if choice == 0 and self.plain_streak >= self.probe_interval:
            return 1  # a cheap probe: is drafting paying again?
        return choice

    def propose(self, tokens, gamma: int):
        if self.steps >= self.warmup_steps and 1 not in self.verify_costs.by_size:
            # one plain step to measure what drafting competes with: never measured, a plain forward's time is
            # extrapolated from the verify passes, and on a CPU that makes it look as slow as they are
            self.last_key, self.last_choice, self.last_from_lookup = None, 0, False
            return self.empty_draft(tokens.device)
        if self.lookup is not None:
            draft = self.lookup.propose(tokens, gamma)
            key = ("lookup", getattr(self.lookup, "draft_key", None))
            choice = self.choose_length(draft.size, key, free=True) if draft.size else 0
            if choice:
                self.last_key, self.last_choice, self.last_from_lookup = key, choice, True
                return truncate(draft, choice)
        self.last_from_lookup = False
        if self.drafter_is_free:  # see the draft first: its length and kind are free information
            draft = self.base.propose(tokens, gamma)
            self.last_key = getattr(self.base, "draft_key", None)
            self.last_choice = self.choose_length(draft.size, self.last_key)
            return truncate(draft, self.last_choice)
        self.last_key = None  # the length is chosen before the draft exists: one alpha for all drafts
        self.last_choice = self.choose_length(gamma)
        if self.last_choice == 0:
            return self.empty_draft(tokens.device)
        return self.base.propose(tokens, self.last_choice)

    def observe(self, feedback: Feedback) -> None:
        self.base.observe(feedback)
        if self.lookup is not None:
            self.lookup.observe(feedback)
        self.steps += 1
        self.verify_costs.add(feedback.drafted + 1, feedback.verify_seconds)
        if feedback.drafted == 0:
            self.plain_streak += 1
            return
        was_probe = self.plain_streak > 0
        self.plain_streak = 0
        if not self.last_from_lookup:  # a lookup's time says nothing of the base drafter's
            per_token = feedback.draft_seconds / feedback.drafted
            self.draft_cost = per_token if self.draft_cost is None else DECAY * self.draft_cost + (1 - DECAY) * per_token
        accepted, rejected = self.counts.get(self.last_key, (1.0, 1.0))
        self.counts[self.last_key] = (DECAY * accepted + feedback.n_accepted,
                                      DECAY * rejected + (feedback.n_accepted < feedback.drafted))
        if was_probe:  # back off while probes keep failing, so they stay cheap
            self.probe_interval = 4 if feedback.n_accepted else min(64, self.probe_interval * 2)
