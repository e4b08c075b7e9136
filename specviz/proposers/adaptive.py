"""`adaptive`: choose each step's draft length from what speculation has earned and cost so far in this run.

With per-token acceptance alpha, a draft of g tokens yields (1 - alpha^(g+1)) / (1 - alpha) tokens per step
(Leviathan et al. 2023) and costs g * d + t(g + 1): d the drafter's time per token, t(K) the target's time
to verify K positions. Both are measured as the run goes; each step takes the g in 0..gamma that maximises
tokens per second, where g = 0 is a plain decoding step. So speculation is used only where it pays, and a
few cheap probes keep the estimates fresh when it does not.
"""
from __future__ import annotations

from ..theory import expected_tokens_per_step
from .base import Feedback, Proposer

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
        return max(0.0, mean_y + slope * (x - mean_x))


def best_draft_length(alpha: float, draft_cost: float, verify_cost, gamma_max: int) -> int:
    """The g in 0..gamma_max with the most expected tokens per second; verify_cost(K) is the time of a
    target forward over K positions."""
    def rate(g: int) -> float:  # the fitted costs can reach 0 on a noisy machine: never divide by it
        return expected_tokens_per_step(alpha, g) / max(1e-9, g * draft_cost + verify_cost(g + 1))
    return max(range(gamma_max + 1), key=rate)


class AdaptiveProposer(Proposer):
    def __init__(self, base: Proposer, warmup_steps: int = 2):
        self.base = base
        self.name = f"adaptive({base.name})"
        self.needs_target_hidden = base.needs_target_hidden
        self.warmup_steps = warmup_steps

    def reset(self, prompt_ids, settings, generator, target_hidden=None) -> None:
        super().reset(prompt_ids, settings, generator)
        self.base.reset(prompt_ids, settings, generator, target_hidden)
        self.accepted = 1.0  # decayed counts of accepted and rejected draft tokens, prior alpha = 0.5
        self.rejected = 1.0
        self.draft_cost = None  # seconds per draft token (decayed mean)
        self.verify_line = DecayedLine(prior_slope=0.05)
        self.steps = 0
        self.plain_streak = 0
        self.probe_interval = 4
        self.last_choice = 0

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def choose_length(self, gamma_max: int) -> int:
        if self.steps < self.warmup_steps or self.draft_cost is None:
            return max(1, gamma_max // 2)
        alpha = min(self.alpha, 0.999)
        choice = best_draft_length(alpha, self.draft_cost, self.verify_line.predict, gamma_max)
        if choice == 0 and self.plain_streak >= self.probe_interval:
            return 1  # a cheap probe: is drafting paying again?
        return choice

    def propose(self, tokens, gamma: int):
        self.last_choice = self.choose_length(gamma)
        if self.last_choice == 0:
            return self.empty_draft(tokens.device)
        return self.base.propose(tokens, self.last_choice)

    def observe(self, feedback: Feedback) -> None:
        self.base.observe(feedback)
        self.steps += 1
        self.verify_line.add(feedback.drafted + 1, feedback.verify_seconds)
        if feedback.drafted == 0:
            self.plain_streak += 1
            return
        was_probe = self.plain_streak > 0
        self.plain_streak = 0
        per_token = feedback.draft_seconds / feedback.drafted
        self.draft_cost = per_token if self.draft_cost is None else DECAY * self.draft_cost + (1 - DECAY) * per_token
        self.accepted = DECAY * self.accepted + feedback.n_accepted
        self.rejected = DECAY * self.rejected + (feedback.n_accepted < feedback.drafted)
        if was_probe:  # back off while probes keep failing, so they stay cheap
            self.probe_interval = 4 if feedback.n_accepted else min(64, self.probe_interval * 2)
