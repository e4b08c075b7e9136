"""End to end on loopback: the app served in this process, driven with gradio_client like a remote user, on
the real default model."""
import functools
import html
import json
import re
import threading
import time

import pytest
from gradio_client import Client

from specviz import DecodeSettings
from specviz.api import encode, generate, make_proposer, run_once
from specviz.measure.cost_curve import measure_cost_curve
from ui_server import wait_done

PROMPT = "List the days of the week, one per line."
STATUS, TOKENS, SUMMARY, STEP_PLOT, RACE_PLOT, THEORY_PLOT, INSPECTOR, SLIDER, TRACE = range(9)


def run_args(**overrides):
    args = dict(prompt=PROMPT, method="ngram", target="default", draft="none", gamma=4, temperature=0, top_p=1,
                max_new_tokens=24, seed=0, compare_plain=True, step_mode=False)
    args.update(overrides)
    return args


def text(value):
    """An HTML output's value; "" where an update left the component as it was."""
    return value if isinstance(value, str) else ""


def plot(value):
    """A plot output's figure JSON; None where an update left it as it was."""
    return json.loads(value["plot"]) if isinstance(value, dict) and "plot" in value else None


def kinds_in(html_text):
    return re.findall(r'class="tok tok-(\w+)', text(html_text))


def steps_in(html_text):
    return [int(s) for s in re.findall(r'data-step="(\d+)"', text(html_text))]


@pytest.fixture(scope="module")
def url(app_url):  # the session's app, its model the session's, shared through the registry
    import specviz.ui.run_view as run_view

    old = run_view.TOKEN_INTERVAL, run_view.CHART_INTERVAL
    # so that tokens arrive in several updates and charts mid-run even when the machine is fast
    run_view.TOKEN_INTERVAL, run_view.CHART_INTERVAL = 0.05, 0.3
    yield app_url
    run_view.TOKEN_INTERVAL, run_view.CHART_INTERVAL = old


@pytest.fixture(scope="module")
def reference(default_target):
    """The same prompt and settings, headless."""
    settings = DecodeSettings(max_new_tokens=24, gamma=4)
    return run_once(default_target, make_proposer("ngram", default_target), encode(default_target, PROMPT), settings)


def test_a_draft_tree_run_in_the_app_matches_the_library(url, default_target):
    client = Client(url, verbose=False)
    final = wait_done(client.submit(**run_args(method="eagle", gamma=5, tree=16), api_name="/run"))[-1]
    assert "Done" in final[STATUS] and "draft tree of up to 16 tokens" in text(final[TOKENS])
    headless = run_once(default_target, make_proposer("eagle", default_target), encode(default_target, PROMPT),
                        DecodeSettings(max_new_tokens=24, gamma=5, tree=16))
    assert any(step.tree_size > 0 for step in headless.steps)
    assert kinds_in(final[TOKENS]) == [t.kind.value for t in headless.tokens]


def test_run_streams_coloured_tokens_and_charts(url, reference):
    client = Client(url, verbose=False)
    outputs = wait_done(client.submit(**run_args(), api_name="/run"))
    final = outputs[-1]
    assert "Done" in final[STATUS]
    token_counts = [len(kinds_in(o[TOKENS])) for o in outputs if text(o[TOKENS])]
    assert len(set(token_counts)) >= 3, token_counts  # tokens arrived in several updates, not at the end only
    charted = [o for o in outputs[:-1] if plot(o[STEP_PLOT]) and plot(o[STEP_PLOT])["data"]]
    assert charted, "no chart arrived while the run streamed"
    shown = kinds_in(final[TOKENS])
    assert shown == [t.kind.value for t in reference.tokens]
    assert "speedup" in final[SUMMARY] and "yes, token for token" in final[SUMMARY]
    race = plot(final[RACE_PLOT])
    assert [trace["name"] for trace in race["data"]] == ["ngram", "plain decoding"]
    assert race["data"][0]["y"][-1] == len(reference.token_ids)
    trace = json.loads(open(final[TRACE]).read())
    assert trace["token_ids"] == reference.token_ids and trace["identical_to_plain"] is True
    assert len(trace["steps"]) == len(reference.steps) and trace["speedup"] > 0


