"""What the lessons share: running one decode to its end, prompts as text or ids, the prompts they decode, and
how their sentences write a p-value or a size."""
from __future__ import annotations

from collections.abc import Iterable

from ..engine.run import SpeculativeRun
from ..models.loading import LoadedModel
from ..options import EngineOptions
from ..proposers import Proposer
from ..records.schema import RunResult
from ..settings import DecodeSettings

PROMPTS = {  # kinds that speculation meets very differently
    "code": "Write a Python function that returns the squares of the numbers in a list, with a docstring.",
    "summarising": "Summarise in two sentences: The city council met on Tuesday to discuss the new bus routes. "
                   "The council agreed that the routes would start in May, and that the fares would not change.",
    "free writing": "Write a short poem about the sea at night.",
}


def finish(lesson: Iterable):
    """Runs a lesson generator to its end; its last record."""
    last = None
    for last in lesson:
        pass
    return last


def run_once(target: LoadedModel, proposer: Proposer, prompt_ids: list[int], settings: DecodeSettings,
             prompt: str | list[int] = "", detail: bool = True, verifier=None,
             options: EngineOptions | None = None) -> RunResult:
    run = SpeculativeRun(target, proposer, prompt_ids, settings, prompt_text=prompt if isinstance(prompt, str) else "",
                         detail=detail, verifier=verifier, options=options)
    for _ in run:
        pass
    return run.result


def prompt_ids(target: LoadedModel, prompt: str | list[int], chat: bool) -> list[int]:
    """A prompt as text, or already as token ids (the tiny test models have no tokenizer)."""
    return list(prompt) if isinstance(prompt, list) else target.encode_prompt(prompt, chat=chat)


def token_text(target: LoadedModel, token: int) -> str:
    return target.tokenizer.decode([token]) if target.tokenizer is not None else str(token)


def p_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.2g}" if value >= 1e-4 else f"{value:.1e}"


def megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
