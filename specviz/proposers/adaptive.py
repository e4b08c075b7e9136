"""`adaptive`: choose each step's draft length from what speculation has earned and cost so far in this run.

With per-token acceptance alpha, a draft of g tokens yields (1 - alpha^(g+1)) / (1 - alpha) tokens per step
(Leviathan et al. 2023) and costs g * d + t(g + 1): d the drafter's time per token, t(K) the target's time
to verify K positions. Both are measured as the run goes; each step takes the g in 0..gamma that maximises
tokens per second, where g = 0 is a plain decoding step. So speculation is used only where it pays, and a
few cheap probes keep the estimates fresh when it does not.

Three refinements that matter in practice:
- t(K) is kept per K (a GPU's cost is a step: K = 1 runs other kernels than K > 1), with a line fitted
  over all K for the sizes not seen yet;
- a drafter that costs nothing (n-gram lookup, `free_drafts = True`) is asked for its whole draft first,
  and alpha is kept per kind of draft the drafter reports (`Draft.key`: for n-gram lookup, the size of the
  matched n-gram), so a confident 3-gram match and a weak 1-gram match are judged apart;
- with a `lookup` drafter beside a model drafter (n-gram lookup beside EAGLE), the free lookup goes first and
  the model drafts only where the lookup has nothing worth verifying: text copied from the prompt (extraction,
  summaries, RAG) is looked up, new text is drafted; each keeps its own alpha.

With a draft tree (settings.tree > 0, a base that drafts trees: EAGLE, Medusa) a step is one of three: the
lookup's chain, the base's tree, or a plain step, whichever promises the most tokens per second. A tree's
rate is measured whole (tokens per step over drafting and verifying time: its acceptance is not one alpha),
and the lookup's alpha is learnt on every step, also when its draft was not verified: the tokens the step
kept say how much of it the target would have accepted.
"""
from __future__ import annotations

import dataclasses

from .. import methods
from ..errors import InvalidSettingError
from ..models.loading import LoadedModel
from ..rule.theory import expected_tokens_per_step
from .base import Draft, Feedback, Proposer, ProposerRequest
from .checkpoints import load_drafter, shipped_drafter_exists
from .ngram import NgramProposer
from .retrieval import RetrievalProposer

DECAY = 0.9  # weight of the past per step: recent text matters more (acceptance changes with content)
MARGIN = 0.05  # how much more than a plain step drafting must promise (measured costs are noisy)


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
        if old is None or seconds < 0.5 * old:
            # delays only ever add time: a pass twice as fast as the estimate shows the estimate was a hiccup
            # (else a slow first pass at one K would keep that K out of the run's choices for good)
            self.by_size[size] = seconds
        else:
            self.by_size[size] = DECAY * old + (1 - DECAY) * seconds

    def predict(self, size: int) -> float:
        if size in self.by_size:
            return self.by_size[size]
        known = [t for k, t in self.by_size.items() if k < size]
        return max([self.line.predict(size) or 0.0, *known])


def chain_rate(alpha: float, g: int, draft_cost: float, verify_cost) -> float:
    """Expected tokens per second of a step drafting a chain of g tokens (g = 0: a plain step)."""
    seconds = g * draft_cost + verify_cost(g + 1)
    return expected_tokens_per_step(alpha, g) / max(seconds, 1e-12)  # a fit can extrapolate to 0 s


def best_draft_length(alpha: float, draft_cost: float, verify_cost, gamma_max: int, margin: float = MARGIN) -> int:
    """The g in 0..gamma_max with the most expected tokens per second; verify_cost(K) is the time of a
    target forward over K positions. Drafting must promise `margin` more than a plain step: measured
    costs are noisy, and a marginal gain is not worth the risk of a loss."""
    def rate(g: int) -> float:
        return chain_rate(alpha, g, draft_cost, verify_cost)
    best = max(range(1, gamma_max + 1), key=rate, default=0)
    return best if best and rate(best) > (1 + margin) * rate(0) else 0


def matched_prefix(draft: list[int], kept: list[int]) -> tuple[int, bool]:
    """How many of a draft's tokens a step's kept tokens confirm, and whether they also show where the draft
    went wrong (False: it was right as far as the step went)."""
    matched = 0
    for drafted, actual in zip(draft, kept):
        if drafted != actual:
            return matched, True
        matched += 1
    return matched, False


