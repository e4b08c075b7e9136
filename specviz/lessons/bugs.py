"""Lesson 7, how speculative decoding goes wrong: the slips engines have shipped, each a deliberately wrong verifier
or drafter (specviz.rule.verify), run on the same prompt, seeds and forward passes as the correct verifier and tested
against the target's exact distribution; beside them, bfloat16 greedy output that parts from float32 by rounding
alone, which is not a bug.

The tested token is the first new one: the engine's first step drafts it (gamma = 1) and verifies it in the prompt's
last forward, so every slip acts on it in full. Its p (the target's) and q (the drafter's) are the same for every
seed; a seed changes only the draws: the drafter's, then the verifier's. So the engine runs the first ENGINE_SEEDS
seeds itself, its verifier fanned out to every arm (the same draft, q, p and random stream for each), and the
seeds after them replay those two draws on the p and q its forward passes gave, checked to give the engine's own
tokens where the engine ran it. The replay keeps the tokens either model gives at least FLOOR and pools the rest
into one token (OTHER), so that a draw costs a few thousand entries, not the whole vocabulary: p and q pooled so
are a pair of distributions like any other, on which every exact arm stays exact and every slip stays wrong."""
from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial

import torch

from ..rule import verify, wrong_verifiers
from ..api import make_proposer
from ..engine.run import SpeculativeRun
from ..measure.exactness_check import goodness_of_fit, next_token_probs
from ..models.loading import LoadedModel
from ..options import EngineOptions
from ..proposers import PlainProposer, Proposer
from ..records.schema import RunResult
from ..rule.sampling import draw, make_generator
from ..settings import DecodeSettings
from .common import p_text, prompt_ids, run_once, token_text
from .lesson import Lesson

CLAIM = ("Exactness is easy to break without any visible error: engines have shipped verifiers and drafters that "
         "change the output's distribution. A test against the target's exact distribution catches each one within "
         "a few hundred samples, and passes the correct verifier.")
HEADERS = ["verifier", "breaks exactness", "p at the verdict", "caught", "acceptance", "what it does", "reported"]
SIGNIFICANCE = 0.01  # below it: "not the target's distribution"
PROMPT, METHOD, TEMPERATURE = "Tell me a joke.", "eagle", 0.8  # the lesson's defaults
RUNS = 150  # the verdict's seeds by default, as lesson 2's histograms
CHECK_EVERY = 10  # seeds between two looks at the fit
ENGINE_SEEDS = 10  # seeds the engine runs itself; the replay must give each arm the engine's token on them
FLOOR = 1e-6  # tokens the target (or the drafter) gives less are left out of the record's dicts (and pooled)
OTHER = -1  # the replay's pooled token: every token that neither model gives FLOOR


@dataclass(frozen=True)
class Slip:
    """One arm of the lesson: how it verifies (and, for a drafter's slip, what it proposes instead of its draw),
    whether that breaks exactness, and where it was reported."""
    key: str
    label: str
    wrong: bool
    what: str
    reported: str
    verifier: Callable[[float], Callable]  # the run's temperature -> a verifier of verify_sampled's signature
    proposes: Callable | None = None  # (draft_ids [g], q [g, V]) -> the draft this slip proposes instead


