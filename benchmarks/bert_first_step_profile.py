"""cProfile of pipec's cold first BERT-base training step on the GPU (train_step.py's bert case),
with pipec's compile-time profile of it. Run it with empty pipec, Triton and Inductor caches:

    TRITON_CACHE_DIR=$(mktemp -d) PIPEC_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) \
        python benchmarks/bert_first_step_profile.py
    NO_WORKER_LAUNCHERS=1 ...    # the A/B of session 31: compile workers build no Triton launchers

Writes the cProfile (bert_first.prof) to $OUT (default /tmp); prints the profile's top functions.
Results: benchmarks/results/bert_first_step_profile*_h100_s31.txt.
"""
import cProfile
import json
import os
import pstats
import sys
import time

sys.path.insert(0, "benchmarks")
import torch
import train_step as ts
if os.environ.get("NO_WORKER_LAUNCHERS"):  # A/B: workers compile kernels only, as before session 30
    from pipec_runtime_cudagraph import compile_worker
    compile_worker.BOOT = ("import sys; sys.path[:0] = sys.argv[1:]\nimport pipec_runtime_cudagraph.compile_worker as w\n"
                           "w.build_launcher = lambda *a, **k: False\nw.main()")
step, session = ts.pipec_cuda_step("bert")
pr = cProfile.Profile()
t = time.perf_counter()
with ts.first_call_profile(session):
    pr.enable()
    step()
    torch.cuda.synchronize()
    pr.disable()
print("wall", round(time.perf_counter() - t, 2))
print(json.dumps(session.profile.to_dict(), indent=1))
out = os.environ.get("OUT", "/tmp")
pr.dump_stats(f"{out}/bert_first.prof")
st = pstats.Stats(pr)
st.sort_stats("cumulative").print_stats(90)
st.sort_stats("tottime").print_stats(40)
