"""The web app on the GPU machine against the library: starts `python3 app.py` in a subprocess, drives it with
gradio_client (/speculate, /run, /compare, /cost_curve) on one prompt with one method and fixed settings,
runs the same prompt, method and settings through the library in this process (specviz.api, the bench's
way: warmed up, then run_once), and writes OUT/app_check.json: for each repeat the speculative and plain
tok/s each way reports, and the medians of app / library. The ways take turns within a repeat, so that drift
falls on all of them. The app and this process each hold their own copy of the model; runs never overlap.

Needs gradio and gradio_client (on the GPU machine: the wheels of scripts/stage_app_wheels.sh; docs/gpu.md).

    python3 -m scripts.gpu_app_check --out $OUT [--method ngram --gamma 8 | --method retrieval --gamma 16]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROMPT = ("Explain how a hash map handles collisions, then write a short Python function that counts the words "
          "in a text with a dictionary, and explain it line by line.")
WAYS = ("library", "speculate", "run", "compare")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    log = open(log_path, "w")
    return subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_for(url: str, app: subprocess.Popen, timeout: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if app.poll() is not None:
            raise RuntimeError(f"app.py exited with {app.returncode} before serving")
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if reply.status == 200:
                    return time.monotonic() - began
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"app.py did not serve {url} within {timeout:.0f} s")


def table_rows(table) -> dict[str, dict]:
    """The Compare tab's table (headers and rows, as gradio_client returns a Dataframe) by method."""
    headers, data = (table["headers"], table["data"]) if isinstance(table, dict) else (table.columns, table.values)
    return {row[0]: dict(zip(headers, row)) for row in data}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    parser.add_argument("--method", default="ngram", help="ngram or retrieval (the default model ships a datastore)")
    parser.add_argument("--gamma", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--start-timeout", type=float, default=300)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    app = start_app(port, out / "app.log")
    try:
        started = wait_for(url, app, args.start_timeout)
        print(f"app.py serving {url} after {started:.1f} s", flush=True)
        result = check(args, url)
        result["app_start_seconds"] = started
    finally:
        app.terminate()
        try:
            app.wait(30)
        except subprocess.TimeoutExpired:
            app.kill()
    (out / "app_check.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "repeats"}, indent=1))
    return 0


def check(args, url: str) -> dict:
    import torch
    from gradio_client import Client

    from specviz.api import encode, make_proposer, run_once, warm_up
    from specviz.models.loading import load_model
    from specviz.proposers import PlainProposer
    from specviz.settings import DecodeSettings

    client = Client(url, verbose=False)
    target = load_model("default")
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma)
    ids = encode(target, args.prompt)
    proposer = make_proposer(args.method, target)
    warm_up(target, args.gamma + 1, len(ids) + args.max_new_tokens + args.gamma + 1, [proposer])
    form = dict(prompt=args.prompt, target="default", draft="none", gamma=args.gamma, temperature=0, top_p=1,
                max_new_tokens=args.max_new_tokens, seed=0)

    def library() -> dict:
        found = {}

        def work():  # a fresh thread, as the app's run driver uses one
            plain = run_once(target, PlainProposer(), ids, settings, args.prompt, detail=False)
            spec = run_once(target, make_proposer(args.method, target), ids, settings, args.prompt, detail=False)
            found.update(spec=spec.metrics.tokens_per_second, plain=plain.metrics.tokens_per_second,
                         tokens=spec.metrics.new_tokens, token_ids=spec.token_ids)

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        return found

    def speculate() -> dict:
        report = client.predict(prompt=args.prompt, method=args.method, max_new_tokens=args.max_new_tokens,
                                gamma=args.gamma, temperature=0.0, seed=0, target="default", draft="",
                                api_name="/speculate")
        return {"spec": report["metrics"]["tokens_per_second"], "plain": report["plain"]["tokens_per_second"],
                "tokens": report["metrics"]["new_tokens"], "token_ids": report.get("token_ids")}

    def run() -> dict:
        outputs = client.predict(**form, method=args.method, compare_plain=True, step_mode=False, tree=0,
                                 api_name="/run")
        trace = json.loads(Path(outputs[8]).read_text())
        return {"spec": trace["metrics"]["tokens_per_second"], "plain": trace["plain"]["tokens_per_second"],
                "tokens": trace["metrics"]["new_tokens"], "token_ids": trace.get("token_ids")}

    def compare() -> dict:
        status, table, _ = client.predict(**form, methods=[args.method], tree=0, api_name="/compare")
        rows = table_rows(table)
        if args.method not in rows or "plain" not in rows:
            raise RuntimeError(f"/compare gave no rows for plain and {args.method}: {status}")
        return {"spec": float(rows[args.method]["tok/s"]), "plain": float(rows["plain"]["tok/s"]),
                "tokens": int(rows[args.method]["new tokens"]), "token_ids": None}

    ways = {"library": library, "speculate": speculate, "run": run, "compare": compare}
    for name, way in ways.items():  # first calls (graphs, kernels, the app's model load) in no measured run
        way()
    began = time.monotonic()
    cost = client.predict(target="default", api_name="/cost_curve")
    cost_seconds = time.monotonic() - began

    repeats = []
    for r in range(args.repeats):
        order = WAYS[r % len(WAYS):] + WAYS[:r % len(WAYS)]
        measured = {}
        for name in order:
            measured[name] = ways[name]()
        outputs = {tuple(m["token_ids"]) for m in measured.values() if m["token_ids"] is not None}
        repeats.append({"order": order, "same_output": len(outputs) == 1,
                        **{f"{w}_{k}_tps": measured[w][k] for w in WAYS for k in ("spec", "plain")},
                        **{f"{w}_tokens": measured[w]["tokens"] for w in WAYS}})
        print(f"repeat {r}: " + " | ".join(f"{w} spec {measured[w]['spec']:.1f} plain {measured[w]['plain']:.1f}"
                                           for w in WAYS), flush=True)

    def median(key):
        return statistics.median(row[key] for row in repeats)

    return {
        "device": torch.cuda.get_device_name() if target.device.type == "cuda" else str(target.device),
        "dtype": str(target.dtype).replace("torch.", ""), "method": args.method, "gamma": args.gamma,
        "max_new_tokens": args.max_new_tokens, "prompt": args.prompt, "repeats_count": len(repeats),
        "same_output_everywhere": all(row["same_output"] for row in repeats),
        "median_tokens_per_second": {f"{w} {k}": median(f"{w}_{k}_tps") for w in WAYS for k in ("spec", "plain")},
        "median_ratio_app_over_library": {f"{w} {k}": statistics.median(row[f"{w}_{k}_tps"] / row[f"library_{k}_tps"]
                                                                         for row in repeats)
                                          for w in WAYS[1:] for k in ("spec", "plain")},
        "median_speedup": {w: statistics.median(row[f"{w}_spec_tps"] / row[f"{w}_plain_tps"] for row in repeats)
                           for w in WAYS},
        "cost_curve": {"seconds": cost_seconds, "status": str(cost[0])[:300]},
        "repeats": repeats,
    }


if __name__ == "__main__":
    sys.exit(main())
