#!/usr/bin/env bash
# On the GPU machine (one H200), the default model staged (docs/gpu.md), from the repository's root:
# source scripts/gpu_common.sh first. The first call ran at b8df883, the others at b8d81f9.
set -u
check() { timeout 270 python3 -m specviz check-exactness --device cuda --dtype float32 --samples 3000 "$@"; }
# 1. sampled exactness, float32, each with its control at 0.9 of the temperature (exactness.txt). At b8df883
#    EAGLE's tree with top-k passed on the device loop; Medusa with top-p fell back to the host loop on every
#    run there (Inductor failed on top-p's running mass in its compiled drafting) and was cut at 270 s
check --method eagle --gamma 4 --tree 15 --top-k 20
#    at b8d81f9 (STAGE=exactness PART=1 CHECK_SECONDS=190 bash scripts/gpu_device_drafters.sh), all on the device loop
check --method medusa --gamma 3 --top-p 0.9
check --method retrieval --gamma 8 --tree 15
check --method ngram --gamma 4 --top-k 50
check --method eagle --gamma 4
# 2. each method's CUDA graphs under torch.profiler: bfloat16, one prompt, 128 tokens (profile.txt, profile.json).
#    At b8df883 its "unprofiled" tok/s timed the run that captured the graphs and compiled the kernels: they mean
#    nothing, read only the kernels (the script times a run after that one from b8d81f9 on)
timeout 250 python3 -m scripts.graph_profile --methods plain,eagle:6:31,draft:4@0.5,medusa:4:31 --out $OUT/profile.json
# 3. a seed reproduces sampled runs through graphs, top-k and top-p among them, on the device loop (pytest.log)
timeout 230 python3 -m pytest -q tests/test_device_loop.py -k seed_reproduces
