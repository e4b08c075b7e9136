"""Check a served specviz app the way a class and a hostile visitor would, and print what was tried and what came back.

    python -m scripts.public_check URL [--pid PID] [--clients 8] [--flooders 4] [--joins 10] [--long 512]
    python -m scripts.public_check --serve      # the app served in its public profile in this process
    python -m scripts.public_check --serve --only forged,eviction,replay,maximal,edges   # the hostile visitor

In order: concurrent clients (/speculate, all at once: each must be answered with the solo run's text); a flood of
quick joins from several sessions beside one normal client (the normal run must be answered; the flood is refused
at the door once it has its share); a long run cancelled (gradio_client's job.cancel()) and a client process killed
mid-run (SIGKILL), each followed by a short run whose answer time, against the same short run on an idle server,
tells how long the engine stayed busy; a table of bad values for every field of /speculate, /distribution,
/cost_curve and /batch (wrong types, NaN, huge numbers, surrogates, null bytes, 100k characters); big and random
models and server paths (each must be refused with a message that does not echo what exists); a poisoned saved
lesson file (an image, a link and HTML in its strings: the upload goes to the server, and the page's renderer of
this checkout must show them as text: the saved-run handler is not an API endpoint); and the server alive at the
end. --pid (a server on this machine) adds its resident memory before and after, from /proc.

Then a hostile visitor (each a hole that once took the server from a class): `forged`, joins each with a new forged
first X-Forwarded-For entry before the address the proxy appends (admitted must stay within the per-address
share; the server must trust the header, as on a Space: start it with SPACE_ID set, or --serve), and a normal
client's 8-token run beside them; `eviction`, free calls (/pause, /stop, /replay, /inspect, each a new session)
beside a Run-tab run (it must finish and be inspected); `replay`, a flood of replays of one finished run beside
a normal /speculate (its time against the idle one); `maximal`, the longest request the profile takes (a prompt
of ~1,000 tokens, 512 new tokens, the highest temperature) beside an 8-token run (its time against the idle
one); `edges`, gradio's direct route, an endpoint number that does not exist, too few values, a temperature of
1e-300, a drafter as the target, a deeply nested saved file. Each is bounded in requests and time; loopback or
a server of your own only.

Exit status 0 when every request was answered with a result or a clear message and the server is alive."""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHORT = dict(prompt="Say hello.", method="ngram", max_new_tokens=8, gamma=4, temperature=0.0, seed=0, target="default",
             draft="")
LONG_PROMPT = "Write a long story about a lighthouse keeper and her cat."
HUGE = 10 ** 30
# field -> bad values; each endpoint's other fields keep valid small values
BAD = {
    "prompt": [5, None, [], "hi \ud800", "a\x00b", "x" * 100_001],
    "method": ["nope", 5, "<b>x</b>"],
    "max_new_tokens": ["four", True, math.nan, HUGE, -1, 2.5],
    "gamma": ["four", math.inf, HUGE, 0],
    "temperature": [math.nan, -1, "hot", HUGE],
    "seed": [HUGE, "x", 2.5],
    "runs": [HUGE, -5, "many"],
    "wrong": ["yes", [], 0.5],
    "batch_sizes": ["1,2," + "9" * 40, "a,b", 5],
    "batch_tokens": [HUGE, -1, "x"],
}
MODELS = {  # value -> why it must be refused on a public server
    "random:llama-8b": "a random 8B shape (built in the server's memory)",
    "random:hidden=64,layers=2,heads=4,kv_heads=2,intermediate=128,vocab=512": "a small random shape",
    "meta-llama/Llama-3.1-8B-Instruct": "8B (gated; over a CPU Space's budget)",
    "Qwen/Qwen2.5-7B-Instruct": "7B (over a CPU Space's budget)",
    "some-org/unknown-model": "an id outside the allowlist",
    "/etc": "a server directory",
    "/etc/passwd": "a server file",
    "../../../../tmp/model.gguf": "a relative path",
    "http://example.com/model.gguf": "a URL",
}
REVEALING = ("Unrecognized model in", "No such file", "does not appear to have", "FileNotFoundError", "Traceback")


