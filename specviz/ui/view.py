"""Numbers the app shows, shaped from step records: pure functions, no gradio, no plotly."""
from __future__ import annotations

from dataclasses import dataclass

from ..records.metrics import running_metrics  # noqa: F401 (the readouts read view.running_metrics)
from ..records.oracle import accepted_length_histogram
from ..records.schema import RunMetrics, StepRecord
from ..api import best_gamma, expected_speedup, expected_tokens_per_step

GAMMA_CURVE_MAX = 16


def used_gamma(steps: list[StepRecord], setting: int) -> tuple[float, bool]:
    """The draft length the run used, and whether it was fixed. Only the last step may draft less (no room
    left before max-new-tokens); a method that varies it (adaptive) gets the mean over drafting steps."""
    drafting = [s.gamma for s in steps if s.gamma > 0]
    if not drafting or all(g == setting for g in drafting[:-1]):
        return float(setting), True
    return sum(drafting) / len(drafting), False


@dataclass
class Theory:
    alpha: float
    cost_ratio: float
    gamma: float
    gamma_fixed: bool
    expected_tokens_per_step: float
    expected_speedup: float
    measured_tokens_per_step: float
    measured_speedup: float | None
    best_gamma: int


def theory(metrics: RunMetrics, steps: list[StepRecord], gamma_setting: int,
           measured_speedup: float | None) -> Theory | None:
    """Leviathan et al.'s expectations from the run's measured alpha and c; None when nothing was drafted."""
    if metrics.acceptance_rate is None:
        return None
    alpha = metrics.acceptance_rate
    c = metrics.cost_ratio or 0.0
    gamma, fixed = used_gamma(steps, gamma_setting)
    return Theory(
        alpha=alpha, cost_ratio=c, gamma=gamma, gamma_fixed=fixed,
        expected_tokens_per_step=expected_tokens_per_step(alpha, gamma),
        expected_speedup=expected_speedup(alpha, gamma, c),
        measured_tokens_per_step=metrics.mean_accepted_length,
        measured_speedup=measured_speedup,
        best_gamma=best_gamma(alpha, c, GAMMA_CURVE_MAX),
    )


def speedup_curve(alpha: float, cost_ratio: float, gamma_max: int = GAMMA_CURVE_MAX) -> tuple[list[int], list[float]]:
    gammas = list(range(1, gamma_max + 1))
    return gammas, [expected_speedup(alpha, g, cost_ratio) for g in gammas]


def accepted_length_counts(steps: list[StepRecord]) -> tuple[list[int], list[int]]:
    """Histogram of accepted drafts per drafting step: (lengths 0..max gamma, step counts)."""
    counts = accepted_length_histogram(steps, max((s.gamma for s in steps), default=0))
    return list(range(len(counts))), counts


def race_points(steps: list[StepRecord], engine_elapsed: list[float]) -> tuple[list[float], list[int]]:
    """Tokens against engine time: (seconds, tokens emitted), starting at (0, 0)."""
    seconds, tokens = [0.0], [0]
    for step, elapsed in zip(steps, engine_elapsed):
        seconds.append(elapsed)
        tokens.append(step.total_emitted)
    return seconds, tokens


@dataclass
class FirstDifference:
    index: int  # output token index
    speculative: str | None  # that token's text in each output (None past the end)
    plain: str | None
    margin: float | None = None  # plain's two largest logits there, how far apart (api.logit_margin); None: unknown
    dtype: str = ""  # the runs' dtype ("bfloat16", ...)
    exact: bool = False  # both runs' forwards were in the exact mode (settings["exact_forward"])
    gpu: bool = False  # the runs ran on a GPU, where the exact mode exists


def first_difference_texts(index: int | None, speculative_texts: list[str],
                           plain_texts: list[str]) -> FirstDifference | None:
    if index is None:
        return None
    def at(texts):
        return texts[index] if index < len(texts) else None
    return FirstDifference(index, at(speculative_texts), at(plain_texts))


# A greedy difference is put down to rounding only at a near-tie: plain's two largest logits closer than this, in
# bfloat16. Why 0.5: a top logit of 16 to 32 (lesson 7 found the default model's near-tie at 18.3) is one of
# bfloat16's numbers spaced 1/8 apart, and a forward over K positions and one over a single position round their
# sums in other orders, so the two logits can land a few of those steps apart: 0.5 is four (lesson 7's swap was at
# 0.033). Other dtypes scale it by their spacing (float16: 3 more significant bits, float32: 16 more); a dtype not
# listed is never put down to rounding.
NEAR_TIE_BFLOAT16 = 0.5
SIGNIFICANT_BITS = {"bfloat16": 8, "float16": 11, "float32": 24}


