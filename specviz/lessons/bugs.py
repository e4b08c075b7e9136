"""Lesson 7, how speculative decoding goes wrong: the slips engines have shipped, each a deliberately wrong verifier
or drafter (specviz.verify), run on the same prompt, seeds and forward passes as the correct verifier and tested
against the target's exact distribution; beside them, bfloat16 greedy output that parts from float32 by rounding
alone, which is not a bug.

The tested token is the first new one: the engine's first step drafts it (gamma = 1) and verifies it in the prompt's
last forward, so every slip acts on it in full. Each seed runs the engine once; its verifier fans out (FanOut):
every arm's verifier sees the same draft, q, p and random stream, so two arms differ by their verifier alone."""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

import torch

from ..api import make_proposer
from ..engine import SpeculativeRun
from ..exactness import goodness_of_fit, next_token_probs
from ..models import LoadedModel, load_model
from ..proposers import PlainProposer, Proposer
from ..settings import DecodeSettings
from .. import verify
from .common import p_text, prompt_ids, run_once, token_text

CLAIM = ("Exactness is easy to break: engines have shipped verifiers and drafters that change the output's "
         "distribution without any visible error. A test against the target's exact distribution catches each one "
         "in a few hundred samples, and passes the correct verifier.")
HEADERS = ["verifier", "breaks exactness", "p at the verdict", "caught", "acceptance", "what it does", "reported"]
SIGNIFICANCE = 0.01  # below it: "not the target's distribution"
CHECK_EVERY = 10  # seeds between two looks at the fit
FLOOR = 1e-6  # tokens the target gives less are left to goodness_of_fit's pooled cell


@dataclass(frozen=True)
class Slip:
    """One arm of the lesson: how it verifies, whether that breaks exactness, and where it was reported."""
    key: str
    label: str
    wrong: bool
    what: str
    reported: str
    verifier: Callable[[float], Callable]  # the run's temperature -> a verifier of verify_sampled's signature


def _argmax_drafter(temperature: float) -> Callable:
    """verify_sampled on the drafter's argmax instead of its draw (verify.draft_argmax_keeping_q), q unchanged."""
    def verifier(draft_ids, draft_probs, target_probs, generator):
        greedy = verify.draft_argmax_keeping_q(draft_probs).to(draft_ids.device, draft_ids.dtype)
        verdict = verify.verify_sampled(greedy, draft_probs, target_probs, generator)
        verdict.drafted = greedy  # what the first emitted token is when the draft is accepted
        return verdict
    return verifier


SLIPS = [
    Slip("correct", "correct (verify_sampled)", False,
         "accept with min(1, p/q); at a rejection draw from norm(max(0, p − q))",
         "Leviathan et al. 2023, Chen et al. 2023", lambda t: verify.verify_sampled),
    Slip("match", "match acceptance (verify_by_match)", False,
         "accept while the draft equals the target's own draw; emit that draw at the first mismatch: exact, "
         "but it accepts Σ p·q instead of Σ min(p, q)",
         "called a bug in ml-explore/mlx-swift-lm PR 459 and lablup/mlxcel issue 902 (corrected in mlxcel PR 992); "
         "vLLM's \"strict\" sampler (vllm-project/vllm PR 35461)", lambda t: verify.verify_by_match),
    Slip("temperature", "target before temperature", True,
         "the target's p taken before temperature, the drafter's q after it",
         "vllm-project/vllm PR 10198 (issue 9834)",
         lambda t: partial(verify.verify_target_before_temperature, temperature=t)),
    Slip("argmax", "drafter at temperature 0", True,
         "the drafter proposes its argmax but reports q at the run's temperature",
         "huggingface/transformers issue 32867 (PR 30778, reverted by PR 33534); jaymody/speculative-sampling issue 3",
         _argmax_drafter),
    Slip("unnormalised", "residual not renormalised", True,
         "max(0, p − q) drawn by its cumulative sum without dividing by its total: past the total, the last token",
         "none found shipped; harmless with torch.multinomial, which normalises (vllm-project/vllm PR 2336 review)",
         lambda t: verify.verify_residual_unnormalised),
    Slip("at-drafted", "residual at the drafted token only", True,
         "at a rejection q is subtracted at the rejected token only, not everywhere",
         "SafeAILab/EAGLE issue 20; xLLM-AI/xllm PR 2175", lambda t: verify.verify_residual_at_drafted_token),
    Slip("from-p", "residual replaced by p (verify_sampled_without_residual)", True,
         "at a rejection draw from p itself: the drafter's favourite gets a second chance",
         "none found shipped; suspected in NJUNLP/MCSD issue 5, whose code was right",
         lambda t: verify.verify_sampled_without_residual),
]
SLIP_BY_KEY = {slip.key: slip for slip in SLIPS}


