"""What each streamed update costs a browser on the same machine: chromium's CPU time (all its processes, from
/proc) and the updates and bytes the page received, in each phase of a run of every example prompt.

    python -m scripts.browser_update_cost [--variants app,tokens_only,status_only] [--rounds 1] [--out cost.json]

One process serves the app and drives Debian's chromium through Playwright (1280x720), as
`python -m specviz.ui.overhead` does. Per run, the phases are: pre (the click on Run to the first speculative
step), split in two: clear (the click to the run's start: the page cleared, the run asked for, its models
and its warm-up) and first (the run's start to the end of its first step, the prefill included, which the
engine's speed counts); spec (the rest of the speculative run); base (plain decoding for the baseline) and
after (the last frame, 0.8 s). Updates and their bytes are the data chunks of the page's event
stream (`/queue/data`), from the DevTools protocol, on the same clock as the phases.

A variant changes what an update carries while the speculative run streams (the charts' updates are left as
they are): `app` as the app sends it, `tokens_only` the token view alone, `status_only` the status line alone.
Whatever it carries, an update costs the browser about as much: the number of updates is the lever.
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import sys
import time


PHASES = ("clear", "first", "spec", "base", "after")
TICK = os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    children = collections.defaultdict(list)
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            children[int(open(stat).read().rsplit(")", 1)[1].split()[1])].append(int(stat.split("/")[2]))
        except (OSError, ValueError, IndexError):
            pass
    found, todo = [], [pid]
    while todo:
        kids = children[todo.pop()]
        found += kids
        todo += kids
    return found


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="app")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    import specviz.ui.app as app_module
    from specviz.models import load_model
    from specviz.ui import live
    from specviz.ui.overhead import CHROMIUM

    load_model("default")
    demo = app_module.build_demo()
    _, url, _ = app_module.launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    frame = app_module.SpecvizApp.frame

    def variant(name):
        def changed(self, run, cursor=None, upto=None, parts=frozenset({"text", "slider", "charts", "race", "detail"}),
                    narrow=False):
            out = frame(self, run, cursor, upto, parts, narrow)
            if run.phase == live.RUNNING and "text" in parts and "charts" not in parts:
                if name == "tokens_only":
                    out.pop(self.status, None), out.pop(self.summary, None)
                elif name == "status_only":
                    out.pop(self.tokens, None), out.pop(self.summary, None)
            return out
        app_module.SpecvizApp.frame = changed if name != "app" else frame

    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    devtools = page.context.new_cdp_session(page)
    devtools.send("Network.enable")
    chunks, urls = [], {}
    devtools.on("Network.requestWillBeSent", lambda e: urls.__setitem__(e["requestId"], e["request"]["url"]))
    devtools.on("Network.dataReceived", lambda e: chunks.append((e["timestamp"], e["dataLength"],
                                                                 urls.get(e["requestId"], ""))))
    page.goto(url)
    page.wait_for_selector("#sv-run", timeout=60_000)
    pids = descendants(os.getpid())
    prompts = app_module.example_prompts()
    results = {}
    for name in args.variants.split(","):
        variant(name)
        rows = []
        for index, prompt in enumerate([prompts[0]] + prompts * args.rounds):  # the first run warms the page
            page.locator("#sv-prompt textarea").fill(prompt)
            page.wait_for_timeout(300)
            before = {id(run) for run in live.live_runs()}
            del chunks[:]
            marks = [(time.monotonic(), cpu_seconds(pids))]
            page.click("#sv-run")
            while True:
                runs = [run for run in live.live_runs() if id(run) not in before]
                run = runs[0] if runs else None
                stage = len(marks)
                if run is not None and (stage == 1 or (stage == 2 and run.speculative.steps)
                                        or (stage == 3 and run.speculative.done) or (stage == 4 and run.finished)):
                    marks.append((time.monotonic(), cpu_seconds(pids)))
                    if stage == 4:
                        break
                    continue
                time.sleep(0.002)
            page.wait_for_function("n => document.querySelector('#sv-status').textContent.includes(`Done: ${n} steps`)",
                                   arg=len(run.speculative.steps), timeout=60_000, polling=100)
            page.wait_for_timeout(800)
            marks.append((time.monotonic(), cpu_seconds(pids)))
            stream = [(at, size) for at, size, address in chunks if "queue/data" in address]
            row = {"prompt": prompt[:40], "tokens": run.speculative.result.metrics.new_tokens,
                   "spec_seconds": marks[3][0] - marks[1][0]}
            for k, phase in enumerate(PHASES):
                sizes = [size for at, size in stream if marks[k][0] <= at < marks[k + 1][0]]
                row[phase] = {"chromium_cpu_s": round(marks[k + 1][1] - marks[k][1], 3), "updates": len(sizes),
                              "bytes": sum(sizes)}
            if index:
                rows.append(row)
            print(name, json.dumps(row), flush=True)
        updates = sum(r["spec"]["updates"] for r in rows)
        cpu = sum(r["spec"]["chromium_cpu_s"] for r in rows)
        results[name] = {"rows": rows, "spec_updates": updates, "spec_bytes": sum(r["spec"]["bytes"] for r in rows),
                         "spec_chromium_cpu_s": round(cpu, 3),
                         "first_step_chromium_cpu_s": round(sum(r["first"]["chromium_cpu_s"] for r in rows), 3),
                         "first_step_updates": sum(r["first"]["updates"] for r in rows),
                         "speculative_seconds": round(sum(r["spec_seconds"] for r in rows), 3),
                         "chromium_ms_per_spec_update": round(1000 * cpu / updates) if updates else None}
        print(name, json.dumps({k: v for k, v in results[name].items() if k != "rows"}), flush=True)
    browser.close()
    playwright.stop()
    demo.close()
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
