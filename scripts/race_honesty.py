"""How far the app's race can be trusted: the default example run again and again in a browser on the same host
(as on a teacher's laptop), each beside the command line's measurement of the same prompt (`specviz generate
--compare-plain --json`, its own process), in turns, with the machine's load average beside every figure.

    python -m scripts.race_honesty [--runs 10] [--load 0] [--reference cli|library] [--out results/DIR/race.json]

For each run it records the speedup the page states, tau, both speeds, whether the page marks the speedup as
noisy, and whether the figure is one that tau allows (a speculative step costs at least a plain one, so no honest
speedup is above tau). The summary (printed at the end, ready to paste into docs/benchmarks/) gives the median
and spread of the browser's speedups and of the reference's, the browser's median against the reference's, and
every implausible figure the page stated without its noise note (there should be none).

--load N starts N processes that keep a core busy in bursts (0.3 to 3 s on, 0.3 to 3 s off), as other users'
work would: the measurement under load. --reference library measures the same prompt with specviz.api.generate in
this process, in a fresh thread as the app's engine runs (torch then keeps to one core: on a loaded machine the
command line's two threads, each waiting on the other, can run several times slower, and the command line's own
figure scatters). The app is served in this process on a free loopback port with the
offline default model; the browser is Debian's chromium through Playwright (setup.sh --dev installs both).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from scripts.screenshots import served_app

ROOT = Path(__file__).resolve().parents[1]

BURST = """
import random, time
random.seed({seed})
while True:
    end = time.monotonic() + random.uniform(0.3, 3.0)
    while time.monotonic() < end:
        pass
    time.sleep(random.uniform(0.3, 3.0))
"""


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def start_load(processes: int) -> list[subprocess.Popen]:
    """Processes that keep a core busy in bursts, each with its own rhythm."""
    return [subprocess.Popen([sys.executable, "-c", BURST.format(seed=i)]) for i in range(processes)]


def stop_load(burners: list[subprocess.Popen]) -> None:
    for burner in burners:
        burner.terminate()
    for burner in burners:
        burner.wait(10)


def browser_run(page, previous) -> dict:
    """Press Run on the page and wait for the run to end: the figures the page stated, and the run's own."""
    from specviz.service import live
    from specviz.ui import sessions

    page.click("#sv-run")
    deadline = time.monotonic() + 600
    run = None
    while time.monotonic() < deadline:
        runs = [r for r in sessions.live_runs() if r is not previous]
        run = runs[-1] if runs else None
        if run is not None and run.finished:
            break
        time.sleep(0.2)
    if run is None or run.phase != live.DONE:
        raise SystemExit(f"the run did not finish: {run.phase if run else 'never started'} {run.error if run else ''}")
    page.wait_for_function("document.querySelector('#sv-status').innerText.startsWith('Done')", timeout=60_000)
    page.wait_for_timeout(300)
    status = page.locator("#sv-status").inner_text()
    summary = page.locator("#sv-summary").inner_text()
    spec, plain = run.speculative, run.plain
    return {"speedup": run.speedup, "tau": spec.result.metrics.mean_accepted_length,
            "tokens_per_second": spec.engine_tokens_per_second,
            "plain_tokens_per_second": plain.engine_tokens_per_second,
            "doubt": getattr(run, "doubt", None), "noted_on_page": "noisy" in status and "noisy" in summary,
            "stated": f"{run.speedup:.2f}×" in status and f"{run.speedup:.2f}×" in summary, "run": run}


