"""What the UI costs the engine: tokens/s of the same runs with and without the app streaming them.

    python -m specviz.ui.overhead --rounds 2 --max-new-tokens 96 [--method ngram] [--prompts 3]
        [--ways library,driver,app,browser] [--out runs/ui_overhead.json]

One process serves the app (the model loaded once) and runs the headless runs; the users are other
processes: a gradio_client that submits each prompt to /run and reads every streamed update, and a real
browser (Debian's chromium through Playwright) that types the prompt, presses Run and draws every update.
Per prompt, each way in an order that rotates from prompt to prompt so that drift on a shared machine falls
on all of them:

- library: `specviz.api.run_once` (plain, then speculative), in a fresh thread;
- driver: the app's own run driver (live.LiveRun: worker thread, engine lock), with no UI polling it;
- app: the same through the web app, streamed to gradio_client;
- browser: the same through the web app, streamed to chromium, which renders it on the same cores.

app / driver is what the UI costs; driver / library what the driver costs. Speeds are the engine's own: in the
library its wall time from the first to the last step; in the driver and the app its engine time (stepped_runs.py:
each run's own steps, not the other run's turns nor the moments held for the page to draw an update), which
still holds whatever the UI took from the cores while a step ran. The
CPU time of this process (all its threads: engine, UI, server; not the client's) is measured around each
way too: on a shared machine it is steadier than speed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

CLIENT = r"""
import json, sys
from gradio_client import Client
client = Client(sys.argv[1], verbose=False)
for line in sys.stdin:
    args = json.loads(line)
    job = client.submit(**args, api_name="/run")
    updates = sum(1 for _ in job)
    final = job.outputs()[-1]
    print(json.dumps({"trace": final[8], "updates": updates}), flush=True)
"""
WAYS = ("library", "driver", "app", "browser")


def engine_figures(run) -> dict:
    """A finished live.LiveRun's speeds on engine time, its tokens and output."""
    spec = run.speculative
    return {"spec": spec.engine_tokens_per_second, "plain": run.plain.engine_tokens_per_second,
            "tokens": spec.result.metrics.new_tokens, "token_ids": spec.result.token_ids}
