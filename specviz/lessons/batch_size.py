"""Lesson 5, where speculation stops paying: the same prompts decoded in batches of growing size, plain and with a
lookup drafter (the drafters that batch, specviz.engine.batch), beside what a verify pass costs over a plain step at
each size (the forward fills the device as the batch grows)."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..api import make_proposer, warm_up
from ..engine.batch import decode_batch, forward_cost
from ..measure.binding import what_binds
from ..measure.batch_bench import batches_of, crossover, summarize_batches
from ..models.loading import LoadedModel
from ..measure.plausibility import TOLERANCE, UNSETTLED, batch_doubt, noise_note, too_close_to_call
from ..settings import DecodeSettings
from .common import PROMPTS, prompt_ids
from .lesson import Lesson

CLAIM = ("Where a forward at batch 1 is bound by reading the weights (a GPU), checking a few more positions costs "
         "about nothing and speculation pays; serving many sequences at once fills the device, extra positions start "
         "to cost, and at some batch size speculation stops paying. Where the arithmetic binds a forward already at "
         "batch 1 (a small CPU), extra positions cost from the start. The verify pass's cost below says which holds "
         "on this device.")
HEADERS = ["method", "batch", "tokens/s", "τ", "α", "speedup over plain", "verify pass / plain step"]
LEAST_PROMPTS = 4  # every batch size decodes at least this many prompts: the three kinds at batch 1


def prompts_for(chosen: list, size: int) -> list:
    """The prompts one batch size decodes: one full batch, and at least LEAST_PROMPTS. Small batches decode
    slowest (on a small CPU, batch 1 over every prompt of the largest batch is a large share of the lesson), and the
    speedup at a size compares plain and speculative decoding of the same batches, so fewer prompts there keep it
    fair."""
    return chosen[:max(size, min(LEAST_PROMPTS, len(chosen)))]


@dataclass
class BatchSizes:
    device: str
    method: str
    rows: list[dict] = field(default_factory=list)  # one per decoded batch (specviz.measure.batch_bench's row)
    costs: list[dict] = field(default_factory=list)  # batch_size, ratio: a verify pass's forward over a plain step's

    @property
    def summary(self) -> list[dict]:
        return summarize_batches(self.rows) if self.rows else []


def batch_sizes(target: LoadedModel, method: str = "retrieval", sizes: Sequence[int] = (1, 2, 4, 8),
                prompts: Sequence[str] | None = None, max_new_tokens: int = 32, gamma: int = 4,
                chat: bool = True) -> Iterator[BatchSizes]:
    """Every size decodes the first prompts of one list (as many as the largest batch, repeated where there are
    fewer; prompts_for says how many), plain and with the method; yields after each size."""
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=gamma).validate()
    ids = [prompt_ids(target, p, chat) for p in (prompts or list(PROMPTS.values()))]
    record = BatchSizes(f"{target.device.type} ({target.describe()})", method)
    chosen = batches_of(ids, max(sizes))[0]
    if 1 in sizes:  # batch 1 runs the single-sequence loop: on a GPU its graphs, captured before it is timed
        warm_up(target, gamma + 1, min(max(map(len, chosen)) + max_new_tokens + gamma + 2, target.context_length))
    for size in sorted(sizes):
        for batch in batches_of(prompts_for(chosen, size), size):
            plain = None
            for spec in ("plain", method):
                run = decode_batch(target, lambda: make_proposer(spec, target), batch, settings)
                plain = plain or run
                record.rows.append({"method": spec, "batch_size": size, "rows": len(batch),
                                    "new_tokens": run.new_tokens,
                                    "wall_seconds": run.wall_seconds, "ms_per_token": run.ms_per_token,
                                    "row_forwards": sum(run.row_forwards), "drafted": run.drafted,
                                    "accepted": run.accepted,
                                    "identical_rows": sum(a == b for a, b in zip(run.token_ids, plain.token_ids))})
        record.costs.append({"batch_size": size, "positions": gamma + 1,
                             "ratio": forward_cost(target, size, gamma + 1) / forward_cost(target, size, 1)})
        yield record


def batch_doubts(summary: list[dict], method: str, costs: list[dict] = ()) -> dict[int, str]:
    """Each batch size whose figures fail their plausibility check (a speedup above tau, a verify pass measured
    cheaper than a plain step: specviz.measure.plausibility.batch_doubt), with why."""
    ratio = {c["batch_size"]: c["ratio"] for c in costs}
    doubts = {}
    for s in summary:
        if s["method"] == method:
            doubt = batch_doubt(s["speedup"], s.get("mean_accepted_length"), ratio.get(s["batch_size"]),
                                s["batch_size"])
            if doubt:
                doubts[s["batch_size"]] = doubt
    return doubts


def batch_rows(record: BatchSizes) -> list[list]:
    ratio = {c["batch_size"]: c["ratio"] for c in record.costs}
    noisy = batch_doubts(record.summary, record.method, record.costs)
    mark = lambda size: " (noisy)" if size in noisy else ""  # noqa: E731
    return [[s["method"], s["batch_size"], round(s["tokens_per_second"], 1), round(s["mean_accepted_length"], 2),
             "–" if s["acceptance_rate"] is None else round(s["acceptance_rate"], 2),
             f"{s['speedup']:.2f}×{mark(s['batch_size'])}",
             "–" if s["batch_size"] not in ratio else f"{ratio[s['batch_size']]:.2f}×{mark(s['batch_size'])}"]
            for s in record.summary if s["method"] != "plain"]


def batch_sentence(summary: list[dict], method: str, costs: list[dict] = ()) -> str:
    """One sentence on what the measurement shows, and the noise note where a batch size's figures do not add
    up (costs: the verify pass's cost over a plain step's, by batch size)."""
    ours = [s for s in summary if s["method"] == method]
    if not ours:
        return ""
    first, last = ours[0], ours[-1]
    turn = crossover(summary, method)
    where = (f"it stops paying at batch {turn}" if turn is not None
             else f"it still pays at batch {last['batch_size']}, the largest measured")
    text = (f"{method}: {first['speedup']:.2f}x plain at batch {first['batch_size']}, {last['speedup']:.2f}x at batch "
            f"{last['batch_size']}; {where}. Each row's output is its batch-1 output.")
    doubts = batch_doubts(summary, method, costs)
    if doubts:
        text += " " + noise_note("; ".join(doubts.values()))
    close = unsettled(summary, method)
    if close:
        text += " " + close
    return text + bound_sentence(costs, doubts)


def unsettled(summary: list[dict], method: str, tolerance: float = TOLERANCE) -> str | None:
    """Why the verdict (the batch size where speculation stops paying, or none) could flip on a second run on the
    same machine, or None: it is the smallest size whose speedup is at most 1x, so a speedup at or below that
    size within the tolerance of 1x can move it. Sizes after it do not decide it."""
    turn = crossover(summary, method)
    single_at_one = any(s["batch_size"] == 1 and s.get("path") == "single" for s in summary)
    close = [s for s in summary if s["method"] == method and (turn is None or s["batch_size"] <= turn)
             and not (single_at_one and s["batch_size"] == 1 and s.get("path") == "batched")  # as crossover reads it
             and too_close_to_call(s["speedup"], tolerance)]
    if not close:
        return None
    figures = ", ".join(f"{s['speedup']:.2f}× at batch {s['batch_size']}" for s in close)
    return (f"{UNSETTLED}: {figures} {'lies' if len(close) == 1 else 'lie'} within {tolerance:.0%} of 1×, the spread "
            "between repeats of the same work on a shared machine, so a second run may find "
            f"{'it' if len(close) == 1 else 'them'} on the other side of 1× and move where speculation stops paying.")


def bound_sentence(costs: Sequence[dict], doubts: dict[int, str] = {}) -> str:
    """What binds a forward at the smallest batch measured, from its verify pass against its plain step, read by
    the rule lesson 3 reads its curve by (specviz.measure.binding), so both say the same of one machine; empty
    where it is not measured or noisy. A cost without its positions (a run saved before they were kept) was
    measured at the default gamma 4."""
    if not costs:
        return ""
    first = min(costs, key=lambda c: c["batch_size"])
    size, ratio = first["batch_size"], first["ratio"]
    if size in doubts:
        return ""
    return f" At batch {size}, {what_binds(ratio, first.get('positions', 5)).sentence()}"


def _sentence(record: BatchSizes) -> str:
    return batch_sentence(record.summary, record.method, record.costs)


LESSON = Lesson(5, "batch", "Where it stops paying: batch size", "Batch size", CLAIM, batch_sizes, lambda r: HEADERS,
                batch_rows, _sentence, BatchSizes)
