"""What the UI costs the engine: tokens/s of the same runs headless and with the app streaming them.

    python -m specviz.ui.overhead --rounds 2 --max-new-tokens 96 [--method ngram] [--out runs/ui_overhead.json]

One process serves the app (the model loaded once) and runs the headless runs; a second process is the user,
a gradio_client that submits each prompt to /run and reads every streamed update (as a browser would). The
two kinds of run alternate, prompt by prompt, in both orders, so that drift on a shared machine falls on
both. Speeds are the engine's own (wall time from its first to its last step): in the app that wall time
includes everything the UI did meanwhile.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--method", default="ngram")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import torch

    from ..api import encode, make_proposer, run_once
    from ..models import load_model
    from ..proposers import PlainProposer
    from ..settings import DecodeSettings
    from .app import build_demo, example_prompts, launch

    target = load_model("default")
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma)
    demo = build_demo()
    _, url, _ = launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    client = subprocess.Popen([sys.executable, "-c", CLIENT, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)

    def ui_run(prompt: str) -> dict:
        client.stdin.write(json.dumps(dict(
            prompt=prompt, method=args.method, target="default", draft="none", gamma=args.gamma, temperature=0,
            top_p=1, max_new_tokens=args.max_new_tokens, seed=0, compare_plain=True, step_mode=False)) + "\n")
        client.stdin.flush()
        reply = json.loads(client.stdout.readline())
        trace = json.loads(open(reply["trace"]).read())
        return {"spec_tps": trace["metrics"]["tokens_per_second"], "plain_tps": trace["plain"]["tokens_per_second"],
                "tokens": trace["metrics"]["new_tokens"], "updates": reply["updates"], "token_ids": trace["token_ids"]}

    def headless_run(prompt: str) -> dict:
        ids = encode(target, prompt)
        plain = run_once(target, PlainProposer(), ids, settings, prompt)
        spec = run_once(target, make_proposer(args.method, target), ids, settings, prompt)
        return {"spec_tps": spec.metrics.tokens_per_second, "plain_tps": plain.metrics.tokens_per_second,
                "tokens": spec.metrics.new_tokens, "token_ids": spec.token_ids}

    prompts = example_prompts()
    ui_run(prompts[0])  # warm both paths: first-call costs land in no measured run
    headless_run(prompts[0])
    rows = []
    for round_index in range(args.rounds):
        for i, prompt in enumerate(prompts):
            ui_first = (i + round_index) % 2 == 0
            first, second = (ui_run, headless_run) if ui_first else (headless_run, ui_run)
            a, b = first(prompt), second(prompt)
            ui, headless = (a, b) if ui_first else (b, a)
            assert ui["token_ids"] == headless["token_ids"], "the app and the library disagree on the output"
            row = {"round": round_index, "prompt": prompt[:60], "tokens": ui["tokens"], "updates": ui["updates"],
                   "ui_spec_tps": ui["spec_tps"], "headless_spec_tps": headless["spec_tps"],
                   "ui_plain_tps": ui["plain_tps"], "headless_plain_tps": headless["plain_tps"]}
            rows.append(row)
            print(f"{row['prompt'][:40]:40s} {row['tokens']:4d} tok  {row['updates']:3d} updates  spec "
                  f"{row['headless_spec_tps']:6.1f} headless {row['ui_spec_tps']:6.1f} app   plain "
                  f"{row['headless_plain_tps']:6.1f} headless {row['ui_plain_tps']:6.1f} app", flush=True)
    client.stdin.close()
    client.wait(30)
    demo.close()

    def ratio(kind):
        return statistics.median(r[f"ui_{kind}_tps"] / r[f"headless_{kind}_tps"] for r in rows)

    summary = {"device": str(target.device), "threads": torch.get_num_threads(), "load_average": os.getloadavg(),
               "method": args.method, "max_new_tokens": args.max_new_tokens, "runs": len(rows),
               "median_ratio_app_over_headless": {"speculative": ratio("spec"), "plain": ratio("plain")},
               "mean_tps": {k: statistics.fmean(r[k] for r in rows) for k in
                            ("headless_spec_tps", "ui_spec_tps", "headless_plain_tps", "ui_plain_tps")}}
    print(json.dumps(summary, indent=1))
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as handle:
            json.dump({"summary": summary, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