class RateMeter:
    """Tokens per second of one kind of step (a draft tree: drafting and verifying it), decayed."""

    def __init__(self):
        self.tokens = self.seconds = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        self.tokens, self.seconds = DECAY * self.tokens + tokens, DECAY * self.seconds + seconds

    def rate(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None


def truncate(draft: Draft, length: int) -> Draft:
    return Draft(draft.token_ids[:length], None if draft.probs is None else draft.probs[:length],
                 None if draft.logits is None else draft.logits[:length])


class AdaptiveProposer(Proposer):
    def __init__(self, base: Proposer, warmup_steps: int = 2, lookup: Proposer | None = None):
        self.base = base
        self.lookup = lookup  # a free drafter tried before the base (n-gram lookup), or None
        self.name = f"adaptive({base.name})" if lookup is None else f"adaptive({lookup.name}+{base.name})"
        self.needs_target_hidden = base.needs_target_hidden
        self.target_layers = base.target_layers
        # a base that costs something and drafts trees (EAGLE, Medusa): each step weighs its tree against the
        # lookup's chain and a plain step; a free base (n-gram lookup) drafts chains: on a GPU its chains pay better
        # than its trees
        self.drafts_trees = base.drafts_trees and not base.free_drafts
        self.drafts_on_host = base.drafts_on_host and (lookup is None or lookup.drafts_on_host)
        self.warmup_steps = warmup_steps

    def reset(self, prompt_ids, settings, generator, target_hidden=None) -> None:
        super().reset(prompt_ids, settings, generator)
        self.base.reset(prompt_ids, settings, generator, target_hidden)
        if self.lookup is not None:  # the lookup drafts chains, also beside a base that drafts trees
            self.lookup.reset(prompt_ids, dataclasses.replace(settings, tree=0), generator)
        self.counts: dict = {}  # draft key -> [accepted, rejected]: decayed counts, prior alpha = 0.5
        self.draft_cost = None  # seconds per draft token (decayed mean)
        self.verify_costs = VerifyCosts()
        self.steps = 0
        self.plain_streak = 0
        self.probe_interval = 4
        self.last_choice = 0
        self.last_key = None
        self.last_from_lookup = False  # the last draft came from the lookup, not the base drafter
        self.tree_rate = RateMeter()  # the base's draft trees, whole steps (tree mode)
        self.tree_steps = 0
        self.last_was_tree = False
        self.lookup_draft: list[int] = []  # this step's lookup draft, verified or not (tree mode learns from it)
        self.lookup_key = None

    def release(self) -> None:
        self.base.release()

    def runners(self) -> list:
        return self.base.runners() + (self.lookup.runners() if self.lookup is not None else [])

    def warm_up(self, max_length: int, gamma: int, tree: int) -> None:
        self.base.warm_up(max_length, gamma, tree)

    def in_tree_mode(self) -> bool:
        """Each step weighs the base's tree against the lookup's chain and a plain step."""
        return self.drafts_trees and bool(self.tree_budget())

    def alpha(self, key=None) -> float:
        accepted, rejected = self.counts.get(key, (1.0, 1.0))
        return accepted / (accepted + rejected)

    @property
    def drafter_is_free(self) -> bool:
        """A drafter that says its drafts cost next to nothing, whatever their length (n-gram lookup)."""
        return self.base.free_drafts

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
        self.last_was_tree = False
        self.lookup_draft = []
        if self.steps >= self.warmup_steps and 1 not in self.verify_costs.by_size:
            # one plain step to measure what drafting competes with: never measured, a plain forward's time is
            # extrapolated from the verify passes, and on a CPU that makes it look as slow as they are
            self.last_key, self.last_choice, self.last_from_lookup = None, 0, False
            return self.empty_draft(tokens.device)
        if self.in_tree_mode():
            return self._propose_in_tree_mode(tokens, gamma)
        if self.lookup is not None:
            draft = self.lookup.propose(tokens, gamma)
            key = ("lookup", draft.key)
            choice = self.choose_length(draft.size, key, free=True) if draft.size else 0
            if choice:
                self.last_key, self.last_choice, self.last_from_lookup = key, choice, True
                return truncate(draft, choice)
        self.last_from_lookup = False
        if self.drafter_is_free:  # see the draft first: its length and kind are free information
            draft = self.base.propose(tokens, gamma)
            self.last_key = draft.key
            self.last_choice = self.choose_length(draft.size, self.last_key)
            return truncate(draft, self.last_choice)
        self.last_key = None  # the length is chosen before the draft exists: one alpha for all drafts
        self.last_choice = self.choose_length(gamma)
        if self.last_choice == 0:
            return self.empty_draft(tokens.device)
        return self.base.propose(tokens, self.last_choice)

    def _propose_in_tree_mode(self, tokens, gamma: int):
        """The lookup's chain, the base's tree or a plain step: the most tokens per second expected."""
        plain_rate = 1.0 / self.verify_costs.predict(1) if 1 in self.verify_costs.by_size else None
        tree_rate = self.tree_rate.rate()
        if self.lookup is not None:
            draft = self.lookup.propose(tokens, gamma)
            self.lookup_draft = draft.token_ids.tolist()
            self.lookup_key = ("lookup", draft.key)
            if draft.size and tree_rate is not None:  # the tree is measured first: then the lookup must beat it
                alpha = min(self.alpha(self.lookup_key), 0.999)
                length = best_draft_length(alpha, 0.0, self.verify_costs.predict, draft.size)
                if length and chain_rate(alpha, length, 0.0, self.verify_costs.predict) > tree_rate:
                    return truncate(draft, length)
        pays = tree_rate is None or plain_rate is None or tree_rate > (1 + MARGIN) * plain_rate
        if pays or self.plain_streak >= self.probe_interval:  # else a probe now and then: does it pay again?
            self.last_was_tree = True
            return self.base.propose(tokens, gamma)
        return self.empty_draft(tokens.device)

    def _learn_lookup(self, feedback: Feedback) -> None:
        """The lookup's alpha from what this step kept, whether its draft was verified or not (a draft that was
        verified: exactly the verifier's verdict, for a resampled token never equals the rejected draft)."""
        if not self.lookup_draft or feedback.new_ids is None:
            return
        matched, went_wrong = matched_prefix(self.lookup_draft, feedback.new_ids)
        accepted, rejected = self.counts.get(self.lookup_key, (1.0, 1.0))
        self.counts[self.lookup_key] = (DECAY * accepted + matched, DECAY * rejected + went_wrong)

    def _observe_in_tree_mode(self, feedback: Feedback) -> None:
        self._learn_lookup(feedback)
        if self.last_was_tree:
            if self.tree_steps:  # not the first: its drafting also fed the drafter the whole prompt
                self.tree_rate.add(feedback.n_accepted + 1, feedback.draft_seconds + feedback.verify_seconds)
            self.tree_steps += 1
        else:  # a chain (the lookup's) or a plain step: what a forward over K positions costs
            self.verify_costs.add(feedback.drafted + 1, feedback.verify_seconds)
        was_probe = self.last_was_tree and self.plain_streak > 0
        self.plain_streak = self.plain_streak + 1 if feedback.drafted == 0 else 0
        if was_probe:
            self._after_probe(paid=self.tree_rate.rate() > (1 + MARGIN) / self.verify_costs.predict(1))

    def _after_probe(self, paid: bool) -> None:
        """Probe again soon if the probe paid; else back off, so that probes that keep failing stay cheap."""
        self.probe_interval = 4 if paid else min(64, 2 * self.probe_interval)

    def observe(self, feedback: Feedback) -> None:
        self.base.observe(feedback)
        if self.lookup is not None:
            self.lookup.observe(feedback)
        self.steps += 1
        if self.in_tree_mode():
            self._observe_in_tree_mode(feedback)
            return
        self.verify_costs.add(feedback.drafted + 1, feedback.verify_seconds)
        if feedback.drafted == 0:
            self.plain_streak += 1
            return
        was_probe = self.plain_streak > 0
        self.plain_streak = 0
        if not self.last_from_lookup:  # a lookup's time says nothing of the base drafter's
            per_token = feedback.draft_seconds / feedback.drafted
            self.draft_cost = (
                per_token if self.draft_cost is None else DECAY * self.draft_cost + (1 - DECAY) * per_token
            )
        accepted, rejected = self.counts.get(self.last_key, (1.0, 1.0))
        self.counts[self.last_key] = (DECAY * accepted + feedback.n_accepted,
                                      DECAY * rejected + (feedback.n_accepted < feedback.drafted))
        if was_probe:
            self._after_probe(paid=feedback.n_accepted > 0)


LOOKUPS = ("auto", "ngram", "retrieval")  # what `adaptive` may look up beside a model drafter (--adaptive-lookup)


def default_lookup(target: LoadedModel) -> str:
    """What `adaptive` looks up by default beside a model drafter. On a CPU, retrieval (where a datastore
    ships for the target): its lookup is nothing beside a forward there, and it finds more than the sequence
    alone. On a GPU, n-gram lookup: there the datastore's lookup is a real share of a step (docs/performance.md
    has the measurements)."""
    if target.device.type == "cpu" and shipped_drafter_exists("retrieval", target):
        return "retrieval"
    return "ngram"


def build(request: ProposerRequest) -> AdaptiveProposer:
    """`adaptive`'s proposer (specviz.methods), on its base: adaptive_base, or with "auto" the draft model where
    one is given, else EAGLE where its drafter is given or ships, else n-gram lookup; beside a model drafter, the
    lookup of adaptive_lookup ("auto": default_lookup)."""
    base, target = request.adaptive_base, request.target
    if base == "auto":
        if request.draft is not None:
            base = "draft"
        elif request.heads is not None or shipped_drafter_exists("eagle", target):
            base = "eagle"
        else:
            base = "ngram"
    bases = [m.name for m in methods.methods() if m.drafts and not m.on_another]
    if base in methods.names() and base not in bases:
        raise InvalidSettingError(f"adaptive cannot run on top of {base!r}; choose {methods.joined(bases, 'or')}")
    lookup_name = request.adaptive_lookup
    if lookup_name not in LOOKUPS:
        raise InvalidSettingError(f"adaptive looks up with {methods.joined(LOOKUPS, 'or')}, not {lookup_name!r}")
    if lookup_name == "auto":
        lookup_name = default_lookup(target)
    # lookup costs next to nothing: beside a model drafter it goes first (this module's docstring says why)
    if methods.method(base).lookup:
        lookup = None
    elif lookup_name == "retrieval":
        lookup = RetrievalProposer(load_drafter("retrieval", target, None))
    else:
        lookup = NgramProposer()
    return AdaptiveProposer(request.another(base), lookup=lookup)
