"""llama.cpp side of `make bench` (llama-cpp-python's bindings to the llama.cpp it built from
source, run with the project venv's python) on a GGUF conversion of the same checkpoint
(make_gguf.py), same thread count, same workloads as model_seer.lua and batch_seer.lua:
  line 1: load_ms prefill_tok_s decode_tok_s   (a PREFILL-token forward with logits for every
          position, best of BENCH_REPEAT; greedy decode of DECODE tokens after a 5-token prompt,
          timed from the first new token to the last, the prompt's pass left out, as
          model_seer.lua)
  then one line per batch size B: B tok_s      (B different 5-token prompts decoded together,
          one sequence id each; tokens/s over the batch for steps 2..N, the prefill left out)
  or, with LONG_CONTEXT=L set, only: L decode_tok_s   (greedy decode of DECODE tokens after an
          L-token prompt, timed from the first new token to the last, as long_decode.lua)
Usage: llamacpp_peer.py MODEL.gguf THREADS PREFILL DECODE [B ...]"""
import ctypes
import os
import sys
import time

import llama_cpp as L
import numpy as np

path, threads, prefill_n, decode_n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
batches = [int(b) for b in sys.argv[5:]]
L.llama_backend_init()
t0 = time.perf_counter()
mp = L.llama_model_default_params()
model = L.llama_model_load_from_file(path.encode(), mp)
if not model:
    sys.exit(f"llama.cpp could not load {path}")
load_ms = (time.perf_counter() - t0) * 1000
vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))


def context(n_ctx, n_seq, n_batch):
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx
    cp.n_batch = n_batch
    cp.n_ubatch = n_batch
    cp.n_seq_max = n_seq
    cp.n_threads = threads
    cp.n_threads_batch = threads
    cp.no_perf = True
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit("llama.cpp could not make a context")
    return ctx


def decode(ctx, batch, rows):  # rows: (token, pos, seq, want_logits)
    batch.n_tokens = len(rows)
    for i, (tok, pos, seq, lg) in enumerate(rows):
        batch.token[i] = tok
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = 1 if lg else 0
    rc = L.llama_decode(ctx, batch)
    if rc != 0:
        sys.exit(f"llama_decode failed ({rc})")


def argmax(ctx, i):
    return int(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(vocab,)).argmax())


long_n = int(os.environ.get("LONG_CONTEXT", "0"))
if long_n > 0:
    ctx = context(long_n + decode_n + 16, 1, 512)
    batch = L.llama_batch_init(512, 0, 1)
    ids = [1] + [(i * 7919) % 31000 + 3 for i in range(1, long_n)]  # long_decode.lua's prompt
    for c in range(0, long_n, 512):
        decode(ctx, batch, [(tok, c + p, 0, c + p == long_n - 1) for p, tok in enumerate(ids[c:c + 512])])
    pos, stamps = long_n, []
    for _ in range(decode_n):
        nxt = argmax(ctx, -1)
        stamps.append(time.perf_counter())
        decode(ctx, batch, [(nxt, pos, 0, True)])
        pos += 1
    print(f"{long_n} {(decode_n - 1) / (stamps[-1] - stamps[0]):.1f}")
    sys.exit(0)

ids = [1] + [(i * 7919) % (vocab - 3) + 3 for i in range(1, prefill_n)]
ctx = context(prefill_n + decode_n + 16, 1, prefill_n)
batch = L.llama_batch_init(prefill_n, 0, 1)
mem = L.llama_get_memory(ctx)
decode(ctx, batch, [(t, p, 0, True) for p, t in enumerate(ids[:4])])  # warm-up: pages the weights in
best = 1e9
for _ in range(int(os.environ.get("BENCH_REPEAT", "3"))):
    L.llama_memory_clear(mem, True)
    t = time.perf_counter()
    decode(ctx, batch, [(tok, p, 0, True) for p, tok in enumerate(ids)])
    best = min(best, time.perf_counter() - t)
prefill = prefill_n / best


def generate(n):
    """n greedy tokens after a 5-token prompt; the time of each token's choice."""
    L.llama_memory_clear(mem, True)
    prompt = ids[:5]
    decode(ctx, batch, [(tok, p, 0, p == len(prompt) - 1) for p, tok in enumerate(prompt)])
    pos, stamps = len(prompt), []
    for _ in range(n - 1):
        nxt = argmax(ctx, -1)  # the last row of the batch that asked for logits
        stamps.append(time.perf_counter())
        decode(ctx, batch, [(nxt, pos, 0, True)])
        pos += 1
    argmax(ctx, -1)
    stamps.append(time.perf_counter())
    return stamps


if decode_n < 2:
    sys.exit("llamacpp_peer.py: DECODE must be at least 2 (decode is timed from the first new token to the last)")
generate(8)
stamps = generate(decode_n)
dec = (decode_n - 1) / (stamps[-1] - stamps[0])
L.llama_batch_free(batch)
L.llama_free(ctx)
print(f"{load_ms:.1f} {prefill:.1f} {dec:.1f}")

for b in batches:
    n = decode_n
    ctx = context(((b * (n + 8) + 255) // 256) * 256, b, max(b * 5, 32))
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(max(b * 5, 32), 0, 1)
    prompts = [[1] + [(i * 7919 + j * 104729) % (vocab - 3) + 3 for j in range(1, 5)] for i in range(1, b + 1)]
    best = 1e9
    for _ in range(int(os.environ.get("BENCH_REPEAT", "1"))):
        L.llama_memory_clear(mem, True)
        decode(ctx, batch, [(tok, p, s, p == 4) for s, pr in enumerate(prompts) for p, tok in enumerate(pr)])
        nxt = [argmax(ctx, s * 5 + 4) for s in range(b)]
        pos = 5
        t = time.perf_counter()
        for _ in range(n - 1):
            decode(ctx, batch, [(nxt[s], pos, s, True) for s in range(b)])
            nxt = [argmax(ctx, s) for s in range(b)]
            pos += 1
        best = min(best, time.perf_counter() - t)
    print(f"{b} {b * (n - 1) / best:.1f}")
    L.llama_batch_free(batch)
    L.llama_free(ctx)
L.llama_model_free(model)
