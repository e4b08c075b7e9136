"""Every named endpoint of the app served in its public profile, and every field of each, given values a hostile
or careless caller sends (wrong types, NaN, huge numbers, lone surrogates, null bytes, 100k characters, server
paths, URLs, random shapes, `true` for a number), as raw JSON over gradio's HTTP API: each is answered with a
message that names the field (never `error: null`, never a traceback), before any engine work, and the server
still serves a normal request after the whole table. One server for the table."""
import json
import math

import httpx
import pytest

from ui_server import serve_app

pytestmark = pytest.mark.server  # its own server, in a profile of its own
HUGE = 10 ** 30
NUMBER = ["four", True, math.nan, math.inf, HUGE, -HUGE, [], {}]
WHOLE = NUMBER + [2.5]
TEXT = [5, True, [], {}, "hi \ud800", "a\x00b", "x" * 100_001]
MODEL = [5, True, "/etc", "../../etc/passwd", "~/model.gguf", "http://example.com/model.gguf", "random:llama-8b",
         "random:hidden=64,layers=2,heads=4,kv_heads=2,intermediate=128,vocab=512", "some-org/unknown-model",
         "hi \ud800", "a\x00b", "x" * 100_000]
FLAG = ["yes", 1, 0.5, math.nan, []]
CHOICE = ["nope", 5, True, "<b>x</b>", "\ud800", "x" * 100_000]

# field -> (the bad values it is sent, a word its message must contain)
FIELDS = {
    "prompt": (TEXT, "prompt"), "method": (CHOICE, "method"), "target": (MODEL, "target"),
    "draft": (MODEL, "draft"), "gamma": (WHOLE, "gamma"), "temperature": (NUMBER, "temperature"),
    "top_p": (NUMBER, "top-p"), "max_new_tokens": (WHOLE, "max new tokens"), "seed": (WHOLE + [-1], "seed"),
    "compare_plain": (FLAG, "plain"), "step_mode": (FLAG, "step mode"), "tree": (WHOLE, "tree"),
    "draft_stop": (NUMBER, "draft stop"), "exact": (FLAG, "exact mode"), "seconds_per_step": (NUMBER, "replay"),
    "step": (WHOLE + [-1], "step"),
    "runs": (WHOLE, "runs"), "wrong": (FLAG, "wrong"), "rounding": (FLAG, "rounding"), "batch_method": (CHOICE,
                                                                                                        "method"),
    "batch_sizes": (TEXT, "batch sizes"), "batch_tokens": (WHOLE, "new tokens"),
    "methods": (["ngram", [5], ["nope"], [["ngram"]], ["ngram"] * 1000, 7], "method"),
    "lesson": (CHOICE + ["0", "8", " "], "lesson"),
}
SMALL = {"max_new_tokens": 8, "batch_tokens": 4, "runs": 10, "prompt": "Count to five."}  # if one ever ran


@pytest.fixture(scope="module")
def served(default_target):
    from specviz.service.public import profile_from_env
    from specviz.service import serving

    public = profile_from_env({"SPECVIZ_PUBLIC": "1", "SPECVIZ_MEMORY_BUDGET": "6GiB", "SPECVIZ_PER_CLIENT": "0"})
    with serving.served_as(public), serve_app() as url, httpx.Client(base_url=url, timeout=120) as http:
        yield http


def call(http, endpoint: str, data: list) -> tuple[str, object]:
    """(the last event, its data) of one call of `endpoint`, sent as raw JSON (NaN and lone surrogates as
    Python's json writes them): "complete", "error", or "http" with the refused request's body."""
    body = json.dumps({"data": data}, allow_nan=True)
    started = http.post(f"/gradio_api/call/{endpoint}", content=body, headers={"content-type": "application/json"})
    if started.status_code != 200:
        return "http", started.text
    event, last = None, (None, None)
    with http.stream("GET", f"/gradio_api/call/{endpoint}/{started.json()['event_id']}") as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event in ("complete", "error"):
                last = (event, json.loads(line.split(":", 1)[1]))
    return last


def message_in(event: str, data) -> str:
    """The message a caller is shown: an error's text, or the error status a handler's frame carries."""
    if event in ("error", "http"):
        if isinstance(data, dict):  # gradio's error event: {"error": message, ...}; None is the failure to catch
            data = data.get("error")
        return data if isinstance(data, str) else ""
    texts = [v for v in data if isinstance(v, str)] if isinstance(data, list) else []
    return " ".join(t for t in texts if 'role="alert"' in t)


def cases(http):
    info = http.get("/gradio_api/info").json()["named_endpoints"]
    for endpoint, spec in info.items():
        names = [p["parameter_name"] for p in spec["parameters"]]
        valid = {p["parameter_name"]: p.get("parameter_default") for p in spec["parameters"]}
        valid.update({k: v for k, v in SMALL.items() if k in valid})
        for name in names:
            for value in FIELDS[name][0]:
                yield endpoint.lstrip("/"), names, {**valid, name: value}, name


def test_every_field_of_every_endpoint_refuses_bad_values_with_a_message(served, capfd):
    failures, tried = [], 0
    for endpoint, names, values, field in cases(served):
        tried += 1
        event, data = call(served, endpoint, [values[n] for n in names])
        message = message_in(event, data)
        word = FIELDS[field][1]
        if not message or word not in message.lower() or "Traceback" in message:
            failures.append(f"/{endpoint} {field}={str(values[field])[:40]!r}: {event} {str(data)[:200]}")
    assert tried > 300 and not failures, "\n".join(failures[:40]) + f"\n({len(failures)} of {tried})"
    assert "Traceback" not in capfd.readouterr().err
    # the server is alive and still serves a request done right
    event, data = call(served, "speculate", ["Count to five.", "ngram", 8, 4, 0.0, 0, "default", ""])
    assert event == "complete" and data[0]["metrics"]["new_tokens"] == 8, (event, str(data)[:300])


def test_the_local_profile_takes_what_the_public_one_refuses():
    """Control: the same values that name a model are a local user's right (any path, URL-like id or random
    shape), so the refusals above come from the public profile, not from the fields' types."""
    from specviz.service.public import Profile
    from specviz.ui.form import read_form

    for value in ("/etc", "random:llama-8b", "some-org/unknown-model", "~/model.gguf"):
        assert read_form({"target": value}, Profile()).target == value


def test_the_model_lists_offer_only_what_fits(served):
    """The page's lists in the public profile (a 6 GiB budget, float32): the default, the shipped drafter and the
    presets that fit; not the 1.7B, 7B and 8B targets, which a local user's lists keep (control)."""
    from specviz.ui import run_tab

    run = served.get("/gradio_api/info").json()["named_endpoints"]["/run"]["parameters"]
    types = {p["parameter_name"]: p["python_type"]["type"] for p in run}
    assert "'default'" in types["target"] and "'distilled'" in types["draft"] and "Qwen2.5-0.5B" in types["draft"]
    for big in ("SmolLM2-1.7B", "Qwen2.5-7B", "Llama-3.1-8B"):  # 6.8, 30 and 32 GB in float32
        assert big not in types["target"]
    from specviz.service.public import Profile
    from specviz.service import serving

    with serving.served_as(Profile()):
        local = str(run_tab.offered(run_tab.TARGETS))
    assert "SmolLM2-1.7B" in local and "Qwen2.5-7B" in local and "Llama-3.1-8B" in local