GH = "https://github.com/"
SLIPS = [
    Slip("correct", "correct (verify_sampled)", False,
         "accept with min(1, p/q); at a rejection draw from norm(max(0, p − q))",
         "Leviathan et al. 2023; Chen et al. 2023", lambda t: verify.verify_sampled),
    Slip("match", "match acceptance (verify_by_match)", False,
         "accept while the draft equals the target's own draw, and emit that draw at the first mismatch: exact, but "
         "it accepts Σ p·q instead of Σ min(p, q)",
         f"called a bug in MLX Swift LM ({GH}ml-explore/mlx-swift-lm/pull/459); shown exact in mlxcel "
         f"({GH}lablup/mlxcel/pull/992); vLLM's \"strict\" rejection sampling ({GH}vllm-project/vllm/pull/35461)",
         lambda t: wrong_verifiers.verify_by_match),
    Slip("temperature", "target before temperature", True,
         "the target's p taken before temperature, the drafter's q after it",
         f"vLLM's scorer ({GH}vllm-project/vllm/issues/9834, fixed by {GH}vllm-project/vllm/pull/10198)",
         lambda t: partial(wrong_verifiers.verify_target_before_temperature, temperature=t)),
    Slip("argmax-drafter", "drafter at temperature 0", True,
         "the drafter proposes its argmax (temperature 0) but the ratio uses its q at the run's temperature",
         f"transformers' assisted generation ({GH}huggingface/transformers/pull/30778, reverted by "
         f"{GH}huggingface/transformers/pull/33534; again {GH}huggingface/transformers/issues/47932); "
         f"{GH}jaymody/speculative-sampling/issues/3",
         lambda t: verify.verify_sampled,
         lambda ids, q: wrong_verifiers.draft_argmax_keeping_q(q).to(ids.device, ids.dtype)),
    Slip("unnormalised", "residual not renormalised", True,
         "max(0, p − q) drawn by its cumulative sum without dividing by its total: past the total, the last token",
         "no engine found to have shipped it (torch.multinomial normalises its input, so there it is harmless)",
         lambda t: wrong_verifiers.verify_residual_unnormalised),
    Slip("at-drafted", "residual at the drafted token only", True,
         "at a rejection q is subtracted at the rejected token only, not everywhere",
         f"EAGLE's sampling code ({GH}SafeAILab/EAGLE/issues/20, fixed)",
         lambda t: wrong_verifiers.verify_residual_at_drafted_token),
    Slip("from-p", "residual replaced by p", True,
         "at a rejection draw from p itself (verify_sampled_without_residual): the drafter's favourite gets a "
         "second chance",
         f"claimed of EAGLE's non-greedy path ({GH}SafeAILab/EAGLE/issues/329, open; its authors hold that top-k "
         "drafting "
         f"makes q one-hot, {GH}SafeAILab/EAGLE/issues/171); suspected in {GH}NJUNLP/MCSD/issues/5, whose code was "
         "right", lambda t: wrong_verifiers.verify_sampled_without_residual),
]
SLIP_BY_KEY = {slip.key: slip for slip in SLIPS}
# wrong_verifiers.verify_by_target_argmax (greedy checks under sampling, as lablup/mlxcel #902 described its verify
# loop) is not an arm: on the lesson's prompt EAGLE's draft is the target's favourite so rarely that it parted from
# match acceptance on 1 seed in 1500, far more seeds than a lesson has.


def first_tokens(slips: list[Slip], verifiers: dict[str, Callable], draft_ids: torch.Tensor, q: torch.Tensor,
                 p: torch.Tensor, generator: torch.Generator) -> dict[str, tuple[int, bool]]:
    """Every arm on one draft, q and p, each from the same state of the random stream: the first token it emits
    and whether it accepted the draft. The stream is left where the correct verifier would find it."""
    state, out = generator.get_state(), {}
    for slip in slips:
        generator.set_state(state)
        proposed = draft_ids if slip.proposes is None else slip.proposes(draft_ids, q)
        verdict = verifiers[slip.key](proposed, q, p, generator)
        out[slip.key] = (int(proposed[0]) if verdict.n_accepted else verdict.next_token, verdict.n_accepted > 0)
    generator.set_state(state)
    return out


class FanOut:
    """The engine's verifier for one seed: at the run's first step every arm (first_tokens), the draft's q and the
    target's p kept; the engine itself gets the correct verdict, drawn from the same state, so its run is an
    ordinary one."""

    def __init__(self, slips: list[Slip], verifiers: dict[str, Callable]):
        self.slips, self.verifiers = slips, verifiers
        self.first: dict[str, tuple[int, bool]] = {}
        self.q = self.p = None

    def __call__(self, draft_ids, draft_probs, target_probs, generator):
        if not self.first:
            if draft_probs is None or draft_ids.shape[0] != 1:
                raise ValueError("lesson 7 needs a drafter that samples its first draft from a distribution q "
                                 "(eagle, medusa, draft, early-exit)")
            self.first = first_tokens(self.slips, self.verifiers, draft_ids, draft_probs, target_probs, generator)
            self.q, self.p = draft_probs, target_probs
        return verify.verify_sampled(draft_ids, draft_probs, target_probs, generator)


