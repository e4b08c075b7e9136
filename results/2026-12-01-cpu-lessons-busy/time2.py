import sys, time, os
import torch
from specviz import lessons, load_model
from specviz.lessons import exactness
from specviz.lessons.catalogue import SETTINGS
import specviz; print(specviz.__file__, torch.get_num_threads())
target = load_model("default")
s = SETTINGS["exact"]
t = time.perf_counter()
ids = exactness.prompt_ids(target, s["prompt"], False)
from specviz.settings import DecodeSettings
settings = DecodeSettings(max_new_tokens=2, gamma=1, temperature=0.7, stop_at_eos=False).validate()
e = exactness.second_token_probs(target, ids, settings)
print("second_token_probs", round(time.perf_counter()-t,1), len(e), os.getloadavg()[0], flush=True)
t = time.perf_counter()
for i, r in enumerate(exactness.distribution(target, s["prompt"], s["method"], 30, 0.7)):
    print(i, r.plain.runs, r.speculative.runs, r.wrong.runs, round(time.perf_counter()-t,1), os.getloadavg()[0], flush=True)
