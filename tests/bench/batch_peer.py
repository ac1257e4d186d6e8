"""transformers side of `make bench`'s batched decode (run with the project venv's python):
greedy decode of B different 5-token prompts in one batch (same prompts as batch_seer.lua, no
padding needed), throughput over the batch timed from the first new token to the last as
batch_seer.lua and llamacpp_peer.py time theirs (generate's streamer stamps each step):
B * (N - 1) / (last step - first step), best of BENCH_REPEAT. Prints one line per batch size:
B tok_s.
Usage: batch_peer.py MODEL THREADS N B1 [B2 ...]   (N >= 2)"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM

from peer_stamps import Stamps

path, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if n < 2:
    sys.exit("batch_peer.py: N (new tokens per sequence) must be 2 or more: decode is timed from the first new token to the last")
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
    """The time from the first new token to the last (new - 1 steps) for b prompts."""
    p = prompts(b)
    st = Stamps()
    out = model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=new, min_new_tokens=new,
                         do_sample=False, pad_token_id=0, streamer=st)
    steps = st.steps()
    if out.shape[1] - p.shape[1] != new or len(steps) != new:
        sys.exit(f"batch_peer.py: {len(steps)} steps streamed, {new} asked")
    return steps[-1] - steps[0]


with torch.no_grad():
    run(2, 2)
    for b in map(int, sys.argv[4:]):
        best = min(run(b, n) for _ in range(int(os.environ.get("BENCH_REPEAT", "1"))))
        print(f"{b} {b * (n - 1) / best:.1f}")