def start_long_run(url):
    """A client and a 400-token run of it that has started streaming tokens."""
    client = Client(url, verbose=False)
    job = client.submit(**run_args(max_new_tokens=400, prompt="Write a long story about a dragon and a knight."),
                        api_name="/run")
    deadline = time.monotonic() + 180
    while not any(kinds_in(o[TOKENS]) for o in job.outputs()):
        assert time.monotonic() < deadline, "no tokens arrived"
        time.sleep(0.05)
    return client, job


def test_stop_mid_way_then_run_again(url):
    client, job = start_long_run(url)
    pressed = time.monotonic()
    stopped = client.predict(api_name="/stop")
    outputs = wait_done(job, timeout=30)
    assert time.monotonic() - pressed < 15  # promptly: within a step or two on a busy 2-core machine
    assert "Stopped after" in stopped[STATUS]
    assert len(steps_in(stopped[TOKENS])) < 400 and "Done" not in outputs[-1][STATUS]
    again = wait_done(client.submit(**run_args(max_new_tokens=12), api_name="/run"))
    assert "Done" in again[-1][STATUS] and kinds_in(again[-1][TOKENS])


def test_pause_then_step_then_stop(url):
    client, job = start_long_run(url)
    client.predict(api_name="/pause")
    paused = wait_done(job, timeout=30)[-1]
    assert "Paused after step" in paused[STATUS]
    steps_before = max(steps_in(paused[TOKENS]))
    stepped = wait_done(client.submit(api_name="/next_step"))[-1]
    assert max(steps_in(stepped[TOKENS])) == steps_before + 1
    stopped = client.predict(api_name="/stop")
    assert "Stopped after" in stopped[STATUS]


def test_speculate_endpoint_returns_the_generate_json(url, default_target, capfd):
    client = Client(url, verbose=False)
    report = client.predict(prompt=PROMPT, method="ngram", max_new_tokens=16, gamma=3, temperature=0.0, seed=0,
                            api_name="/speculate")
    local = generate(PROMPT, "ngram", default_target, None, DecodeSettings(max_new_tokens=16, gamma=3, seed=0),
                     compare_plain=True).to_dict()
    local = json.loads(json.dumps(local))  # what `specviz generate --json --compare-plain` prints
    assert set(report) == set(local)
    for key in ("text", "token_ids", "tokens", "prompt", "prompt_tokens", "stop_reason", "identical_to_plain",
                "first_difference"):
        assert report[key] == local[key], key
    assert set(report["metrics"]) == set(local["metrics"]) and report["plain"]["text"] == local["plain"]["text"]
    assert [s["tokens"] for s in report["steps"]] == [s["tokens"] for s in local["steps"]]
    with pytest.raises(Exception, match="gamma"):
        client.predict(prompt=PROMPT, method="ngram", max_new_tokens=16, gamma=0, api_name="/speculate")
    with pytest.raises(Exception, match="limited to 512"):
        client.predict(prompt=PROMPT, max_new_tokens=600, api_name="/speculate")
    assert "Traceback" not in capfd.readouterr().err  # a caller's mistake is not the server's error


