"""transformers side of `make bench`'s batched decode (run with the project venv's python):
greedy decode of B different 5-token prompts in one batch (same prompts as batch_seer.lua, no
padding needed), throughput over the batch without the prefill: B * (N - 1) / (time for N new
tokens - time for 1, the fastest of three runs), best of BENCH_REPEAT. Prints one line per batch size: B tok_s.
Usage: batch_peer.py MODEL THREADS N B1 [B2 ...]"""
import json
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

path, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
with open(os.path.join(path, "config.json")) as f:
    cfg = json.load(f)
dtype = torch.bfloat16 if (cfg.get("dtype") or cfg.get("torch_dtype")) == "bfloat16" else torch.float32
model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")
model.eval()
vocab = model.config.vocab_size


def prompts(b):
    return torch.tensor([[1] + [(i * 7919 + j * 104729) % (vocab - 3) + 3 for j in range(1, 5)] for i in range(1, b + 1)])


def run(b, new):
    p = prompts(b)
    t = time.perf_counter()
    out = model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=new, min_new_tokens=new,
                         do_sample=False, pad_token_id=0)
    dt = time.perf_counter() - t
    assert out.shape[1] - p.shape[1] == new
    return dt


with torch.no_grad():
    run(2, 2)
    for b in map(int, sys.argv[4:]):
        best = 1e9
        for _ in range(int(os.environ.get("BENCH_REPEAT", "1"))):
            # the one-token run's fastest of three, as tests/bench/batch_seer.lua (a pause in it
            # would count as decode time)
            one = min(run(b, 1) for _ in range(3))
            best = min(best, run(b, n) - one)
        print(f"{b} {b * (n - 1) / best:.1f}")
