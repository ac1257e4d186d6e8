"""transformers side of `make bench`'s model benchmark (run with the project venv's python).
Prints one line: load_ms prefill_tok_s decode_tok_s (same workload as model_seer.lua: decode
timed from the first new token to the last, the prompt's pass left out)."""
import json
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

from peer_stamps import Stamps

path, threads, prefill_n, decode_n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if decode_n < 2:
    sys.exit("model_peer.py: DECODE must be at least 2 (decode is timed from the first new token to the last)")
torch.set_num_threads(threads)
t0 = time.perf_counter()
# Like with like: the checkpoint's own dtype (a bf16 checkpoint runs in bf16, as seer keeps its
# weights in bf16), eager attention.
with open(os.path.join(path, "config.json")) as f:
    cfg = json.load(f)
dtype = torch.bfloat16 if (cfg.get("dtype") or cfg.get("torch_dtype")) == "bfloat16" else torch.float32
model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")
model.eval()
load_ms = (time.perf_counter() - t0) * 1000
vocab = model.config.vocab_size
ids = torch.tensor([[1] + [(i * 7919) % (vocab - 3) + 3 for i in range(prefill_n - 1)]])
with torch.no_grad():
    model(ids[:, :4])  # warm-up: pages the weights in
    best = 1e9
    for _ in range(int(os.environ.get("BENCH_REPEAT", "3"))):
        t = time.perf_counter()
        model(ids)
        best = min(best, time.perf_counter() - t)
    prefill = prefill_n / best
    prompt = torch.tensor([[1, 403, 407, 261, 378]]) if vocab == 512 else ids[:, :5]
    model.generate(prompt, max_new_tokens=8, do_sample=False)

    st = Stamps()
    out = model.generate(prompt, max_new_tokens=decode_n, min_new_tokens=decode_n, do_sample=False, streamer=st)
    new = st.steps()
    if out.shape[1] - prompt.shape[1] != decode_n or len(new) != decode_n:
        sys.exit(f"model_peer.py: {len(new)} tokens streamed, {decode_n} asked")
    decode = (decode_n - 1) / (new[-1] - new[0])
print(f"{load_ms:.1f} {prefill:.1f} {decode:.1f}")