class Log:
    """What was tried and what came back, printed as it goes; failures counted for the exit status."""

    def __init__(self):
        self.failures: list[str] = []
        self.tried = 0

    def line(self, tried: str, got: str, ok: bool = True) -> None:
        self.tried += 1
        print(f"  [{'ok' if ok else 'FAIL'}] {tried} -> {got}", flush=True)
        if not ok:
            self.failures.append(f"{tried} -> {got}")

    @staticmethod
    def section(title: str) -> None:
        print(f"\n== {title}", flush=True)


def rss_mib(pid: int | None) -> float | None:
    """Resident memory of the process `pid` and its children, from /proc (None without a pid)."""
    if pid is None:
        return None
    total = 0
    pids = [pid] + [int(p) for p in _children(pid)]
    for each in pids:
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


def client(url: str, address: str | None = None):
    from gradio_client import Client

    return Client(url, verbose=False, headers={"X-Forwarded-For": address} if address else None)


def answer(job, timeout: float = 900) -> tuple[str, object]:
    """("answered", result), ("refused", message) or ("error", text): a job's end as a caller sees it."""
    try:
        return "answered", job.result(timeout=timeout)
    except Exception as error:
        response = getattr(error, "response", None)
        if response is not None and response.status_code == 429:
            return "refused", response.json().get("detail", "")
        text = str(error).strip()
        return ("refused" if text else "error"), text or f"{type(error).__name__} with no message"


def timed_short(url: str) -> tuple[float, str, object]:
    started = time.monotonic()
    kind, value = answer(client(url).submit(**SHORT, api_name="/speculate"))
    return time.monotonic() - started, kind, value


def check_concurrent(url: str, count: int, log: Log) -> None:
    log.section(f"{count} clients at once, /speculate 16 tokens each")
    solo = client(url).predict(**dict(SHORT, max_new_tokens=16), api_name="/speculate")["text"]
    jobs = [client(url).submit(**dict(SHORT, max_new_tokens=16), api_name="/speculate") for _ in range(count)]
    started = time.monotonic()
    outcomes = [answer(job) for job in jobs]
    same = sum(kind == "answered" and value["text"] == solo for kind, value in outcomes)
    log.line(f"{count} concurrent runs", f"{same} answered with the solo run's text in "
             f"{time.monotonic() - started:.1f} s", same == count)


def check_flood(url: str, flooders: int, joins: int, log: Log) -> None:
    log.section(f"a flood: {flooders} sessions x {joins} quick joins from one address, beside a normal client")
    floods = [client(url, "198.51.100.7") for _ in range(flooders)]
    jobs = [each.submit(**dict(SHORT, max_new_tokens=16), api_name="/speculate") for _ in range(joins)
            for each in floods]
    normal = client(url, "203.0.113.9").submit(**dict(SHORT, prompt="Name three colours."), api_name="/speculate")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(answer, jobs))
    kind, value = answer(normal)
    log.line("the normal client's run", kind if kind != "answered" else f"answered: {value['text'][:40]!r}",
             kind == "answered")
    counts = {k: sum(o[0] == k for o in outcomes) for k in ("answered", "refused", "error")}
    messages = {o[1][:90] for o in outcomes if o[0] == "refused"}
    log.line(f"{len(jobs)} flood joins", f"{counts}; refusals say {sorted(messages)}", counts["error"] == 0)


CHILD = textwrap.dedent("""
    import sys, time
    from gradio_client import Client
    Client(sys.argv[1], verbose=False).submit(prompt=sys.argv[2], method="ngram", max_new_tokens=int(sys.argv[3]),
                                              gamma=4, temperature=0.0, seed=0, api_name="/speculate")
    print("submitted", flush=True)
    time.sleep(3600)
""")


def freed_after(stopped_before: int, since: float, served: bool) -> float | None:
    """Seconds from `since` until the server's engine was free again: its GPU call closed before its end
    (ui/gpu.calls, readable only when the app is served in this process, --serve); None otherwise."""
    if not served:
        return None
    from specviz.service import gpu

    deadline = since + 120
    while gpu.calls()["stopped"] == stopped_before or gpu.calls()["running"]:
        if time.monotonic() > deadline:
            return math.inf
        time.sleep(0.01)
    return time.monotonic() - since


