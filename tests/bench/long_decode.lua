-- seer side of `make bench`'s long-context decode: greedy decode of N tokens after an L-token
-- prompt, timed from the first new token to the last (the prompt's prefill left out), so the
-- attention over a long key/value cache shows beside the weights' read. Prints: L tok_s.
-- Usage: seer tests/bench/long_decode.lua MODEL THREADS L N
-- SEER_BENCH_PRECISION=fast: bf16 weights against activations rounded to bf16 (and a bf16 KV cache)
local path, threads, L, n = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
assert(path and threads and L and n and L >= 1 and n >= 2, "usage: seer tests/bench/long_decode.lua MODEL THREADS L N (N >= 2)")
local model = seer.model.load(path, { threads = threads, tokenizer = false,
                                      precision = os.getenv("SEER_BENCH_PRECISION") ~= "" and os.getenv("SEER_BENCH_PRECISION") or nil })
local prompt = { 1 }
for i = 2, L do prompt[i] = ((i - 1) * 7919) % 31000 + 3 end -- llamacpp_peer.py's LONG_CONTEXT prompt
model:generate({ 1, 2, 3 }, { max_new_tokens = 2, min_new_tokens = 2 }) -- warm-up: pages the weights in
local first, last, k = nil, nil, 0
model:generate(prompt, { max_new_tokens = n, min_new_tokens = n, stream = function()
  k = k + 1
  if k == 1 then first = seer.now() else last = seer.now() end
end })
assert(k == n, ("long_decode: %d tokens streamed, %d asked"):format(k, n))
print(("%d %.1f"):format(L, (n - 1) / (last - first)))