def pooled(q: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [g, V] and p [g + 1, V] on the tokens either gives at least FLOOR somewhere, their remaining mass pooled
    into one last token: (q, p, the kept tokens' ids)."""
    kept = torch.nonzero((p >= FLOOR).any(0) | (q >= FLOOR).any(0)).flatten()
    squeeze = lambda d: torch.cat([d[:, kept], (1.0 - d[:, kept].sum(-1, keepdim=True)).clamp_min(0.0)], -1)  # noqa: E731
    return squeeze(q), squeeze(p), kept


def replay(slips: list[Slip], verifiers: dict[str, Callable], q: torch.Tensor, p: torch.Tensor, seed: int,
           kept: torch.Tensor | None = None) -> dict[str, tuple[int, bool]]:
    """A seed's first step without the forward passes: the drafter's draw from q with the seed's stream (as its
    choose() draws), then every arm on it. kept: q and p are pooled (pooled()) and these are their tokens' ids."""
    generator = make_generator(seed, q.device)
    draft_ids = draw(q[0], generator).reshape(1)
    outcome = first_tokens(slips, verifiers, draft_ids, q, p, generator)
    if kept is None:
        return outcome
    ids = kept.tolist() + [OTHER]
    return {key: (ids[token], accepted) for key, (token, accepted) in outcome.items()}


@dataclass
class Arm:
    key: str  # a Slip's
    counts: Counter = field(default_factory=Counter)  # first new token -> seeds that emitted it
    accepted: int = 0  # seeds whose draft this arm accepted
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
    """Greedy decoding in bfloat16 beside float32: where they part, and how close the two best tokens were there."""
    prompt: str | list[int]
    method: str
    float32: list[str]  # plain greedy output, token texts
    bfloat16: list[str]
    speculative_identical: bool  # float32 with the method equals float32 plain, token for token
    parted_at: int | None  # the first token where bfloat16 plain differs from float32 plain
    bfloat16_speculative_parted_at: int | None = None  # where bfloat16 with the method parts from bfloat16 plain
    # (on a GPU: both with the exact mode off, as engines ship them)
    top_float32: list[str] = field(default_factory=list)  # where they part: float32's two best tokens, and logits
    logits_float32: list[float] = field(default_factory=list)
    top_bfloat16: list[str] = field(default_factory=list)
    logits_bfloat16: list[float] = field(default_factory=list)
    # the same bfloat16 pair with the exact mode on (runners/exact.py), run only where the mode exists: a GPU
    exact_ran: bool = False
    exact_covered: bool = False  # both runs' forwards were in the mode (their settings' exact_forward)
    exact_parted_at: int | None = None  # then, where the method parts from plain (None: equal)

    @property
    def margin_float32(self) -> float | None:
        return self.logits_float32[0] - self.logits_float32[1] if len(self.logits_float32) == 2 else None

    @property
    def margin_bfloat16(self) -> float | None:
        return self.logits_bfloat16[0] - self.logits_bfloat16[1] if len(self.logits_bfloat16) == 2 else None

    @property
    def bfloat16_step(self) -> float | None:
        """The spacing of bfloat16 numbers (8 significant bits) near float32's best logit there."""
        return bfloat16_spacing(self.logits_float32[0]) if self.logits_float32 else None


def bfloat16_spacing(value: float) -> float:
    """The gap between a bfloat16 number of this size and the next one."""
    exponent = torch.frexp(torch.tensor(abs(value) or 1.0)).exponent.item() - 1
    return torch.finfo(torch.bfloat16).eps * 2.0 ** exponent


@dataclass
class Bugs:
    prompt: str | list[int]
    method: str
    temperature: float
    runs: int  # the verdict's seeds: every arm is judged there
    exact: dict[int, float]  # the target's probability of each first new token (at least FLOOR)
    arms: list[Arm]
    draft: dict[int, float] = field(default_factory=dict)  # the drafter's q of the first token (at least FLOOR)
    seeds: int = 0  # run so far (past `runs` while a bug is still uncaught)
    engine_seeds: int = 0  # of them, run by the engine itself
    engine_agreed: int = 0  # engine seeds on which the replay gave every arm the engine's token
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


def likely(probs: torch.Tensor) -> dict[int, float]:
    probs = probs.double().cpu()
    return {int(t): float(probs[t]) for t in torch.nonzero(probs >= FLOOR).flatten()}


def judge(record: Bugs, slips: list[Slip], outcome_of: Callable[[int], dict[str, tuple[int, bool]]], most: int,
          text: Callable[[int], str] = str) -> Iterator[Bugs]:
    """Seeds 0, 1, ... into the record's arms (outcome_of(seed): every arm's first token and acceptance), a look at
    every arm's fit each CHECK_EVERY seeds: record.runs seeds, then on (up to `most`) while a wrong arm is not yet
    caught, to show how many it needs. Yields as it goes."""
    wrong = [a for a, s in zip(record.arms, slips) if s.wrong]
    while record.seeds < record.runs or (record.seeds < most and any(a.looks[-1][1] >= SIGNIFICANCE for a in wrong)):
        outcome = outcome_of(record.seeds)
        record.seeds += 1
        for arm in record.arms:
            token, accepted = outcome[arm.key]
            arm.counts[token] += 1
            arm.accepted += accepted
            if token not in record.token_texts:
                record.token_texts[token] = "(others)" if token == OTHER else text(token)
        if record.seeds % CHECK_EVERY == 0 or record.seeds == record.runs:
            for arm in record.arms:
                arm.looks.append([record.seeds, fit_of(arm.counts, record.exact).p_value])
            if record.seeds <= record.runs or record.seeds % (10 * CHECK_EVERY) == 0:
                yield record
    yield record


def on_distributions(p: torch.Tensor, q: torch.Tensor, temperature: float = TEMPERATURE, runs: int = RUNS,
                     most: int = 3000,
                     slips: list[Slip] | None = None) -> Iterator[Bugs]:
    """Every arm on a given target p [2, V] (after temperature) and draft q [1, V], no model: the lesson's replay
    alone, for a distribution chosen by hand."""
    slips = slips or SLIPS
    verifiers = {s.key: s.verifier(temperature) for s in slips}
    record = Bugs("", "given q", temperature, runs, likely(p[0]), [Arm(s.key) for s in slips], draft=likely(q[0]))
    yield from judge(record, slips, lambda seed: replay(slips, verifiers, q, p, seed), most)


def bugs(target: LoadedModel, prompt: str | list[int] = PROMPT, method: str = METHOD, runs: int = RUNS,
         temperature: float = TEMPERATURE, most: int = 3000, chat: bool = True, rounding_tokens: int = 16,
         slips: list[Slip] | None = None, make: Callable[[], Proposer] | None = None,
         other_dtype: LoadedModel | None = None, engine_seeds: int = ENGINE_SEEDS) -> Iterator[Bugs]:
    """Every arm on the same seeds 0, 1, ...: the first engine_seeds through the engine, the rest replayed on its
    q and p (judge). Then the rounding contrast (skipped with rounding_tokens=0; other_dtype: the target in the
    other dtype, a copy cast here when None)."""
    slips = slips or SLIPS
    ids = prompt_ids(target, prompt, chat)
    settings = DecodeSettings(max_new_tokens=2, gamma=1, temperature=temperature, stop_at_eos=False).validate()
    exact = likely(next_token_probs(target, [ids], settings)[0])
    proposer = (make or (lambda: make_proposer(method, target)))()
    record = Bugs(prompt, proposer.name, temperature, runs, exact, [Arm(s.key) for s in slips])
    verifiers = {s.key: s.verifier(temperature) for s in slips}
    replayed = {}  # the pooled q and p and their tokens, once the engine's seeds are done

    def outcome_of(seed: int) -> dict[str, tuple[int, bool]]:
        if seed >= engine_seeds:
            replayed.setdefault("pooled", pooled(record_q[0], record_q[1]))
            return replay(slips, verifiers, *replayed["pooled"][:2], seed, replayed["pooled"][2])
        fan = FanOut(slips, verifiers)
        steps = iter(SpeculativeRun(target, proposer, ids, dataclasses.replace(settings, seed=seed), verifier=fan,
                                    detail=False))
        next(steps)  # the first step decides the tested token; the rest of the run is not needed
        steps.close()
        record_q[:] = [fan.q, fan.p]
        record.engine_seeds += 1
        record.engine_agreed += replay(slips, verifiers, fan.q, fan.p, seed) == fan.first
        record.draft = likely(fan.q[0])
        return fan.first

    record_q: list = [None, None]  # the drafter's q and the target's p that the engine's forward passes gave
    yield from judge(record, slips, outcome_of, most, lambda token: token_text(target, token))
    if rounding_tokens:
        record.rounding = rounding(target, prompt, method, rounding_tokens, chat, other_dtype)
        yield record


def top_two(target: LoadedModel, ids: list[int]) -> tuple[list[str], list[float]]:
    """The target's two largest logits after ids, and their tokens' texts (a plain transformers forward)."""
    with torch.inference_mode():
        logits = target.model(input_ids=torch.tensor([ids], device=target.device), use_cache=False).logits[0, -1]
    values, tokens = logits.float().topk(2)
    return [token_text(target, int(t)) for t in tokens], [float(v) for v in values]


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def in_dtype(target: LoadedModel, dtype: torch.dtype) -> LoadedModel:
    """The target's weights copied and cast to dtype (what loading it in that dtype gives, without reading it again)."""
    return dataclasses.replace(target, model=copy.deepcopy(target.model).to(dtype), dtype=dtype)


def rounding(target: LoadedModel, prompt: str | list[int], method: str = "eagle", max_new_tokens: int = 16,
             chat: bool = True, other: LoadedModel | None = None) -> Rounding:
    """Greedy decoding in float32 and in bfloat16 (the target in the other dtype, loaded here when not given),
    plain and with the method; where bfloat16 plain parts from float32 plain, the two best logits of each. On a
    GPU the bfloat16 pair runs with the exact mode off (as engines ship it) and again with it on."""
    if other is None:
        other = in_dtype(target, torch.bfloat16 if target.dtype == torch.float32 else torch.float32)
    f32, b16 = (target, other) if target.dtype == torch.float32 else (other, target)
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=4, temperature=0.0, stop_at_eos=False).validate()
    ids = prompt_ids(f32, prompt, chat)
    on_gpu = b16.device.type == "cuda"  # where the exact mode exists: bfloat16 runs once without it, once with it
    environment = EngineOptions.from_environment()

    def both(model: LoadedModel, options: EngineOptions | None) -> tuple[RunResult, RunResult]:
        return tuple(run_once(model, PlainProposer() if name == "plain"
                              else make_proposer(method, model, options=options),
                              ids, settings, detail=False, options=options) for name in ("plain", method))

    plain32, method32 = (r.token_ids for r in both(f32, None))
    plain16, method16 = (r.token_ids for r in both(b16, replace(environment, exact=False) if on_gpu else None))
    parted = first_difference(plain32, plain16)
    texts = lambda model, tokens: [token_text(model, t) for t in tokens]  # noqa: E731
    record = Rounding(prompt, method, texts(f32, plain32), texts(b16, plain16), method32 == plain32,
                      parted, first_difference(plain16, method16))
    if on_gpu:
        exact_plain, exact_method = both(b16, replace(environment, exact=True))
        record.exact_ran = True
        record.exact_covered = all(r.settings.get("exact_forward") for r in (exact_plain, exact_method))
        record.exact_parted_at = first_difference(exact_plain.token_ids, exact_method.token_ids)
    if parted is not None:
        prefix = ids + plain32[:parted]
        record.top_float32, record.logits_float32 = top_two(f32, prefix)
        record.top_bfloat16, record.logits_bfloat16 = top_two(b16, prefix)
    return record


# the record as a table and a sentence --------------------------------------------------------------------------

def caught_text(record: Bugs, arm: Arm) -> str:
    slip, p, caught = SLIP_BY_KEY[arm.key], arm.p_at(record.runs), arm.caught_at()
    if p is None:
        return "–"
    if not slip.wrong:
        return "passed" if p >= SIGNIFICANCE else f"flagged (p < {SIGNIFICANCE})"
    if caught is not None and caught <= record.runs:
        return f"yes, from {caught} seeds on"
    return f"not at {record.runs} seeds; from {caught} on" if caught is not None else f"not in {arm.runs} seeds"


def bug_rows(record: Bugs) -> list[list]:
    rows = []
    for arm in record.arms:
        slip = SLIP_BY_KEY[arm.key]
        rows.append([slip.label, "yes" if slip.wrong else "no", p_text(arm.p_at(record.runs)), caught_text(record, arm),
                     round(arm.accepted / arm.runs, 2) if arm.runs else "–", slip.what, slip.reported])
    return rows


def rounding_sentence(r: Rounding | None) -> str:
    if r is None:
        return ""
    same = ("float32 with the method equals float32 plain token for token" if r.speculative_identical else
            "**float32 with the method differs from float32 plain: a bug**")
    if r.parted_at is None:
        return (
            f"Greedy: bfloat16 and float32 plain agree on all {len(r.float32)} tokens here; {same}. {exact_sentence(r)}"
        )
    return (f"Greedy, not a bug: bfloat16 plain parts from float32 plain at token {r.parted_at}, where float32's two "
            "best "
            f"tokens {code(r.top_float32[0])} and {code(r.top_float32[1])} are **{r.margin_float32:.3f}** apart in "
            "logit, "
            f"and bfloat16 spaces numbers near {r.logits_float32[0]:.1f} by {r.bfloat16_step:g}: rounding alone swaps "
            "a "
            f"near-tie (bfloat16's margin there: {r.margin_bfloat16:+.3f}, {code(r.top_bfloat16[0])} first). {same}. "
            f"{exact_sentence(r)}")


def exact_sentence(r: Rounding) -> str:
    """The method beside plain, both in bfloat16: where its verify pass rounds K positions at once and a plain step
    one, and, on a GPU, the same pair in the exact mode, which computes each position as plain decoding does."""
    parted = r.bfloat16_speculative_parted_at
    off = ("the method equals bfloat16 plain token for token" if parted is None else
           f"the method parts from bfloat16 plain at token {parted} (its verify pass rounds K positions at once, a "
           "plain step one)")
    if not r.exact_ran:
        return (f"In bfloat16 {off}. The exact mode, which computes each position of a verify pass as plain decoding "
                "does, is for GPUs: it did not run on this device.")
    if not r.exact_covered:
        return (f"In bfloat16 with the exact mode off, {off}; the exact mode could not cover these runs on this GPU "
                "(docs/exactness.md says where it does not reach).")
    on = ("**with it on, the method equals bfloat16 plain bit for bit**: each position computed as plain decoding "
          "computes it" if r.exact_parted_at is None else
          f"**with it on, the method still parts from plain at token {r.exact_parted_at}: a bug in the exact mode**")
    return f"In bfloat16 with the exact mode off, {off}; {on}."


def code(token: str) -> str:
    """A token's text inside a sentence of markdown: a code span, so that no markup in it is read as markup."""
    return "`" + repr(token)[1:-1].replace("`", "ˋ") + "`"


def bug_sentence(record: Bugs) -> str:
    judged = [a for a in record.arms if a.p_at(record.runs) is not None]
    if not judged:
        return ""
    exact = [a for a in judged if not SLIP_BY_KEY[a.key].wrong]
    wrong = [a for a in judged if SLIP_BY_KEY[a.key].wrong]
    caught = [a for a in wrong if a.p_at(record.runs) < SIGNIFICANCE]
    text = [f"At {record.runs} seeds, against the target's exact distribution of the first new token: "
            + "; ".join(f"{SLIP_BY_KEY[a.key].label} p = **{p_text(a.p_at(record.runs))}** ("
                        + ("passed" if a.p_at(record.runs) >= SIGNIFICANCE else "flagged") + ")" for a in exact) + "."]
    if wrong:
        text.append(f"**{len(caught)} of {len(wrong)} bugs caught** (p < {SIGNIFICANCE})"
                    + ("; the quickest, "
                       f"{SLIP_BY_KEY[min(caught, key=lambda a: a.caught_at() or record.runs).key].label}"
                       f", from {min(a.caught_at() or record.runs for a in caught)} seeds on." if caught else "."))
    for a in wrong:
        if a not in caught:
            needed = a.caught_at()
            text.append(f"{SLIP_BY_KEY[a.key].label} is hard to catch: not at {record.runs} seeds, "
                        + (f"caught from {needed} seeds on." if needed else f"and not in {a.runs}."))
    by_key = {a.key: a for a in judged}
    if "match" in by_key and "correct" in by_key:
        text.append(f"Match acceptance is exact but accepted {by_key['match'].accepted / by_key['match'].runs:.0%} of "
                    "drafts where the correct verifier accepted "
                    f"{by_key['correct'].accepted / by_key['correct'].runs:.0%}.")
    if record.engine_seeds:
        text.append(f"The engine ran {record.engine_seeds} seeds itself; on "
                    + (f"all {record.engine_seeds}" if record.engine_agreed == record.engine_seeds else
                       f"**only {record.engine_agreed}**") + " the replay of its draws gave every arm its tokens.")
    return " ".join(text + [rounding_sentence(record.rounding)]).strip()


def bug_figure_data(record: Bugs, most: int = 10) -> tuple[list[int], dict[str, list[float]]]:
    """The most frequent first tokens over every arm, and each arm's share of its seeds on them (for a chart)."""
    total = sum((a.counts for a in record.arms), start=Counter())
    shown = [t for t, _ in total.most_common(most)]
    return shown, {a.key: [a.counts.get(t, 0) / a.runs if a.runs else 0.0 for t in shown] for a in record.arms}


# the first new token after a chat prompt, drafted by EAGLE at gamma 1 (the lesson tests that token)
SETTINGS = dict(prompt=PROMPT, method=METHOD, gamma=1, temperature=TEMPERATURE, max_new=32, seed=0)
LESSON = Lesson(7, "bugs", "How speculative decoding goes wrong", "Bugs", CLAIM, bugs, lambda r: HEADERS, bug_rows,
                bug_sentence, Bugs, minutes=2, settings=SETTINGS)
