"""Lesson 1, the mechanic: one short greedy run, a record per step: what the drafter guessed, what the target
kept, what one forward of the target bought."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..api import make_proposer
from ..engine.run import SpeculativeRun
from ..models.loading import LoadedModel
from ..proposers import Proposer
from ..records.schema import RunResult, StepRecord, TokenRecord
from ..settings import DecodeSettings
from .common import prompt_ids
from .lesson import Lesson

CLAIM = ("A drafter guesses a few tokens; one forward of the target checks them all, keeps the ones it agrees with "
         "and writes one more itself. So one forward can write several tokens.")
HEADERS = ["step", "drafted", "kept", "target's own token", "tokens written", "verify ms"]


@dataclass
class MechanicStep:
    index: int
    drafted: list[str]  # the drafter's guesses, in order
    accepted: int  # how many of them the target kept
    own_token: str  # the token the target wrote itself (resampled after a rejection, or the bonus)
    bought: int  # tokens this one target forward added to the output
    verify_ms: float


@dataclass
class Mechanic:
    method: str
    prompt: str
    result: RunResult | None
    steps: list[MechanicStep]
    tokens: list[TokenRecord] = field(default_factory=list)  # shown so far, rejected drafts included

    @property
    def forwards(self) -> int:
        return len(self.steps)

    @property
    def new_tokens(self) -> int:
        return sum(s.bought for s in self.steps)

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / self.forwards if self.forwards else 0.0


def mechanic_step(step: StepRecord) -> MechanicStep:
    return MechanicStep(step.index, [p.text for p in step.positions], step.n_accepted, step.next_token.text,
                        step.emitted, step.verify_ms)


def mechanic(target: LoadedModel, prompt: str | list[int], method: str = "eagle", gamma: int = 4,
             max_new_tokens: int = 24,
             chat: bool = True, proposer: Proposer | None = None) -> Iterator[Mechanic]:
    """One short greedy run, a record per step: what was drafted, what the target kept, what one forward bought."""
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=gamma, temperature=0.0).validate()
    proposer = proposer or make_proposer(method, target)
    run = SpeculativeRun(target, proposer, prompt_ids(target, prompt, chat), settings,
                         prompt_text=prompt if isinstance(prompt, str) else "")
    steps, tokens = [], []
    text = prompt if isinstance(prompt, str) else ""
    for step in run:
        steps.append(mechanic_step(step))
        tokens += step.tokens
        yield Mechanic(proposer.name, text, None, list(steps), list(tokens))
    yield Mechanic(proposer.name, text, run.result, steps, run.result.tokens)


def mechanic_rows(record: Mechanic) -> list[list]:
    return [[s.index, " | ".join(repr(t) for t in s.drafted) or "–", f"{s.accepted} of {len(s.drafted)}",
             repr(s.own_token), s.bought, round(s.verify_ms, 1)] for s in record.steps]


def mechanic_sentence(record: Mechanic) -> str:
    if not record.steps:
        return ""
    return (f"{record.forwards} forwards of the target wrote {record.new_tokens} tokens: "
            f"**{record.tokens_per_forward:.2f} tokens per forward** with {record.method}, where plain decoding "
            f"writes exactly 1.")


# a prompt the 135M default model answers with sense (on caches it wrote of hidden valuables)
SETTINGS = dict(prompt="Give two tips for sleeping well.", method="eagle", gamma=4, temperature=0.0, max_new=24,
                seed=0)


def _run(target: LoadedModel) -> Iterator[Mechanic]:
    return mechanic(target, SETTINGS["prompt"], SETTINGS["method"], SETTINGS["gamma"], SETTINGS["max_new"])


LESSON = Lesson(1, "mechanic", "The mechanic", "Mechanic", CLAIM, _run, lambda r: HEADERS, mechanic_rows,
                mechanic_sentence, Mechanic, settings=SETTINGS)