def stopped_count(served: bool) -> int:
    if not served:
        return 0
    from specviz.service import gpu

    return gpu.calls()["stopped"]


def check_cancels(url: str, long_tokens: int, log: Log, served: bool) -> dict:
    log.section(f"cancels: a {long_tokens}-token run cancelled, a client killed mid-run")
    idle = sorted(timed_short(url)[0] for _ in range(3))[1]
    log.line("an 8-token run on an idle server (median of 3)", f"answered in {idle:.2f} s")
    figures = {"idle_short_s": idle}

    def after(what: str, key: str, stop) -> None:
        before = stopped_count(served)
        stop()
        stopped_at = time.monotonic()
        freed = freed_after(before, stopped_at, served)
        busy, kind, _ = timed_short(url)
        figures[key], figures[key.replace("after", "freed")] = busy, freed
        got = f"{kind} in {busy:.2f} s" + ("" if freed is None else f"; the engine was free {freed:.2f} s after it")
        log.line(f"{what}, then an 8-token run", got, kind == "answered" and (freed is None or freed < math.inf))

    job = client(url).submit(**dict(SHORT, prompt=LONG_PROMPT, max_new_tokens=long_tokens), api_name="/speculate")
    time.sleep(5)
    after("job.cancel() 5 s into the run", "after_cancel_s", job.cancel)
    child = subprocess.Popen([sys.executable, "-c", CHILD, url, LONG_PROMPT, str(long_tokens)], stdout=subprocess.PIPE,
                             text=True)
    child.stdout.readline()
    time.sleep(5)

    def kill():
        os.kill(child.pid, signal.SIGKILL)
        child.wait()

    after("its client process killed (SIGKILL) 5 s into the run", "after_kill_s", kill)
    return figures


def raw_call(http, endpoint: str, data: list) -> tuple[str, object]:
    """(last event, its data) of a call sent as raw JSON (NaN and lone surrogates as Python's json writes them)."""
    body = json.dumps({"data": data}, allow_nan=True)
    started = http.post(f"/gradio_api/call/{endpoint}", content=body, headers={"content-type": "application/json"})
    if started.status_code != 200:
        return "http", started.text
    event, last = None, ("none", None)
    with http.stream("GET", f"/gradio_api/call/{endpoint}/{started.json()['event_id']}") as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event in ("complete", "error"):
                last = (event, json.loads(line.split(":", 1)[1]))
    return last


def message_of(event: str, data) -> str:
    if event == "error":
        return data.get("error") or "" if isinstance(data, dict) else str(data or "")
    if event == "http":
        return str(data)
    texts = [v for v in data if isinstance(v, str)] if isinstance(data, list) else []
    return " ".join(t for t in texts if 'role="alert"' in t)


def endpoints(http) -> dict[str, dict]:
    info = http.get("/gradio_api/info").json()["named_endpoints"]
    wanted = ("/speculate", "/distribution", "/cost_curve", "/batch")
    return {name.lstrip("/"): {p["parameter_name"]: p.get("parameter_default") for p in info[name]["parameters"]}
            for name in wanted if name in info}


def check_fuzz(http, log: Log) -> None:
    log.section("bad values, field by field (raw JSON)")
    small = {"max_new_tokens": 8, "runs": 10, "batch_tokens": 4, "prompt": "Count to five.", "batch_sizes": "1"}
    for endpoint, defaults in endpoints(http).items():
        valid = {**defaults, **{k: v for k, v in small.items() if k in defaults}}
        answered = refused = 0
        silent = []
        for field, values in BAD.items():
            if field not in valid:
                continue
            for value in values:
                event, data = raw_call(http, endpoint, list({**valid, field: value}.values()))
                message = message_of(event, data)
                if event == "complete" and not message:
                    answered += 1  # a value the boundary takes (e.g. a number it clamps) and a run that finished
                elif message and "Traceback" not in message:
                    refused += 1
                else:
                    silent.append(f"{field}={str(value)[:20]!r}: {event} {str(data)[:80]}")
        log.line(f"/{endpoint}: {answered + refused + len(silent)} bad values",
                 f"{refused} refused with a message, {answered} taken and answered"
                 + (f", {len(silent)} without a message: {silent[:3]}" if silent else ""), not silent)