def test_bad_input_gives_a_visible_message_and_the_app_stays_up(url, foreign_models, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # an unreachable Hub, at once
    client = Client(url, verbose=False)
    cases = [
        (run_args(prompt="   "), "prompt is empty"),
        (run_args(method="draft", target=foreign_models["other_vocab"]), "needs a drafter"),
        (run_args(target="nobody-here/no-such-model-xyz"), "cannot be reached"),
        (run_args(target="/no/such/folder"), "neither a model folder"),
        (run_args(target=foreign_models["encoder"]), "not a causal language model"),
        (run_args(method="draft", draft=foreign_models["other_vocab"]), "vocabulary"),
        (run_args(prompt="word " * 9000), "longer than the model's context"),
        (run_args(target="<img src=x onerror=alert(1)>"), "cannot load '<img src=x onerror=alert(1)>'"),
    ]
    for args, fragment in cases:
        status = wait_done(client.submit(**args, api_name="/run"), timeout=120)[-1][STATUS]
        assert 'role="alert"' in status and fragment in html.unescape(status), (args, status)
        assert "<img" not in status
    final = wait_done(client.submit(**run_args(max_new_tokens=8), api_name="/run"))[-1]
    assert "Done" in final[STATUS]


def test_four_clients_at_once_all_complete(url, reference):
    results = {}

    def user(i):
        client = Client(url, verbose=False)
        results[i] = wait_done(client.submit(**run_args(), api_name="/run"), timeout=600)[-1]

    threads = [threading.Thread(target=user, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(700)
    assert sorted(results) == [0, 1, 2, 3]
    expected = [t.kind.value for t in reference.tokens]
    for final in results.values():
        assert "Done" in final[STATUS] and kinds_in(final[TOKENS]) == expected
    interleaved = sum("waits excluded" in final[SUMMARY] for final in results.values())
    assert interleaved >= 2  # they ran at the same time, their steps interleaved on the engine lock


def test_step_mode_next_resume_replay_and_inspect(url, reference):
    client = Client(url, verbose=False)
    ready = wait_done(client.submit(**run_args(step_mode=True), api_name="/run"))[-1]
    assert "Step mode" in ready[STATUS] and not kinds_in(ready[TOKENS])
    for expected_step in (0, 1):
        out = wait_done(client.submit(api_name="/next_step"))[-1]
        assert f"Paused after step {expected_step}" in out[STATUS]
        assert max(steps_in(out[TOKENS])) == expected_step
        assert 'sv-current" data-step="%d"' % expected_step in out[TOKENS]  # the current step highlighted
    done = wait_done(client.submit(api_name="/resume"))[-1]
    assert "Done" in done[STATUS] and kinds_in(done[TOKENS]) == [t.kind.value for t in reference.tokens]
    replay = wait_done(client.submit(0.1, api_name="/replay"))
    last_step = len(reference.steps) - 1
    assert len(replay) >= last_step + 1 and max(steps_in(replay[-1][TOKENS])) == last_step
    assert max(steps_in(replay[1][TOKENS])) < last_step  # early frames show only the first steps
    inspected = client.predict(1, api_name="/inspect")
    assert 'sv-current" data-step="1"' in inspected[0]
    assert "Step 1" in plot(inspected[1])["layout"]["title"]["text"]


def test_compare_methods(url):
    client = Client(url, verbose=False)
    status, table, chart = client.predict(PROMPT, ["ngram"], "default", "none", 4, 0, 1, 16, 0, api_name="/compare")
    assert "Done" in status and "the Run tab" in status and PROMPT[:20] in status  # the prompt it ran, named
    rows = {row[0]: row for row in table["data"]}
    assert set(rows) == {"plain", "ngram"} and rows["ngram"][-1] == "yes"
    c = table["headers"].index("c")
    assert rows["plain"][c] == "–" and float(rows["ngram"][c]) >= 0  # plain drafts nothing, so it has no c
    assert len(plot(chart)["data"]) == 2


def test_cost_curve(url, monkeypatch):
    from specviz.service import calls

    monkeypatch.setattr(calls, "measure_cost_curve",
                        functools.partial(measure_cost_curve, positions=(1, 4), batch_sizes=(1, 2), repeats=1))
    client = Client(url, verbose=False)
    status, chart, sentence = client.predict("default", api_name="/cost_curve")
    assert "Done" in status
    per_forward = [t for t in plot(chart)["data"] if t["name"].startswith("ms per forward")]
    assert [t["x"] for t in per_forward] == [[1, 4], [1, 2]] and all(y > 0 for t in per_forward for y in t["y"])
    assert "One forward of 4 positions took" in sentence and "One forward of a batch of 2 took" in sentence


def test_batch_view_measures_speedup_against_batch_size(url):
    client = Client(url, verbose=False)
    status, chart = client.predict("default", "ngram", "1,2", 8, api_name="/batch")
    assert "ngram: " in status and "x plain at batch 1" in status and "batch-1 output" in status
    figure = plot(chart)
    speedup = next(t for t in figure["data"] if t["name"] == "ngram speedup")
    assert speedup["x"] == [1, 2] and all(y > 0 for y in speedup["y"])
    assert {t["name"] for t in figure["data"]} >= {"plain tok/s", "ngram tok/s"}
    cost = next(t for t in figure["data"] if t["name"] == "verify / plain step")
    assert cost["x"] == [1, 2] and all(y > 0 for y in cost["y"])  # the forward cost that explains the curve
    status, _ = client.predict("default", "ngram", "0,2", 8, api_name="/batch")
    assert "whole numbers" in status


def test_the_batch_view_drafts_with_the_distilled_model_or_the_target_itself(default_target):
    from specviz.engine.batch_draft import ModelDrafting
    from specviz.models.loading import DEFAULT_MODEL
    from specviz.service.calls import SELF_DRAFT, drafting_for
    from specviz.ui.form import batch_methods

    assert {"draft", SELF_DRAFT} <= set(batch_methods())
    distilled = drafting_for("draft", DEFAULT_MODEL, default_target)
    itself = drafting_for(SELF_DRAFT, DEFAULT_MODEL, default_target)
    assert isinstance(distilled, ModelDrafting) and isinstance(itself, ModelDrafting)
    assert itself.model is default_target.model
    # control: the distilled drafter is another, smaller model with a draft vocabulary of its own
    assert distilled.model is not default_target.model and getattr(distilled.model, "draft_vocab", None) is not None
    assert callable(drafting_for("ngram", DEFAULT_MODEL, default_target))  # a lookup: a proposer a row


def test_the_step_slider_handles_its_events_in_order():
    from specviz.ui.app import build_demo

    config = build_demo().get_config_file()
    inspect = next(d for d in config["dependencies"] if d.get("api_name") == "inspect")
    assert inspect["trigger_mode"] == "always_last"  # one at a time, the newest last: never an older step on top


def test_switching_from_a_self_drafter_to_adaptive_drops_it():
    from specviz.ui.app import SpecvizApp

    built = SpecvizApp()
    built.build()
    app = built.run  # the Run tab
    assert app.on_method("adaptive", "default", "default") == {app.draft: "none"}
    kept = app.on_method("adaptive", "HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert not isinstance(kept[app.draft], str)  # a real drafter stays (gr.skip)
    assert not isinstance(app.on_method("draft", "default", "default")[app.draft], str)


def test_compare_and_cost_curve_have_a_stop():
    from specviz.ui.app import build_demo

    config = build_demo().get_config_file()
    by_name = {d.get("api_name"): d for d in config["dependencies"]}
    for run, stop in (("compare", "compare_stop"), ("cost_curve", "cost_stop")):
        button = by_name[stop]["targets"]
        cancelled = {i for d in config["dependencies"] if d["targets"] == button for i in d.get("cancels") or ()}
        assert by_name[run]["id"] in cancelled


def test_a_failed_run_clears_the_previous_run(url):
    client = Client(url, verbose=False)
    assert kinds_in(wait_done(client.submit(**run_args(max_new_tokens=8), api_name="/run"))[-1][TOKENS])
    failed = wait_done(client.submit(**run_args(prompt="   "), api_name="/run"))[-1]
    assert 'role="alert"' in failed[STATUS]
    assert isinstance(failed[TOKENS], str) and not kinds_in(failed[TOKENS]) and failed[SUMMARY] == ""
    assert failed[TRACE] is None and failed[STEP_PLOT] is None and failed[RACE_PLOT] is None


def test_plain_is_not_compared_with_itself(url):
    client = Client(url, verbose=False)
    final = wait_done(client.submit(**run_args(method="plain", max_new_tokens=8), api_name="/run"))[-1]
    assert "Done" in final[STATUS] and "speedup" not in final[SUMMARY] and final[SUMMARY].count("plain tokens/s") == 1
    assert [trace["name"] for trace in plot(final[RACE_PLOT])["data"]] == ["plain"]


def test_compare_keeps_a_skipped_method_in_sight(url, foreign_models):
    client = Client(url, verbose=False)  # a drafter of another vocabulary: draft is skipped, the rest runs
    status, table, _ = client.predict(PROMPT, ["draft", "ngram"], "default", foreign_models["other_vocab"], 4, 0, 1, 8,
                                      0,
                                      api_name="/compare")
    assert "Done" in status and "Skipped draft" in status and "vocabulary" in status
    assert {row[0] for row in table["data"]} == {"plain", "ngram"}


def test_compare_on_a_target_of_eight_words_skips_draft_and_runs_the_rest(url, foreign_models):
    client = Client(url, verbose=False)  # its warm-up once fed token ids past its vocabulary
    status, table, _ = client.predict(PROMPT, ["draft", "ngram"], foreign_models["other_vocab"], "none", 4, 0, 1, 8, 0,
                                      api_name="/compare")
    assert "Done" in status and "Skipped draft: it needs a drafter" in status
    assert {row[0] for row in table["data"]} == {"plain", "ngram"}


def test_compare_tab_shows_every_drafter_measured_on_spec_bench(url):
    import httpx

    page = json.dumps(httpx.get(f"{url}/config", timeout=30).json())
    assert "Every drafter measured on Spec-Bench" in page
    assert "retrieval:16:31" in page and "draft:4@0.5" in page  # the H200 run's rows and the CPU run's


def test_compare_drafts_with_the_distilled_model_on_the_default_target(url):
    client = Client(url, verbose=False)
    status, table, _ = client.predict(PROMPT, ["draft"], "default", "none", 4, 0, 1, 8, 0, api_name="/compare")
    assert "Done" in status and "Skipped" not in status
    rows = {row[0]: row for row in table["data"]}
    assert set(rows) == {"plain", "draft"}
    assert 0 < float(rows["draft"][table["headers"].index("c")]) < 1  # a model's forward: its cost shows


def test_replay_ends_with_its_last_frame(url):
    """No wait after the last step: a Replay pressed as soon as the last frame shows is not ignored."""
    client = Client(url, verbose=False)
    steps = len(steps_in(wait_done(client.submit(**run_args(max_new_tokens=8), api_name="/run"))[-1][TOKENS]))
    job = client.submit(1.5, api_name="/replay")
    last_seen, frames = None, 0
    while not job.done():
        if len(job.outputs()) != frames:
            frames, last_seen = len(job.outputs()), time.monotonic()
        time.sleep(0.02)
    assert steps and time.monotonic() - last_seen < 1.0


def test_a_run_sends_its_first_update_once_it_has_started(default_target, monkeypatch):
    """The page clears itself before it asks for the run, so the run sends nothing while its models load at once:
    a browser on the same machine spends 30 to 60 ms on any update, which would land on the run's first steps."""
    import types

    import specviz.ui.run_tab as run_tab
    from specviz.ui.app import SpecvizApp
    from specviz.ui.sessions import session

    built = SpecvizApp()
    built.build()
    app = built.run  # the Run tab

    def first_update(key):
        request = types.SimpleNamespace(session_hash=key)
        frames = app.on_run(PROMPT, "ngram", "default", "none", 4, 0, 1, 8, 0, False, True, request=request)
        first = next(frames)
        started = session(key).run is not None
        list(frames)
        return first, started

    first, started = first_update("first-update-fast")
    assert started and "Step mode" in first[app.status]  # the run's own first frame, nothing before it
    load = run_tab.load_models
    monkeypatch.setattr(run_tab, "load_models", lambda request: (time.sleep(0.8), load(request))[1])
    first, started = first_update("first-update-slow")  # control: a load that takes a while is reported
    assert not started and "Loading" in first[app.status] and set(first) == {app.status}


def test_the_port_and_the_address_are_options(monkeypatch):
    import app

    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    default = app.options([])
    assert (default.port, default.host) == (7860, "127.0.0.1")
    chosen = app.options(["--port", "8081", "--host", "0.0.0.0"])
    assert (chosen.port, chosen.host) == (8081, "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "9000")  # what a Space or a container sets
    assert app.options([]).port == 9000


def test_speculate_and_compare_report_the_oracle_and_the_accepted_lengths(url):
    client = Client(url, verbose=False)
    report = client.predict(prompt=PROMPT, method="ngram", max_new_tokens=16, gamma=3, temperature=0.0, seed=0,
                            api_name="/speculate")
    oracle = report["oracle"]
    drafting = [s for s in report["steps"] if s["gamma"] > 0]
    assert len(oracle["accepted_lengths"]) == 4 and sum(oracle["accepted_lengths"]) == len(drafting)
    assert oracle["accepted_lengths"] == [sum(s["n_accepted"] == k for s in drafting) for k in range(4)]
    assert oracle["oracle_tau"] >= oracle["tau"] == report["metrics"]["mean_accepted_length"]
    assert oracle["speedup"] == pytest.approx(report["speedup"]) and oracle["oracle_speedup"] > 0
    assert 0 < oracle["verify_share"] < 1
    status, table, _ = client.predict(PROMPT, ["ngram"], "default", "none", 4, 0, 1, 16, 0, api_name="/compare")
    rows = {row[0]: dict(zip(table["headers"], row)) for row in table["data"]}
    assert float(rows["plain"]["oracle τ"]) == 1 and rows["plain"]["steps accepting 0…γ"] == "–"  # the control
    assert float(rows["ngram"]["oracle τ"]) >= float(rows["ngram"]["τ"]) and rows["ngram"]["oracle speedup"].split(
        " ("
    )[0].endswith("×")  # "(noisy)" on a busy machine
    assert rows["ngram"]["verifying"].endswith("%")
