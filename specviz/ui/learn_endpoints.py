"""The lessons a program can call (/lesson: any lesson as declared; /distribution and /bugs: lessons 2 and 7 with
their settings open): one call runs a lesson to its end and answers its record, each field read at the boundary
as the page's are."""
from __future__ import annotations

import functools

import gradio as gr

from .. import lessons
from .. import methods as registry
from ..errors import SpecvizError, message_of
from ..lessons.catalogue import SETTINGS, lesson_named
from ..lessons.catalogue import plain as plain_record
from ..api import DEFAULT_MODEL
from ..service import serving
from .endpoint import charge_of
from .form import read_form
from .learn_runs import last_record
from ..service.engine_lock import metering
from .sessions import session_of


def lesson_api(lesson: str = "1", target: str = DEFAULT_MODEL, request: gr.Request = None) -> dict:
    """Any lesson of the Learn tab as one call, with the settings it declares: its table (headers and rows), its
    sentence and its whole record, as the tab and `python -m specviz learn` show them.

    Args:
        lesson: the lesson's number or key, as text: "1" (mechanic) to "7" (bugs), or one registered later.
        target: the target model: "default" (SmolLM2-135M-Instruct) or another this server offers.
    """
    cancel = session_of(request).watch()
    try:
        chosen = lesson_named(lesson)
        form = read_form(dict(target=target), serving.profile())
        with metering(charge_of(request)):
            record = last_record(form.target, chosen.run, cancel, (chosen.settings or {}).get("prompt"))
        return {"number": chosen.number, "key": chosen.key, "title": chosen.title, "claim": chosen.claim,
                "headers": chosen.headers(record), "rows": plain_record(chosen.rows(record)),
                "sentence": chosen.sentence(record), "record": plain_record(record)}
    except Exception as error:
        raise gr.Error(message_of(error), print_exception=False) from None
    finally:
        cancel.set()


def distribution_api(prompt: str = SETTINGS["exact"]["prompt"], method: str = "medusa", runs: int = 150,
                     temperature: float = 0.7, seed: int = 0, wrong: bool = True, target: str = DEFAULT_MODEL,
                     request: gr.Request = None) -> dict:
    """Lesson 2 as one call: does speculative sampling keep the target's distribution? The next-token histograms
    with and without speculation (and with a deliberately wrong verifier), the two-sample and exact p-values, and
    whether the wrong verifier was caught.

    Args:
        prompt: the text whose next tokens are sampled.
        method: the drafter whose sampled output is tested (e.g. medusa, eagle, early-exit, draft, ngram).
        runs: seeds sampled a way, 10 to 1000 (300 on a public server); more runs, a sharper test and a longer call.
        temperature: the sampling temperature, above 0.
        seed: the first seed; run i uses seed + i.
        wrong: also run a deliberately wrong verifier on the same seeds, which the test must catch.
        target: the target model: "default" (SmolLM2-135M-Instruct) or another this server offers.
    """
    cancel = session_of(request).watch()
    try:
        form = read_form(dict(prompt=prompt, method=method, runs=runs, temperature=temperature, seed=seed,
                              wrong=wrong, target=target), serving.profile())
        start = functools.partial(lessons.distribution, prompt=form.prompt, method=form.method, runs=form.runs,
                                  temperature=form.settings.temperature, first_seed=form.settings.seed or 0,
                                  wrong=form.wrong)
        with metering(charge_of(request)):
            record = last_record(form.target, start, cancel, form.prompt)
        return record.to_dict()
    except Exception as error:
        raise gr.Error(message_of(error), print_exception=False) from None
    finally:
        cancel.set()


# drafters that draw their first draft from a q (lesson 7 needs one), without a draft model (its form has none)
BUGS_METHODS = tuple(m.name for m in registry.methods() if m.draws_from_q and not m.uses_draft_model)
BUGS_PROMPT_CHARS = 2000  # lesson 7 tests the first new token: a long prompt only costs the forward


def bugs_api(prompt: str = lessons.bugs.PROMPT, method: str = lessons.bugs.METHOD, runs: int = lessons.bugs.RUNS,
             temperature: float = lessons.bugs.TEMPERATURE, rounding: bool = True, target: str = DEFAULT_MODEL,
             request: gr.Request = None) -> dict:
    """Lesson 7 as one call: every deliberately wrong verifier and drafter beside the correct one on the same seeds,
    each one's fit to the target's exact distribution of the first new token and the seeds it took to catch; with
    rounding, bfloat16 greedy output beside float32's."""
    cancel = session_of(request).watch()
    try:
        form = read_form(dict(prompt=prompt, method=method, runs=runs, temperature=temperature, rounding=rounding,
                              target=target), serving.profile())
        if len(form.prompt) > BUGS_PROMPT_CHARS:
            raise SpecvizError(f"the prompt is limited to {BUGS_PROMPT_CHARS} characters here, got {len(form.prompt)}")
        if form.method not in BUGS_METHODS:
            raise SpecvizError(f"method must be one of {', '.join(BUGS_METHODS)} (a drafter that samples from a q), "
                               f"got {form.method!r}")
        if not 0.1 <= form.settings.temperature <= 2.0:
            raise SpecvizError(f"temperature must be between 0.1 and 2, got {form.settings.temperature!r}")
        start = functools.partial(lessons.bugs.bugs, prompt=form.prompt, method=form.method, runs=form.runs,
                                  temperature=form.settings.temperature, most=min(3000, 20 * form.runs),
                                  rounding_tokens=16 if form.rounding else 0)
        with metering(charge_of(request)):
            record = last_record(form.target, start, cancel, form.prompt)
        return plain_record(record) | {"rows": lessons.bugs.bug_rows(record),
                                       "sentence": lessons.bugs.bug_sentence(record)}
    except Exception as error:
        raise gr.Error(message_of(error), print_exception=False) from None
    finally:
        cancel.set()
