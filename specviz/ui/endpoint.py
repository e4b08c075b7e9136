"""The app's boundary: how every engine endpoint is entered and left.

- form_handler: a handler's parameters are its form fields; the raw values (events run with preprocess=False, so
  gradio converts nothing) are read into one Form by form.read_form, the one validation every endpoint uses.
- Each handler gets its session and a stop signal (cancel.Cancel: Stop, a cancel from the caller, a lost
  connection, the public profile's time limit) and checks it between engine steps (pull).
- Any error ends as a message for the person who asked: a caller's mistake as its own message, anything else
  as a fixed sentence (the traceback goes to the server's log only); never gradio's `error: null`.
- A handler that starts nothing (Replay, Next step, Resume, the step slider) makes no session: without one it
  acts on an empty session that is not kept, so that a flood of such calls pushes no one's session out.
- The engine time a handler takes (each hold of the engine lock, in any thread it starts) is charged to its
  client address (admission.LEDGER), the public profile's budget of engine seconds.

And the `/speculate` endpoint: one prompt through a method and plain decoding, as the JSON of
`specviz generate --json --compare-plain`."""
from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterator, Sequence

import gradio as gr

from .. import api
from ..errors import SpecvizError, message_of
from ..api import DEFAULT_MODEL
from ..service import events
from ..service.calls import speculate_records
from ..service import serving
from .admission import LEDGER, address_of
from .cancel import Cancel
from .form import Form, read_form
from ..service.gpu import gpu
from ..service.engine_lock import metering
from ..service.run_request import RunRequest, drafter_for
from .sessions import existing_session_of, session_of

log = logging.getLogger(__name__)


def _signature(fields: Sequence[str], defaults: dict) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(name, kind, **({"default": defaults[name]} if name in defaults else {}))
              for name in fields]
    return inspect.Signature([*params, inspect.Parameter("request", kind, default=None)])


def charge_of(request):
    """Where a request's engine time is charged: its client address's share of LEDGER."""
    return LEDGER.charger(address_of(request, serving.profile()))