def near_tie_margin(dtype: str) -> float | None:
    """The widest margin of the two largest logits that rounding in `dtype` plausibly flips; None: no claim."""
    bits = SIGNIFICANT_BITS.get(dtype)
    return None if bits is None else NEAR_TIE_BFLOAT16 * 2.0 ** (SIGNIFICANT_BITS["bfloat16"] - bits)


def difference_cause(difference: FirstDifference) -> str:
    """Why a greedy run differs from plain, as far as the records tell: "exact" (both runs in the exact mode,
    which rules rounding out: worth reporting), "unknown" (the margin was not recorded, or a dtype with no
    claim), "rounding" (a near-tie for the dtype) or "wide" (not a near-tie: a real difference)."""
    if difference.exact:
        return "exact"
    limit = near_tie_margin(difference.dtype)
    if difference.margin is None or limit is None:
        return "unknown"
    return "rounding" if difference.margin < limit else "wide"


def step_of_token(steps: list[StepRecord], token_index: int) -> int | None:
    """The step that emitted output token `token_index`."""
    for step in steps:
        if step.total_emitted > token_index:
            return step.index
    return None


MEASURED_HEADERS = ["method", "tok/s", "speedup", "τ", "α", "c"]


def measured_table(run: dict) -> list[list]:
    """A measured Spec-Bench run (measured.measured_run) as the Compare tab's reference table; '–' where a
    method drafts nothing."""
    def number(value, digits):
        return "–" if value is None else f"{value:,.{digits}f}"

    return [[m["method"], number(m["tokens_per_second"], 1), f"{m['speedup']:.2f}×", number(m["tau"], 2),
             number(m["alpha"], 2), number(m["cost"], 2)] for m in run["methods"]]


def measured_caption(run: dict) -> str:
    """What the run was and where its doc lies."""
    return f"**{run['label']}**: greedy, batch 1, every method beside plain decoding in one process (`{run['doc']}`)."


def paying_methods(run: dict, choices: list[str], most: int = 3, least_alpha: float = 0.2) -> list[str]:
    """The methods a comparison ticks at first: of `choices`, those a measured run (measured.measured_run) found
    accepting drafts (alpha at least least_alpha) and faster than plain decoding, fastest first, at most `most`
    (a method's entries with other settings, METHOD:GAMMA@STOP, count under its name)."""
    best: dict[str, float] = {}
    for m in run["methods"]:
        name = m["method"].split(":")[0]
        if name in choices and (m["alpha"] or 0) >= least_alpha and m["speedup"] > 1:
            best[name] = max(best.get(name, 0.0), m["speedup"])
    return sorted(best, key=best.get, reverse=True)[:most]


def accepted_lengths_text(counts: list[int] | None, undrafted: int = 0) -> str:
    """A histogram of accepted lengths as one short cell: the counts for 0, 1, … γ accepted, then the steps that
    drafted nothing (a lookup that found no match), so that the cell adds up to the run's steps; '–' for a run
    that drafted nothing (plain decoding)."""
    if not counts or not any(counts):
        return "–"
    text = " · ".join(str(c) for c in counts)
    return f"{text} (+{undrafted} no draft)" if undrafted else text


# after a figure that failed its plausibility check (specviz.measure.plausibility); the note says why
NOISY = " (noisy)"


def compare_row(row: dict) -> list:
    """One Compare tab row (tabs.COMPARE_HEADERS) from a run's figures; '–' where a figure does not apply:
    plain decoding has no drafts, so no c, no verifying share beside drafting and no accepted lengths. A
    speedup that failed its check (row["doubt"]) is marked, and so is the oracle's, measured against the same
    plain run."""
    def fixed(value, digits):
        return "–" if value is None else round(value, digits)

    mark = NOISY if row.get("doubt") else ""

    def times(value):
        return "–" if value is None else f"{value:.2f}×{mark}"

    plain = row["method"] == "plain"
    return [row["method"], row["new_tokens"], row["steps"], round(row["tau"], 2), fixed(row["alpha"], 3),
            fixed(row["cost"], 3), round(row["tokens_per_second"], 1), times(row["speedup"]),
            round(row["oracle_tau"], 2), times(row["oracle_speedup"]),
            "–" if plain or row["verify_share"] is None else f"{row['verify_share']:.0%}",
            accepted_lengths_text(row["accepted_lengths"], row.get("undrafted", 0)), row["same"]]


def compare_notes(rows: list[dict]) -> list[str]:
    """The noise note of each row whose speedup failed its check, naming the method (the Compare tab's status
    line shows them under the table's marks)."""
    return [f"{row['method']}: {row['doubt']}" for row in rows if row.get("doubt")]