def check_models(http, log: Log) -> None:
    log.section("big and random models, server paths")
    small = {"max_new_tokens": 8, "runs": 10, "batch_tokens": 4, "prompt": "Count to five.", "batch_sizes": "1"}
    for endpoint, defaults in endpoints(http).items():
        valid = {**defaults, **{k: v for k, v in small.items() if k in defaults}}
        for value, why in MODELS.items():
            for role in ("target", "draft"):
                if role not in valid:
                    continue
                values = {**valid, role: value, **({"method": "draft"} if role == "draft" else {})}
                event, data = raw_call(http, endpoint, list(values.values()))
                message = message_of(event, data)
                reveals = [word for word in REVEALING if word in message]
                ok = bool(message) and not reveals
                log.line(f"/{endpoint} {role}={value[:45]} ({why})", f"{event}: {message[-110:]!r}",
                         ok)


def poisoned_file(folder: Path) -> Path:
    """A saved lesson whose strings carry an image, a link and HTML."""
    lesson = json.loads((ROOT / "results/2026-11-27-h100-lessons/lesson-6-drafters.json").read_text())
    poison = ' eagle ![t](http://127.0.0.1:9/x.png) [link](http://127.0.0.1:9/) <img src=x onerror=alert(1)> <b>b</b>'
    lesson["measured"]["device"] += poison
    lesson["title"] += poison
    path = folder / "poisoned.json"
    path.write_text(json.dumps(lesson))
    return path


def check_poisoned(http, log: Log) -> None:
    log.section("a poisoned saved lesson file")
    from specviz.ui import learn_saved

    with tempfile.TemporaryDirectory() as folder:
        path = poisoned_file(Path(folder))
        with path.open("rb") as handle:
            uploaded = http.post("/gradio_api/upload", files={"files": ("poisoned.json", handle, "application/json")})
        log.line("upload to the server", f"HTTP {uploaded.status_code}", uploaded.status_code in (200, 413))
        found, errors = learn_saved.read_saved([str(path)])
        shown = learn_saved.saved_summary_html(found, errors) + "".join(learn_saved.saved_status_html(s)
                                                                        for s in found.values())
        live_tags = [tag for tag in ("<img", "<a ", "<b>b</b>") if tag in shown]
        log.line("rendered by the Learn tab's saved-run view", "as text" if not live_tags and "&lt;img" in shown
                 else f"live markup: {live_tags}", not live_tags and "&lt;img" in shown)


# -- the hostile visitor ----------------------------------------------------------------------------------------

PROXY = "198.51.100.20"  # the address a trusted proxy appends after what the client wrote


def idle_now(url: str) -> float:
    """An 8-token run's time on the server with nothing else of this check running (median of 3): measured just
    before each comparison, since a shared machine's load moves by several times within minutes."""
    return sorted(timed_short(url)[0] for _ in range(3))[1]


def admitted_and_refused(outcomes) -> tuple[int, int, set]:
    refused = [value for kind, value in outcomes if kind == "refused"]
    return sum(kind == "answered" for kind, _ in outcomes), len(refused), {str(r)[:90] for r in refused}


def check_forged(url: str, joins: int, per_client: int, log: Log) -> dict:
    log.section(f"forged addresses: {joins} joins, each with a new first X-Forwarded-For entry before {PROXY}")
    import random

    idle_s = idle_now(url)
    clients = [client(url, f"{random.randrange(1, 255)}.{random.randrange(256)}.{i % 256}.7, {PROXY}")
               for i in range(joins)]
    jobs = [each.submit(**dict(SHORT, max_new_tokens=16), api_name="/speculate") for each in clients]
    time.sleep(0.5)
    started = time.monotonic()
    normal = answer(client(url, "203.0.113.50").submit(**SHORT, api_name="/speculate"))
    normal_s = time.monotonic() - started
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(answer, jobs))
    admitted, refused, messages = admitted_and_refused(outcomes)
    errors = sum(kind == "error" for kind, _ in outcomes)
    # each answered run frees a place while the joins arrive: a few more than the share may get in over time
    log.line(f"{joins} forged joins (per-address share {per_client})",
             f"{admitted} admitted, {refused} refused ({sorted(messages)}), {errors} errors",
             errors == 0 and refused >= joins - 2 * per_client)
    log.line("a normal client's 8-token run beside them", f"{normal[0]} in {normal_s:.1f} s (idle just before "
             f"{idle_s:.1f} s: {normal_s / idle_s:.1f}x)", normal[0] == "answered")
    return {"forged_admitted": admitted, "forged_refused": refused, "forged_normal_s": normal_s,
            "forged_idle_s": idle_s}


