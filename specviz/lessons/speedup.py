"""Lesson 4, acceptance decides the win: each method on prompts of different kinds, greedy, beside plain decoding
of the same prompt: alpha, tau, c, the measured speedup and the one Leviathan et al.'s formula expects."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from .. import methods as registry
from ..api import make_proposer, warm_up
from ..models.loading import LoadedModel
from ..measure.plausibility import drafting_share, noise_note, speedup_doubt, step_durations
from ..proposers import PlainProposer, Proposer
from ..records.metrics import tested_acceptance
from ..records.schema import RunResult
from ..settings import DecodeSettings
from ..rule.theory import expected_speedup
from .common import PROMPTS, prompt_ids, run_once
from .lesson import Lesson
from .literature import SPEC_BENCH_SOURCE, literature_for, literature_lines, spec_bench_lines

CLAIM = ("How much speculation wins depends on how often the target accepts the drafts (α), more than on anything "
         "else: speedup = (1 − α^(γ+1)) / ((1 − α)(γc + 1)).")
HEADERS = ["prompt", "method", "α (per tested draft)", "accepted / drafted", "τ", "c", "measured speedup",
           "expected speedup", "literature (other models)"]
ALPHA_NOTE = ("α is the formula's: accepted drafts over the drafts the target tested. A draft after a step's first "
              "rejection is never tested (the step ends there), so accepted / drafted, which counts it as a failure, "
              "is lower and would make the formula expect too little; γc is the run's drafting time over its "
              "verifying time, so the expected speedup is also the most the run's own τ and drafting allow.")


@dataclass
class AcceptanceRow:
    kind: str  # the prompt's kind
    method: str
    gamma: int
    alpha: float | None  # accepted / tested drafts (records.metrics.tested_acceptance): the formula's alpha
    tau: float  # tokens per target forward
    c: float | None  # drafter time per token / target forward time
    measured_speedup: float  # plain wall time / the method's, same prompt and settings
    expected_speedup: float | None  # (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))
    new_tokens: int
    doubt: str | None = None  # why the measured speedup is not to be trusted (specviz.measure.plausibility), or None
    share_accepted: float | None = None  # accepted / drafted, the run's acceptance rate


def pair_doubt(plain: RunResult, result: RunResult) -> str | None:
    """The plausibility check of one method's speedup over plain decoding, from the two runs' own steps."""
    m = result.metrics
    speedup = plain.metrics.wall_seconds / m.wall_seconds
    return speedup_doubt(speedup, m.mean_accepted_length, step_durations([s.elapsed_s for s in plain.steps]),
                         step_durations([s.elapsed_s for s in result.steps]), [s.gamma for s in result.steps],
                         drafting=drafting_share(m.draft_seconds, m.verify_seconds))


def expected_curve(alpha: float, c: float, gammas: Sequence[int] = tuple(range(0, 13))) -> list[tuple[int, float]]:
    """The expected speedup at each gamma (Leviathan et al. 2023, theorem 3.8)."""
    return [(g, expected_speedup(alpha, g, c)) for g in gammas]


def compared() -> tuple[str, ...]:
    """What the lesson compares, on each of PROMPTS: the drafters that need no draft model chosen, each on its own
    (specviz.methods; adaptive drafts through one of them)."""
    return tuple(m.name for m in registry.methods() if m.drafts and not m.uses_draft_model and not m.on_another)


def acceptance(target: LoadedModel, methods: Sequence[str] | None = None,
               prompts: dict[str, str] | None = None, gamma: int = 4, max_new_tokens: int = 32,
               make: Callable[[str], Proposer] | None = None) -> Iterator[list[AcceptanceRow]]:
    """Each method on each prompt, greedy, beside plain decoding of the same prompt; yields the table so far. A
    speedup that fails its plausibility check is measured once more, plain decoding again right before the
    method, and the row keeps the second pair (with its doubt, if that one fails too)."""
    make = make or (lambda method: make_proposer(method, target))
    methods = compared() if methods is None else methods
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=gamma, temperature=0.0, stop_at_eos=False).validate()
    warm_up(target)
    rows: list[AcceptanceRow] = []
    for kind, prompt in (prompts or PROMPTS).items():
        ids = prompt_ids(target, prompt, True)
        plain = run_once(target, PlainProposer(), ids, settings, prompt, detail=False)
        for method in methods:
            result = run_once(target, make(method), ids, settings, prompt, detail=False)
            baseline, doubt = plain, pair_doubt(plain, result)
            if doubt:  # measured again under the same conditions, the pair back to back
                baseline = run_once(target, PlainProposer(), ids, settings, prompt, detail=False)
                result = run_once(target, make(method), ids, settings, prompt, detail=False)
                doubt = pair_doubt(baseline, result)
            m = result.metrics
            alpha = tested_acceptance(result.steps)
            expected = None if alpha is None else expected_speedup(alpha, gamma, m.cost_ratio or 0.0)
            rows.append(AcceptanceRow(kind, result.method, gamma, alpha, m.mean_accepted_length, m.cost_ratio,
                                      baseline.metrics.wall_seconds / m.wall_seconds, expected, m.new_tokens, doubt,
                                      m.acceptance_rate))
            yield list(rows)


FAR_BELOW = 1.5  # a measured speedup this many times below the expected one is explained in its row


def far_below(row: AcceptanceRow) -> bool:
    """A speedup that passed its check yet fell far below the formula's: the formula's assumptions failed here."""
    return (not row.doubt and row.expected_speedup is not None
            and row.measured_speedup * FAR_BELOW < row.expected_speedup)


BELOW_NOTE = ("the formula takes a verify pass of γ + 1 positions and the step's other work to cost one plain step; "
              "where the arithmetic binds a forward (a CPU) the verify pass costs more, and a drafter that reads the "
              "target's hidden states (medusa, eagle) adds its own work to every step")


def acceptance_rows(rows: list[AcceptanceRow]) -> list[list]:
    def lit(method):
        ref = literature_for(method)
        return "–" if ref is None else f"{ref.speedup}; {ref.targets} ({ref.source})"

    return [[r.kind, r.method, "–" if r.alpha is None else round(r.alpha, 2),
             "–" if r.share_accepted is None else round(r.share_accepted, 2), round(r.tau, 2),
             "–" if r.c is None else round(r.c, 3),
             f"{r.measured_speedup:.2f}×" + (" (noisy)" if r.doubt else " (far below: see the note)" if far_below(r)
                                             else ""),
             "–" if r.expected_speedup is None else f"{r.expected_speedup:.2f}×", lit(r.method)] for r in rows]


def acceptance_sentence(rows: list[AcceptanceRow]) -> str:
    if not rows:
        return ""
    trusted = [r for r in rows if not r.doubt]
    noisy = [r for r in rows if r.doubt]
    note = (" " + noise_note(f"{len(noisy)} of {len(rows)} speedups failed their check, marked (noisy); for "
                             f"instance {noisy[0].method} on {noisy[0].kind}: {noisy[0].doubt}") if noisy else "")
    if not trusted:
        return note.strip()
    best = max(trusted, key=lambda r: r.measured_speedup)
    worst = min(trusted, key=lambda r: r.measured_speedup)
    below = [r for r in rows if far_below(r)]
    if below:
        note += (f" {len(below)} measured speedups fell far below the expected (marked), for instance "
                 f"{below[0].method} on "
                 f"{below[0].kind}: {below[0].measured_speedup:.2f}× against {below[0].expected_speedup:.2f}×: "
                 f"{BELOW_NOTE}.")
    return (f"The same machine and model gave **{best.measured_speedup:.2f}×** ({best.method} on {best.kind}, "
            f"α {best.alpha if best.alpha is None else round(best.alpha, 2)}) and **{worst.measured_speedup:.2f}×** "
            f"({worst.method} on {worst.kind}, α {worst.alpha if worst.alpha is None else round(worst.alpha, 2)}): "
            f"acceptance, which depends on the prompt and the drafter, decides the win. {ALPHA_NOTE}" + note)


SETTINGS = dict(prompt=PROMPTS["code"], method="ngram", gamma=4, temperature=0.0, max_new=32, seed=0)
LESSON = Lesson(4, "acceptance", "Acceptance decides the win", "Acceptance", CLAIM, acceptance, lambda r: HEADERS,
                acceptance_rows, acceptance_sentence, list[AcceptanceRow],
                tuple([*literature_lines(), f"Spec-Bench's leaderboard beside specviz: {SPEC_BENCH_SOURCE}",
                       *spec_bench_lines()]), settings=SETTINGS)