def form_handler(fields: Sequence[str], handle: Callable, show_error: Callable[[str], object],
                 defaults: dict | None = None, creates: bool = True):
    """A gradio handler whose parameters are `fields` (in the order of the event's inputs, named as the API
    names them): it reads them into a Form and calls handle(form, session, cancel), a generator of frames (an
    async one for a handler that mostly waits: it then holds no worker thread), or a function for a handler
    that returns one frame. Errors become show_error(message). creates=False: a handler that starts nothing,
    and makes no session (existing_session_of)."""
    signature = _signature(fields, defaults or {})
    find = session_of if creates else existing_session_of

    def begin(args, kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        request = values.pop("request")
        state = find(request)
        return values, state, state.watch(), charge_of(request)

    def fail(error: Exception):
        if not isinstance(error, SpecvizError):
            log.error("%s failed", handle.__name__, exc_info=error)
        return show_error(message_of(error))

    if inspect.isasyncgenfunction(handle):
        async def handler(*args, **kwargs):
            values, state, cancel, _ = begin(args, kwargs)
            try:
                form = read_form(values, serving.profile())
                async for frame in handle(form, state, cancel):
                    yield frame
            except (GeneratorExit, asyncio.CancelledError):
                raise
            except Exception as error:
                yield fail(error)
            finally:
                cancel.set()
    elif inspect.isgeneratorfunction(handle):
        def handler(*args, **kwargs):
            values, state, cancel, charge = begin(args, kwargs)
            frames = None
            try:
                form = read_form(values, serving.profile())
                frames = handle(form, state, cancel)
                while True:  # each resumption may run in another of gradio's threads: each is metered
                    with metering(charge):
                        frame = next(frames, _DONE)
                    if frame is _DONE:
                        return
                    yield frame
            except GeneratorExit:
                raise
            except Exception as error:  # a request's mistake or the server's fault: a message, the app stays up
                yield fail(error)
            finally:
                if frames is not None:
                    with metering(charge):
                        frames.close()
                cancel.set()  # closed (a cancel, a lost caller) or done: whatever it started stops
    else:
        def handler(*args, **kwargs):
            values, state, cancel, charge = begin(args, kwargs)
            try:
                with metering(charge):
                    return handle(read_form(values, serving.profile()), state, cancel)
            except Exception as error:
                return fail(error)

    handler.__signature__ = signature
    handler.__annotations__ = {"request": gr.Request}
    handler.__name__ = handler.__qualname__ = handle.__name__
    return handler


_DONE = object()


def pull(records: Iterator, cancel: Cancel) -> Iterator:
    """The records of a computation (a GPU call), until it ends or `cancel` is set; then it is closed, which
    stops it at its next record (in a forked GPU call too)."""
    try:
        for record in records:
            yield record
            if cancel.is_set():
                return
    finally:
        records.close()


def stopped_message(cancel: Cancel) -> str:
    return cancel.reason or "Stopped."


# -- /speculate ---------------------------------------------------------------------------------------------------

def api_help(url: str) -> str:
    """The API tab's text, with the address the page was served from."""
    return f"""### Use via API
The endpoint `/speculate` runs one prompt with speculative decoding and plain decoding of the same prompt, and
returns the same JSON object as `specviz generate --json --compare-plain`: `text`, `tokens`, `metrics`,
`steps`, `plain`, `speedup`, `identical_to_plain`, `first_difference` (and, where a greedy run differs,
`first_difference_margin`: how far apart plain's two largest logits were there; a near-tie is rounding),
`settings.exact_forward` (the runs were in the exact mode: bit for bit), and `oracle`: the perfect drafter
beside this one (`oracle_tau`, `oracle_speedup`: every draft accepted, at this run's measured step costs),
`verify_share` (verifying's share of the time) and `accepted_lengths` (steps that accepted 0, 1, … γ drafts).

```python
from gradio_client import Client
client = Client("{url}")
report = client.predict(prompt="Write a haiku about caches.", method="ngram", max_new_tokens=64, gamma=4,
                        temperature=0.0, seed=0, api_name="/speculate")
print(report["metrics"]["mean_accepted_length"], report["speedup"])
```
Optional: `target` (default `default`) and `draft` (a drafter for the `draft` method).

`/distribution` runs the Learn tab's second lesson: `prompt`, `method`, `runs`, `temperature`, `seed`, `wrong`
give both next-token histograms (and the wrong verifier's), the p-values and whether the wrong verifier was caught.

`/lesson` runs any lesson of the Learn tab with the settings it declares: `lesson` (its number as text, "1" to
"7", or its key) gives its table (`headers`, `rows`), its `sentence` and its whole `record`.

`/bugs` runs lesson 7: `prompt`, `method` (eagle, medusa or early-exit), `runs`, `temperature`, `rounding` give every
deliberately wrong verifier and drafter beside the correct one: each one's fit to the target's exact distribution
(`arms`, `rows`), the seeds it took to catch, and bfloat16 greedy output beside float32's (`rounding`).

A request with a bad value gets an error that says which value and what it takes; a cancelled job (or a client
that goes away) stops its run within a step or two."""


def page_url(request) -> str:
    """The address a browser reached the app at (behind a proxy, the forwarded one)."""
    headers = getattr(request, "headers", None) or {}
    host = headers.get("x-forwarded-host") or headers.get("host") or "127.0.0.1:7860"
    scheme = headers.get("x-forwarded-proto") or "http"
    return f"{scheme.split(',')[0].strip()}://{host.split(',')[0].strip()}/"


def speculate(prompt: str, method: str = "ngram", max_new_tokens: int = 64, gamma: int = 4, temperature: float = 0.0,
              seed: int | None = None, target: str = DEFAULT_MODEL, draft: str = "",
              request: gr.Request = None) -> dict:
    """Speculative decoding of one prompt beside plain decoding of it, on this server's model: the JSON of `specviz
    generate --json --compare-plain` (text, tokens with their kind, metrics such as tau and tokens_per_second,
    steps, plain, speedup, identical_to_plain, oracle).

    Args:
        prompt: the text to continue, sent as a user turn through the target's chat template.
        method: the drafter: plain, draft, ngram, retrieval, early-exit, medusa, eagle or adaptive.
        max_new_tokens: tokens to generate at most, 1 to 512.
        gamma: draft tokens a step, 1 to 32.
        temperature: 0 for greedy decoding (the output equals plain decoding's token for token); above 0 samples,
            with the target's exact distribution.
        seed: seed of the sampling, for a run that can be repeated; empty for none.
        target: the target model: "default" (SmolLM2-135M-Instruct) or another this server offers.
        draft: the draft model of the draft and adaptive methods: "distilled", "default" or another this server
            offers; empty: on the default target, the one distilled from it.
    """
    state = session_of(request)
    cancel = state.watch()
    try:
        form: Form = read_form(dict(prompt=prompt, method=method, max_new_tokens=max_new_tokens, gamma=gamma,
                                    temperature=temperature, seed=seed, target=target, draft=draft), serving.profile())
        draft_name = drafter_for(form.method, form.target, form.draft)
        api.check_drafter(form.method, draft_name)
        run_request = RunRequest(form.prompt, form.method, form.target, draft_name, form.settings)
        report = None
        with metering(charge_of(request)):
            for event in pull(gpu(speculate_records)(run_request), cancel):  # to its end: the call finishes
                if isinstance(event, events.Failed):
                    raise SpecvizError(event.message)
                if isinstance(event, events.Report):
                    report = event.report
        if report is None:
            raise SpecvizError(stopped_message(cancel))
        return report
    except Exception as error:  # the caller's mistake: one line in the server's log, no traceback
        if isinstance(error, SpecvizError):
            log.info("/speculate refused: %s", error)
        else:
            log.exception("/speculate failed")
        raise gr.Error(message_of(error), print_exception=False) from None
    finally:
        cancel.set()
