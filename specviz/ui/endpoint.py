"""The `/speculate` API endpoint: one prompt through a method and plain decoding, as the JSON of
`specviz generate --json --compare-plain`."""
from __future__ import annotations

import logging

import gradio as gr

from ..api import Report, generate
from ..errors import SpecvizError
from ..models import DEFAULT_MODEL
from ..proposers import METHODS
from ..settings import check_prompt_text
from .live import ENGINE_LOCK, MAX_NEW_TOKENS, RunRequest, drafter_for, load_models, model_name, settings_from_form

log = logging.getLogger(__name__)


def api_help(url: str) -> str:
    """The API tab's text, with the address the page was served from."""
    return f"""### Use via API
The endpoint `/speculate` runs one prompt with speculative decoding and plain decoding of the same prompt, and
returns the same JSON object as `specviz generate --json --compare-plain`: `text`, `tokens`, `metrics`,
`steps`, `plain`, `speedup`, `identical_to_plain`, `first_difference`, and `oracle`: the perfect drafter
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

`/bugs` runs lesson 7: `prompt`, `method` (eagle, medusa or early-exit), `runs`, `temperature`, `rounding` give every
deliberately wrong verifier and drafter beside the correct one: each one's fit to the target's exact distribution
(`arms`, `rows`), the seeds it took to catch, and bfloat16 greedy output beside float32's (`rounding`)."""


def page_url(request) -> str:
    """The address a browser reached the app at (behind a proxy, the forwarded one)."""
    headers = getattr(request, "headers", None) or {}
    host = headers.get("x-forwarded-host") or headers.get("host") or "127.0.0.1:7860"
    scheme = headers.get("x-forwarded-proto") or "http"
    return f"{scheme.split(',')[0].strip()}://{host.split(',')[0].strip()}/"


def speculate(prompt: str, method: str = "ngram", max_new_tokens: int = 64, gamma: int = 4, temperature: float = 0.0,
              seed: int | None = None, target: str = DEFAULT_MODEL, draft: str = "") -> dict:
    """Speculative decoding of one prompt beside plain decoding of it: the JSON of `specviz generate --json
    --compare-plain` (text, tokens, metrics, steps, plain, speedup, identical_to_plain, oracle)."""
    try:
        settings = settings_from_form(max_new_tokens, gamma, temperature, 1.0, seed)
        if settings.max_new_tokens > MAX_NEW_TOKENS:
            raise SpecvizError(f"max_new_tokens is limited to {MAX_NEW_TOKENS} here, got {settings.max_new_tokens}")
        if method not in METHODS:
            raise SpecvizError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        check_prompt_text(prompt)
        target_name = model_name(target) or DEFAULT_MODEL
        target_model, draft_model = load_models(RunRequest(prompt, method, target_name,
                                                           drafter_for(method, target_name, draft), settings))
        with ENGINE_LOCK:  # the whole comparison at once: its timings see no other user's steps
            report: Report = generate(prompt, method, target_model, draft_model, settings, compare_plain=True)
        return report.to_dict()
    except SpecvizError as error:  # the caller's mistake: one line in the server's log, no traceback
        log.info("/speculate refused: %s", error)
        raise gr.Error(str(error), print_exception=False) from None