RUN_VALUES = dict(prompt=LONG_PROMPT, method="ngram", target="default", draft="none", gamma=4, temperature=0, top_p=1,
                  max_new_tokens=48, seed=0, compare_plain=True, step_mode=False, tree=0, draft_stop=0)


def post_free(http, endpoint: str, data: list) -> int:
    """One REST call of a free endpoint, as a new session; its join's HTTP status (its stream is read to its end)."""
    started = http.post(f"/gradio_api/call/{endpoint}", json={"data": data})
    if started.status_code == 200:
        with http.stream("GET", f"/gradio_api/call/{endpoint}/{started.json()['event_id']}") as stream:
            for _ in stream.iter_lines():
                pass
    return started.status_code


def check_eviction(url: str, http, calls: int, log: Log) -> dict:
    log.section(f"eviction: {calls} free calls (each a new session) beside a Run-tab run")
    student = client(url, "203.0.113.60")
    job = student.submit(**dict(RUN_VALUES, max_new_tokens=192), api_name="/run")  # long enough to outlast the calls
    time.sleep(3)
    started = time.monotonic()
    free = [("pause", []), ("stop", []), ("replay", [0.1]), ("inspect", [3])]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda i: post_free(http, *free[i % len(free)]), range(calls)))
    flood_s = time.monotonic() - started
    going = not job.done()
    kind, value = answer(job)
    status = str(value[0]) if kind == "answered" else str(value)
    log.line(f"{calls} free calls in {flood_s:.1f} s", f"HTTP {sorted(set(statuses))}; the run "
             + ("still going at their end" if going else "over before their end"), True)
    done = kind == "answered" and "Done:" in status
    log.line("the Run-tab run", f"{kind}: {_text_of(status)[:70]!r}", done)
    inspected = answer(student.submit(step=1, api_name="/inspect"))
    found = inspected[0] == "answered" and "sv-tok" in str(inspected[1][0])
    log.line("/inspect of its step 1 afterwards", "the run's token view" if found else f"{inspected[0]}: no run", found)
    return {"eviction_calls": calls, "eviction_run_going": going, "eviction_run_done": done,
            "eviction_inspected": found}


def _text_of(html: str) -> str:
    import re

    return re.sub(r"<[^>]+>", "", html).strip()


def check_replays(url: str, replays: int, log: Log) -> dict:
    log.section(f"a replay flood: {replays} replays of one session's finished run, beside a normal /speculate")
    flooder = client(url, "203.0.113.70")
    answer(flooder.submit(**RUN_VALUES, api_name="/run"))
    idle_s = idle_now(url)
    jobs = [flooder.submit(seconds_per_step=5.0, api_name="/replay") for _ in range(replays)]
    time.sleep(2)
    threads = max(_threads_in("handle_replay") for _ in range(10)) if _served() else None
    started = time.monotonic()
    kind, _ = answer(client(url, "203.0.113.71").submit(**SHORT, api_name="/speculate"))
    normal_s = time.monotonic() - started
    answer(flooder.submit(api_name="/stop"))
    outcomes = [answer(job, timeout=120) for job in jobs]
    admitted, refused, messages = admitted_and_refused(outcomes)
    log.line(f"{replays} replays of one page", f"{admitted} admitted, {refused} refused ({sorted(messages)})"
             + ("" if threads is None else f"; threads waiting inside a replay: {threads}"), admitted <= 2)
    log.line("a normal 8-token /speculate beside them", f"{kind} in {normal_s:.1f} s (idle {idle_s:.1f} s: "
             f"{normal_s / idle_s:.1f}x; goal 2x)", kind == "answered")
    return {"replay_admitted": admitted, "replay_normal_s": normal_s, "replay_idle_s": idle_s,
            "replay_threads": threads}