class FanOut:
    """The engine's verifier for one run: every arm's verifier on the same draft, q, p and random stream (the
    generator's state restored before each), the token each would emit first recorded; the engine gets the
    correct verdict, drawn last from the same state, so its run is an ordinary one."""

    def __init__(self, verifiers: dict[str, Callable]):
        self.verifiers = verifiers
        self.first: dict[str, int] = {}
        self.accepted: dict[str, bool] = {}

    def __call__(self, draft_ids, draft_probs, target_probs, generator):
        state = generator.get_state()
        if not self.first:  # the run's first step: the tested token
            for key, verifier in self.verifiers.items():
                generator.set_state(state)
                verdict = verifier(draft_ids, draft_probs, target_probs, generator)
                drafted = getattr(verdict, "drafted", draft_ids)
                self.accepted[key] = verdict.n_accepted > 0
                self.first[key] = int(drafted[0]) if verdict.n_accepted else verdict.next_token
            generator.set_state(state)
        return verify.verify_sampled(draft_ids, draft_probs, target_probs, generator)


@dataclass
class Arm:
    key: str  # a Slip's
    counts: Counter = field(default_factory=Counter)  # first new token -> seeds that emitted it
    accepted: int = 0  # seeds whose draft this verifier accepted
    looks: list[list[float]] = field(default_factory=list)  # [seeds, p against the exact distribution], every look

    @property
    def runs(self) -> int:
        return sum(self.counts.values())

    def p_at(self, seeds: int) -> float | None:
        return next((p for n, p in self.looks if n == seeds), None)

    def caught_at(self, significance: float = SIGNIFICANCE) -> int | None:
        """The seeds from which on the fit stayed below significance at every later look (None: it did not)."""
        caught = None
        for n, p in self.looks:
            caught = (caught or int(n)) if p < significance else None
        return caught


@dataclass
class Rounding:
    """Greedy decoding in bfloat16 beside float32: where they part, and how close the two best tokens were."""
    prompt: str
    method: str
    float32: list[str]  # plain greedy output, token texts
    bfloat16: list[str]
    speculative_identical: bool  # float32 with the method equals float32 plain, token for token
    parted_at: int | None  # the first token where bfloat16 differs from float32
    top_float32: list[str] = field(default_factory=list)  # there: float32's two best tokens, and their logits
    logits_float32: list[float] = field(default_factory=list)
    top_bfloat16: list[str] = field(default_factory=list)
    logits_bfloat16: list[float] = field(default_factory=list)

    @property
    def margin_float32(self) -> float | None:
        return self.logits_float32[0] - self.logits_float32[1] if len(self.logits_float32) == 2 else None

    @property
    def margin_bfloat16(self) -> float | None:
        return self.logits_bfloat16[0] - self.logits_bfloat16[1] if len(self.logits_bfloat16) == 2 else None

    @property
    def bfloat16_step(self) -> float | None:
        """The spacing of bfloat16 numbers near float32's best logit (8 significant bits)."""
        if not self.logits_float32:
            return None
        return torch.finfo(torch.bfloat16).eps * 2.0 ** torch.tensor(abs(self.logits_float32[0])).log2().floor().item()


@dataclass
class Bugs:
    prompt: str | list[int]
    method: str
    temperature: float
    runs: int  # the verdict's seeds: every arm is judged there
    exact: dict[int, float]  # the target's probability of each first new token (at least FLOOR)
    arms: list[Arm]
    seeds: int = 0  # run so far (past `runs` while a bug is still uncaught)
    token_texts: dict[int, str] = field(default_factory=dict)
    rounding: Rounding | None = None

    def arm(self, key: str) -> Arm:
        return next(a for a in self.arms if a.key == key)

    def passed(self, key: str) -> bool | None:
        """The arm's fit at the verdict's seeds is at or above significance (None before then)."""
        p = self.arm(key).p_at(self.runs)
        return None if p is None else p >= SIGNIFICANCE

    @property
    def all_as_expected(self) -> bool | None:
        """Every exact arm passed and every wrong one was caught, at the verdict's seeds."""
        verdicts = [(self.passed(a.key), SLIP_BY_KEY[a.key].wrong) for a in self.arms]
        if any(v is None for v, _ in verdicts):
            return None
        return all(v != wrong for v, wrong in verdicts)


def fit_of(counts: Counter, exact: dict[int, float]):
    runs = sum(counts.values())
    return goodness_of_fit(Counter({(t,): c for t, c in counts.items()}), {(t,): p for t, p in exact.items()}, runs)