def cli_run(prompt: str, method: str, max_new: int) -> dict:
    """The command line's measurement of the same prompt, in its own process."""
    proc = subprocess.run([sys.executable, "-m", "specviz", "generate", "--prompt", prompt, "--method", method,
                           "--max-new-tokens", str(max_new), "--gamma", "4", "--compare-plain", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"specviz generate failed: {proc.stderr.strip()[-500:]}")
    out = json.loads(proc.stdout)
    return {"speedup": out["speedup"], "tau": out["metrics"]["mean_accepted_length"],
            "tokens_per_second": out["metrics"]["tokens_per_second"],
            "plain_tokens_per_second": out["plain"]["tokens_per_second"]}


def library_run(target, prompt: str, method: str, max_new: int) -> dict:
    """The library's measurement of the same prompt (specviz.api.generate with compare_plain, what the command
    line runs), in a fresh thread of this process."""
    from specviz import DecodeSettings
    from specviz.api import generate

    out = {}

    def work():
        report = generate(prompt, method=method, target=target, compare_plain=True,
                          settings=DecodeSettings(max_new_tokens=max_new, gamma=4))
        m = report.result.metrics
        out.update(speedup=report.speedup, tau=m.mean_accepted_length, tokens_per_second=m.tokens_per_second,
                   plain_tokens_per_second=report.plain.metrics.tokens_per_second)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return out


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summary_text(record: dict) -> str:
    """The measurement in a few lines of markdown, for docs/benchmarks/."""
    browser, library = record["browser"], record["reference"]
    b, lib = spread([r["speedup"] for r in browser]), spread([r["speedup"] for r in library])
    loads = [r["load_before"] for r in browser + library]
    above = [r for r in browser if r["speedup"] > r["tau"]]
    unnoted = [r for r in above if not r["noted_on_page"]]
    noted = [r for r in browser if r["noted_on_page"]]
    lines = [
        f"Race honesty, commit {record['commit']}, {record['date']}, {record['machine']}; "
        f"load processes started: {record['load_processes']}.",
        "",
        "| | runs | speedup median | min | max | tau | tok/s (median) | plain tok/s (median) | load average (1 min) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, rows, figures in (("browser", browser, b), (record["reference_name"], library, lib)):
        lines.append(f"| {name} | {figures['n']} | {figures['median']:.2f}x | {figures['min']:.2f}x | "
                     f"{figures['max']:.2f}x "
                     f"| {statistics.median(r['tau'] for r in rows):.2f} "
                     f"| {statistics.median(r['tokens_per_second'] for r in rows):.1f} "
                     f"| {statistics.median(r['plain_tokens_per_second'] for r in rows):.1f} "
                     f"| {min(r['load_before'] for r in rows):.2f}-{max(r['load_before'] for r in rows):.2f} |")
    within = [r for r in browser if abs(r["speedup"] / lib["median"] - 1) <= 0.15]
    lines += [
        "",
        f"Browser median / reference median: {b['median'] / lib['median']:.3f}; browser runs within 15% of the "
        f"reference's median: {len(within)} of {len(browser)}. Load average over the measurement: "
        f"{min(loads):.2f}-{max(loads):.2f}.",
        f"Browser runs marked noisy on the page: {len(noted)}; speedups above tau: {len(above)}, of which stated "
        f"without the noise note: {len(unnoted)}.",
        "",
        "Every browser run (speedup, tau, tok/s, plain tok/s, load, note):",
        "",
    ]
    lines += [f"- {r['speedup']:.2f}x, tau {r['tau']:.2f}, {r['tokens_per_second']:.1f} / "
              f"{r['plain_tokens_per_second']:.1f} "
              f"tok/s, load {r['load_before']:.2f}" + (f"; noted: {r['doubt']}" if r["noted_on_page"] else "")
              for r in browser]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="measured runs each, after one untimed run each")
    parser.add_argument("--load", type=int, default=0, help="bursty busy processes to start during the measurement")
    parser.add_argument("--max-new", type=int, default=96, help="new tokens (the app's default)")
    parser.add_argument("--reference", choices=("cli", "library"), default="cli",
                        help="what the browser's figures are held against (the module's doc)")
    parser.add_argument("--out", default=None, help="write every run and the summary to this JSON file")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.load < 0:
        parser.error("--runs must be at least 1 and --load at least 0")

    from specviz.lessons.saved import device_name, git_commit
    from specviz.models.loading import load_model
    from specviz.ui.assets import examples

    example = examples()[0]
    prompt, method = example["prompt"], example["method"]
    target = load_model("default")
    record = {"commit": git_commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "machine": f"{device_name(target.device)}, {os.cpu_count()} cores", "prompt": prompt, "method": method,
              "max_new_tokens": args.max_new, "load_processes": args.load, "browser": [], "reference": [],
              "reference_name": {"cli": "command line (generate --compare-plain)",
                                 "library": "library in a fresh thread"}[args.reference]}

    def reference() -> dict:
        return (cli_run(prompt, method, args.max_new) if args.reference == "cli"
                else library_run(target, prompt, method, args.max_new))

    burners = []
    try:
        with served_app() as (browser, url):
            page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
            page.goto(url)
            page.wait_for_selector("#sv-run", timeout=120_000)
            max_new = page.locator("#sv-max-new input").first
            if not max_new.is_visible():
                page.get_by_text("Settings: models").click()
            max_new.fill(str(args.max_new))
            max_new.press("Tab")
            page.get_by_text("Settings: models").click()
            previous = browser_run(page, None)["run"]  # untimed: loads the model, warms both paths up
            reference()
            burners = start_load(args.load)
            for i in range(args.runs):
                load = load_average()
                result = browser_run(page, previous)
                previous = result.pop("run")
                record["browser"].append({**result, "load_before": load, "load_after": load_average()})
                load = load_average()
                record["reference"].append({**reference(), "load_before": load, "load_after": load_average()})
                b, ref = record["browser"][-1], record["reference"][-1]
                print(f"run {i + 1}: browser {b['speedup']:.2f}x (tau "
                      f"{b['tau']:.2f}{', noted' if b['noted_on_page'] else ''}), "
                      f"{args.reference} {ref['speedup']:.2f}x, load {load:.2f}", file=sys.stderr, flush=True)
    finally:
        stop_load(burners)
    record["summary"] = summary_text(record)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n")
    print(record["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