CHROMIUM = "/usr/bin/chromium"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--method", default="ngram")
    parser.add_argument("--prompts", type=int, default=None, help="the first N example prompts (default: all)")
    parser.add_argument("--ways", default="library,driver,app", help=f"some of {','.join(WAYS)}")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    ways = tuple(w for w in WAYS if w in args.ways.split(","))

    import torch

    from ..api import encode, load_model, make_proposer, run_once
    from ..settings import DecodeSettings
    from ..service import live
    from . import sessions
    from ..service.run_request import RunRequest
    from .app import build_demo, example_prompts, launch

    target = load_model("default")
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma)
    demo = build_demo()
    _, url, _ = launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    client = subprocess.Popen([sys.executable, "-c", CLIENT, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)

    def app(prompt: str) -> dict:
        client.stdin.write(json.dumps(dict(
            prompt=prompt, method=args.method, target="default", draft="none", gamma=args.gamma, temperature=0,
            top_p=1, max_new_tokens=args.max_new_tokens, seed=0, compare_plain=True, step_mode=False)) + "\n")
        client.stdin.flush()
        reply = json.loads(client.stdout.readline())
        trace = json.loads(open(reply["trace"]).read())
        return {"spec": trace["metrics"]["tokens_per_second"], "plain": trace["plain"]["tokens_per_second"],
                "tokens": trace["metrics"]["new_tokens"], "updates": reply["updates"], "token_ids": trace["token_ids"]}

    def driver(prompt: str) -> dict:
        run = live.LiveRun(RunRequest(prompt, args.method, "default", None, settings), target, None)
        run.start()
        run.join()
        return engine_figures(run)

    def library(prompt: str) -> dict:
        out = {}

        def work():  # a fresh thread, as the driver uses one
            ids = encode(target, prompt)
            plain = run_once(target, make_proposer("plain", target), ids, settings, prompt)
            spec = run_once(target, make_proposer(args.method, target), ids, settings, prompt)
            out.update(spec=spec.metrics.tokens_per_second, plain=plain.metrics.tokens_per_second,
                       tokens=spec.metrics.new_tokens, token_ids=spec.token_ids)

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        return out

    browser = None
    if "browser" in ways:
        from playwright.sync_api import sync_playwright

        playwright = sync_playwright().start()
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(url)
        page.wait_for_selector("#sv-run", timeout=60_000)
        page.get_by_text("Settings: models").click()
        page.locator("#sv-max-new input").first.fill(str(args.max_new_tokens))
        page.locator("#sv-max-new input").first.press("Tab")
        page.locator("#sv-gamma input").first.fill(str(args.gamma))
        page.locator("#sv-gamma input").first.press("Tab")
        page.get_by_text("Settings: models").click()
        if args.method != "ngram":  # the app's default
            page.locator("#sv-method input").first.fill(args.method)
            page.locator("#sv-method input").first.press("Enter")

    def in_browser(prompt: str) -> dict:
        before = {id(run) for run in sessions.live_runs()}
        page.locator("#sv-prompt textarea").fill(prompt)
        page.click("#sv-run")
        deadline = time.monotonic() + 600
        while True:  # the run this click started, once finished, then its last frame on the screen
            runs = [run for run in sessions.live_runs() if id(run) not in before]
            if runs and runs[0].finished:
                break
            assert time.monotonic() < deadline, "the browser's run did not finish"
            time.sleep(0.05)
        run = runs[0]
        page.wait_for_function("n => document.querySelector('#sv-status').textContent.includes(`Done: ${n} steps`)",
                               arg=len(run.speculative.steps), timeout=60_000)
        return engine_figures(run)

    runners = {"library": library, "driver": driver, "app": app, "browser": in_browser}
    prompts = example_prompts()[: args.prompts]
    for way in ways:  # warm every path: first-call costs land in no measured run
        runners[way](prompts[0])
    rows = []
    for round_index in range(args.rounds):
        for i, prompt in enumerate(prompts):
            shift = (i + round_index) % len(ways)
            order = ways[shift:] + ways[:shift]
            measured = {}
            for way in order:
                cpu = time.process_time()  # every thread of this process: engine, UI, server (not the client)
                measured[way] = runners[way](prompt)
                measured[way]["cpu"] = time.process_time() - cpu
            assert len({tuple(m["token_ids"]) for m in measured.values()}) == 1, "the ways disagree on the output"
            row = {"round": round_index, "prompt": prompt[:60], "order": order,
                   "tokens": measured[ways[0]]["tokens"], "updates": measured.get("app", {}).get("updates")}
            for way in ways:
                row[f"{way}_spec_tps"] = measured[way]["spec"]
                row[f"{way}_plain_tps"] = measured[way]["plain"]
                row[f"{way}_cpu_s"] = measured[way]["cpu"]
            rows.append(row)
            print(f"{row['prompt'][:36]:36s} {row['tokens']:3d} tok | spec tok/s "
                  + " ".join(f"{way} {row[f'{way}_spec_tps']:5.1f}" for way in ways) + " | plain tok/s "
                  + " ".join(f"{way} {row[f'{way}_plain_tps']:5.1f}" for way in ways) + " | cpu s "
                  + " ".join(f"{way} {row[f'{way}_cpu_s']:5.1f}" for way in ways), flush=True)
    client.stdin.close()
    client.wait(30)
    if browser is not None:
        browser.close()
        playwright.stop()
    demo.close()

    def median_ratio(kind, a, b):
        return statistics.median(r[f"{a}_{kind}_tps"] / r[f"{b}_{kind}_tps"] for r in rows)

    summary = {
        "device": str(target.device), "threads": torch.get_num_threads(), "load_average": os.getloadavg(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "method": args.method,
        "max_new_tokens": args.max_new_tokens, "runs_per_way": len(rows),
        "median_ratio": {f"{a}/{b} {kind}": median_ratio(kind, a, b)
                         for a, b in (("app", "driver"), ("driver", "library"), ("app", "library"),
                                      ("browser", "library"), ("browser", "app"))
                         if a in ways and b in ways for kind in ("spec", "plain")},
        "median_cpu_ratio": {f"{a}/{b}": statistics.median(r[f"{a}_cpu_s"] / r[f"{b}_cpu_s"] for r in rows)
                             for a, b in (("app", "driver"), ("driver", "library"), ("browser", "driver"))
                             if a in ways and b in ways},
        "median_tokens_per_second": {f"{way} {kind}": statistics.median(r[f"{way}_{kind}_tps"] for r in rows)
                                     for way in ways for kind in ("spec", "plain")},
        "median_speedup": {way: statistics.median(r[f"{way}_spec_tps"] / r[f"{way}_plain_tps"] for r in rows)
                           for way in ways},
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as handle:
            json.dump({"summary": summary, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