def first_token_probs(target: LoadedModel, ids: list[int], settings: DecodeSettings) -> dict[int, float]:
    """The target's exact distribution of the first new token at the run's temperature (one forward)."""
    probs = next_token_probs(target, [ids], settings)[0].double()
    return {int(t): float(probs[t]) for t in torch.nonzero(probs >= FLOOR).flatten()}


def bugs(target: LoadedModel, prompt: str | list[int] = "Tell me a joke.", method: str = "eagle", runs: int = 150,
         temperature: float = 0.8, most: int = 1000, chat: bool = True, rounding_tokens: int = 32,
         slips: list[Slip] | None = None, make: Callable[[], Proposer] | None = None,
         other_dtype: LoadedModel | None = None) -> Iterator[Bugs]:
    """Every arm on the same seeds 0, 1, ...: `runs` seeds, then on (up to `most`) while a wrong arm is not yet
    caught, to show how many it needs; yields after every CHECK_EVERY seeds. Then the rounding contrast (skipped
    with rounding_tokens=0; other_dtype: the target loaded in the other dtype, loaded here when None)."""
    slips = slips or SLIPS
    ids = prompt_ids(target, prompt, chat)
    settings = DecodeSettings(max_new_tokens=2, gamma=1, temperature=temperature, stop_at_eos=False).validate()
    exact = first_token_probs(target, ids, settings)
    proposer = (make or (lambda: make_proposer(method, target)))()
    record = Bugs(prompt, proposer.name, temperature, runs, exact, [Arm(s.key) for s in slips])
    verifiers = {s.key: s.verifier(temperature) for s in slips}
    wrong = [a for a, s in zip(record.arms, slips) if s.wrong]
    while record.seeds < runs or (record.seeds < most and any(a.p_at(runs) is not None and
                                                              a.looks[-1][1] >= SIGNIFICANCE for a in wrong)):
        fan = FanOut(verifiers)
        steps = iter(SpeculativeRun(target, proposer, ids, dataclasses.replace(settings, seed=record.seeds),
                                    verifier=fan, detail=False))
        next(steps)  # the first step decides the tested token; the rest of the run is not needed
        steps.close()
        record.seeds += 1
        for arm in record.arms:
            token = fan.first[arm.key]
            arm.counts[token] += 1
            arm.accepted += fan.accepted[arm.key]
            if token not in record.token_texts:
                record.token_texts[token] = token_text(target, token)
        if record.seeds % CHECK_EVERY == 0 or record.seeds == runs:
            for arm in record.arms:
                arm.looks.append([record.seeds, fit_of(arm.counts, exact).p_value])
            yield record
    if rounding_tokens:
        record.rounding = rounding(target, prompt, method, rounding_tokens, chat, other_dtype)
        yield record


def top_two(target: LoadedModel, ids: list[int]) -> tuple[list[str], list[float]]:
    """The target's two largest logits after ids, and their tokens' texts (a plain transformers forward)."""
    with torch.inference_mode():
        logits = target.model(input_ids=torch.tensor([ids], device=target.device), use_cache=False).logits[0, -1]
    values, tokens = logits.float().topk(2)
    return [token_text(target, int(t)) for t in tokens], [float(v) for v in values]


def rounding(target: LoadedModel, prompt: str | list[int], method: str = "medusa", max_new_tokens: int = 24,
             chat: bool = False, other: LoadedModel | None = None) -> Rounding:
    """Greedy plain decoding in float32 and in bfloat16 (the target in the other dtype, loaded here when not
    given), float32 with the method beside float32 plain, and where bfloat16 parts from float32 the two best
    logits of each."""
    if other is None:
        other_dtype = "bfloat16" if target.dtype == torch.float32 else "float32"
        other = load_model(target.name, str(target.device), other_dtype)
    f32, b16 = (target, other) if target.dtype == torch.float32 else (other, target)
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=4, temperature=0.0, stop_at_eos=False).validate()
    ids = prompt_ids(f32, prompt, chat)
    plain32 = run_once(f32, PlainProposer(), ids, settings, detail=False).token_ids
    plain16 = run_once(b16, PlainProposer(), ids, settings, detail=False).token_ids
    spec32 = run_once(f32, make_proposer(method, f32), ids, settings, detail=False).token_ids
    parted = next((i for i, (a, b) in enumerate(zip(plain32, plain16)) if a != b), None)
    texts = lambda model, tokens: [token_text(model, t) for t in tokens]  # noqa: E731
    record = Rounding(prompt if isinstance(prompt, str) else "", method, texts(f32, plain32), texts(b16, plain16),
                      spec32 == plain32, parted)
    if parted is not None:
        prefix = ids + plain32[:parted]
        record.top_float32, record.logits_float32 = top_two(f32, prefix)
        record.top_bfloat16, record.logits_bfloat16 = top_two(b16, prefix)
    return record


