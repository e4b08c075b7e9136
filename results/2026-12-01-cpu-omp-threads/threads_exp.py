"""Plain decoding through the engine with 2 and then 1 intra-op threads, alternating, under whatever load there is."""
import sys, time, os
import torch
from specviz.api import encode, run_once
from specviz.models import DEFAULT_MODEL
from specviz.proposers import PlainProposer
from specviz.settings import DecodeSettings
from specviz.ui import live
from specviz.ui.app import example_prompts
target = live.load_target(DEFAULT_MODEL)
prompt = example_prompts()[0]
settings = DecodeSettings(max_new_tokens=int(sys.argv[1]), gamma=4)
ids = encode(target, prompt)
run_once(target, PlainProposer(), ids, settings)
for r in range(int(sys.argv[2])):
    for n in (2, 1):
        torch.set_num_threads(n)
        t = time.perf_counter(); c0 = time.process_time()
        res = run_once(target, PlainProposer(), ids, settings)
        print(f"threads {n}: {res.metrics.new_tokens / res.metrics.wall_seconds:.2f} tok/s, cpu {time.process_time()-c0:.2f} s in {time.perf_counter()-t:.2f} s; load {os.getloadavg()[0]:.1f}", flush=True)