MAXIMAL_PROMPT = " cat" * 990  # 3,960 characters, some 1,000 tokens: under the public limits of both


def check_maximal(url: str, log: Log) -> dict:
    log.section("the longest request the profile takes (~1,000-token prompt, 512 tokens, temperature 2) beside "
                "an 8-token run")
    idle_s = idle_now(url)
    heavy = client(url, "203.0.113.80").submit(**dict(SHORT, prompt=MAXIMAL_PROMPT, max_new_tokens=512,
                                                      temperature=2.0), api_name="/speculate")
    time.sleep(8)
    started = time.monotonic()
    kind, _ = answer(client(url, "203.0.113.81").submit(**SHORT, api_name="/speculate"))
    short_s = time.monotonic() - started
    still = not heavy.done()
    heavy.cancel()
    log.line("the 8-token run beside it", f"{kind} in {short_s:.1f} s (idle {idle_s:.1f} s: {short_s / idle_s:.1f}x; "
             f"goal 3x); the long one {'still running' if still else 'over already'}", kind == "answered")
    return {"maximal_short_s": short_s, "maximal_idle_s": idle_s, "maximal_still_running": still}


def check_edges(url: str, http, log: Log) -> None:
    log.section("edges: the direct route, unknown endpoints, too few values, tiny temperature, a drafter as target")
    direct = http.post("/gradio_api/run/speculate", json={"data": ["hi", "ngram", 8, 4, 0, 0, "default", ""]})
    log.line("POST /gradio_api/run/speculate (skips the queue)", f"HTTP {direct.status_code}",
             direct.status_code == 404)
    unknown = http.post("/gradio_api/queue/join", json={"data": [], "fn_index": 9999, "session_hash": "edge0001"})
    log.line("fn_index 9999", f"HTTP {unknown.status_code}: {unknown.text[:90]}", unknown.status_code == 404)
    for what, data in [("too few values", ["hi"]),
                       ("temperature 1e-300", ["hi", "ngram", 8, 4, 1e-300, 0, "default", ""]),
                       ("target 'distilled' (a drafter)", ["hi", "ngram", 8, 4, 0, 0, "distilled", ""])]:
        try:
            event, got = raw_call(http, "speculate", data)
        except Exception as error:  # the server dropped the call: no message at all
            event, got = "dropped", f"{type(error).__name__}: {error}"
        message = message_of(event, got) if event != "dropped" else ""
        ok = bool(message) and "went wrong" not in message and "object at 0x" not in message
        log.line(what, f"{event}: {str(message or got)[:100]!r}", ok)
    from specviz.ui import learn_saved

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "deep.json"
        path.write_text("[" * 100_000 + "]" * 100_000)
        _, errors = learn_saved.read_saved([str(path)])
        log.line("a saved file nested 100,000 deep", repr(errors[0][:90]) if errors else "read",
                 bool(errors) and "recursion" not in errors[0])


def _threads_in(function: str) -> int:
    """Threads of this process whose stack is inside `function` now (a served app's replay handler)."""
    time.sleep(0.1)
    count = 0
    for frame in sys._current_frames().values():
        while frame is not None and frame.f_code.co_name != function:
            frame = frame.f_back
        count += frame is not None
    return count