# the record as a table and a sentence --------------------------------------------------------------------------

def bug_rows(record: Bugs) -> list[list]:
    rows = []
    for arm in record.arms:
        slip = SLIP_BY_KEY[arm.key]
        p = arm.p_at(record.runs)
        caught = arm.caught_at()
        if p is None:
            verdict = "–"
        elif slip.wrong:
            verdict = (f"yes, from {caught} seeds on" if caught is not None and caught <= record.runs else
                       f"not at {record.runs} seeds; from {caught} on" if caught is not None else
                       f"not in {arm.runs} seeds")
        else:
            verdict = "passed" if p >= SIGNIFICANCE else f"flagged (p < {SIGNIFICANCE})"
        rows.append([slip.label, "yes" if slip.wrong else "no", p_text(p), verdict,
                     round(arm.accepted / arm.runs, 2) if arm.runs else "–", slip.what, slip.reported])
    return rows


def rounding_sentence(r: Rounding | None) -> str:
    if r is None:
        return ""
    same = ("float32 with the method equals float32 plain token for token" if r.speculative_identical else
            "**float32 with the method differs from float32 plain: a bug**")
    if r.parted_at is None:
        return f"Greedy: bfloat16 and float32 plain agree on all {len(r.float32)} tokens here; {same}."
    return (f"Greedy, not a bug: bfloat16 parts from float32 at token {r.parted_at}, where float32's two best tokens "
            f"{r.top_float32[0]!r} and {r.top_float32[1]!r} are **{r.margin_float32:.3f}** apart in logit, and "
            f"bfloat16 spaces numbers near {r.logits_float32[0]:.1f} by {r.bfloat16_step:g}: rounding alone swaps a "
            f"near-tie (bfloat16's margin there: {r.margin_bfloat16:+.3f}, {r.top_bfloat16[0]!r} first). {same}.")


def bug_sentence(record: Bugs) -> str:
    if not record.arms or not record.arms[0].looks:
        return ""
    text = []
    correct = [a for a in record.arms if not SLIP_BY_KEY[a.key].wrong and a.p_at(record.runs) is not None]
    caught = [a for a in record.arms if SLIP_BY_KEY[a.key].wrong and a.p_at(record.runs) is not None
              and a.p_at(record.runs) < SIGNIFICANCE]
    slow = [a for a in record.arms if SLIP_BY_KEY[a.key].wrong and a.p_at(record.runs) is not None
            and a.p_at(record.runs) >= SIGNIFICANCE]
    if correct:
        text.append(f"At {record.runs} seeds, against the target's exact distribution of the first new token: "
                    + "; ".join(f"{SLIP_BY_KEY[a.key].label} p = **{p_text(a.p_at(record.runs))}** ("
                                + ("passed" if a.p_at(record.runs) >= SIGNIFICANCE else "flagged") + ")" for a in correct)
                    + ".")
    if caught:
        quickest = min(caught, key=lambda a: a.caught_at() or record.runs)
        text.append(f"**{len(caught)} of {len(caught) + len(slow)} bugs caught** (p < {SIGNIFICANCE}); the quickest, "
                    f"{SLIP_BY_KEY[quickest.key].label}, from {quickest.caught_at()} seeds on.")
    for a in slow:
        needed = a.caught_at()
        text.append(f"{SLIP_BY_KEY[a.key].label} is hard to catch: not at {record.runs} seeds, "
                    + (f"caught from {needed} seeds on." if needed else f"and not in {a.runs}."))
    matched = next((a for a in record.arms if a.key == "match"), None)
    right = next((a for a in record.arms if a.key == "correct"), None)
    if matched and right and matched.runs and right.runs:
        text.append(f"Match acceptance is exact but accepted {matched.accepted / matched.runs:.0%} of drafts where "
                    f"the correct verifier accepted {right.accepted / right.runs:.0%}.")
    return " ".join(text + [rounding_sentence(record.rounding)]).strip()


def bug_figure_data(record: Bugs, most: int = 10) -> tuple[list[int], dict[str, list[float]]]:
    """The most frequent first tokens over every arm, and each arm's share of its seeds on them (for a chart)."""
    total = sum((a.counts for a in record.arms), start=Counter())
    shown = [t for t, _ in total.most_common(most)]
    return shown, {a.key: [a.counts.get(t, 0) / a.runs if a.runs else 0.0 for t in shown] for a in record.arms}