def _served() -> bool:
    return "specviz.ui.app" in sys.modules


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.public_check", description=__doc__.splitlines()[0],
                                     epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", nargs="?", help="the served app, e.g. http://127.0.0.1:7860 (or --serve)")
    parser.add_argument("--serve", action="store_true", help="serve the app in its public profile in this process "
                        "(a free loopback port) and check it: the time a cancelled run takes to free the engine is "
                        "then read from the server itself")
    parser.add_argument("--pid", type=int, help="the server's process id (on this machine): its memory from /proc")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--flooders", type=int, default=4, help="flooding sessions from one address (default 4)")
    parser.add_argument("--joins", type=int, default=10, help="quick joins per flooding session (default 10)")
    parser.add_argument("--long", type=int, default=512, help="new tokens of the run that is cancelled (default 512)")
    parser.add_argument("--forged", type=int, default=40, help="joins with forged addresses (default 40)")
    parser.add_argument("--free-calls", type=int, default=300, help="free calls beside a Run-tab run (default 300)")
    parser.add_argument("--replays", type=int, default=45, help="replays of one page's run (default 45)")
    parser.add_argument("--per-client", type=int, default=16, help="the server's SPECVIZ_PER_CLIENT (default 16)")
    parser.add_argument("--only", help="comma-separated sections: class (the checks above the hostile visitor), "
                        "forged, eviction, replay, maximal, edges (default: all)")
    args = parser.parse_args(argv)

    import httpx

    if args.serve == bool(args.url):
        parser.error("give the URL of a served app, or --serve")
    demo = serve_public() if args.serve else None
    url = demo.local_url.rstrip("/") if demo is not None else args.url.rstrip("/")
    if args.serve:
        args.pid = os.getpid()
    try:
        return check(url, args, httpx)
    finally:
        if demo is not None:
            demo.close()


def serve_public():
    """The app in its public profile (SPECVIZ_PUBLIC=1), queue and limits as `python app.py` sets them; its
    client address read from X-Forwarded-For as behind a Space's proxy (the profile is given SPACE_ID, gradio is
    not: it serves as it does anywhere else)."""
    os.environ["SPECVIZ_PUBLIC"] = "1"
    from specviz.ui.app import build_demo, launch
    from specviz.service.serving import configure_profile, machine_profile

    configure_profile(machine_profile({**os.environ, "SPACE_ID": "public-check/local"}))
    demo = build_demo()
    launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    return demo


def check(url: str, args, httpx) -> int:
    log = Log()
    started = time.monotonic()
    before = rss_mib(args.pid)
    print(f"public check of {url}" + (f", server pid {args.pid}: {before:.0f} MiB resident" if before else ""))
    sections = set((args.only or "class,forged,eviction,replay,maximal,edges").split(","))
    figures = {}
    with httpx.Client(base_url=url, timeout=900) as http:
        if "class" in sections:
            check_concurrent(url, args.clients, log)
            check_flood(url, args.flooders, args.joins, log)
            figures.update(check_cancels(url, args.long, log, args.serve))
            check_fuzz(http, log)
            check_models(http, log)
            check_poisoned(http, log)
        if "class" not in sections:
            timed_short(url)  # the model loaded and warm: not part of any idle time
        if "forged" in sections:
            figures.update(check_forged(url, args.forged, args.per_client, log))
        if "eviction" in sections:
            figures.update(check_eviction(url, http, args.free_calls, log))
        if "replay" in sections:
            figures.update(check_replays(url, args.replays, log))
        if "maximal" in sections:
            figures.update(check_maximal(url, log))
        if "edges" in sections:
            check_edges(url, http, log)
        log.section("the server after it all")
        seconds, kind, value = timed_short(url)
        log.line("an 8-token run", f"{kind} in {seconds:.2f} s", kind == "answered")
    after = rss_mib(args.pid)
    print(f"\n{log.tried} checks in {time.monotonic() - started:.0f} s; {len(log.failures)} failed")
    if before is not None:
        budget = ""
        if args.serve:
            from specviz.service import serving

            budget = f" (its models' budget: {serving.profile().memory_budget / 2 ** 30:.1f} GiB)"
        print(f"server memory: {before:.0f} MiB before, {after:.0f} MiB after{budget}")
    if "after_cancel_s" in figures:
        print("cancelled run: the next 8-token run took {after_cancel_s:.2f} s, after a killed client "
              "{after_kill_s:.2f} "
              "s, on an idle server {idle_short_s:.2f} s".format(**figures))
    if figures.get("freed_cancel_s") is not None:
        print("the engine was free {freed_cancel_s:.2f} s after the cancel, {freed_kill_s:.2f} s after the kill"
              .format(**figures))
    print("figures: " + json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}))
    for failure in log.failures:
        print(f"FAILED: {failure}")
    return 1 if log.failures else 0


if __name__ == "__main__":
    sys.exit(main())
