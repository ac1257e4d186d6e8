-- seer side of `make bench`'s model benchmark: load time, prefill tokens/s (best of 3), greedy
-- decode tokens/s, timed from the first new token to the last (the prompt's pass left out; an
-- optional fifth argument is seer.model.load's `weights`, "memory" or "mapped"). Prints one line:
-- load_ms prefill_tok_s decode_tok_s new_tokens prefill_flops,
-- the last being the floating-point operations of one prefill forward (Llama-shaped models:
-- every linear layer and the LM head at 2 flops per multiply-add, and causal attention's
-- scores and weighted sums; norms, RoPE and softmax are left out, so the bound is generous).
local path, threads, prefill_n, decode_n, weights = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), arg[5]
local t0 = seer.now()
-- SEER_BENCH_PRECISION=fast: the activations rounded to bf16 in bf16 prefill (precision = "fast")
local model = seer.model.load(path, { threads = threads, tokenizer = false, weights = weights,
                                      precision = os.getenv("SEER_BENCH_PRECISION") ~= "" and os.getenv("SEER_BENCH_PRECISION") or nil })
local load_ms = (seer.now() - t0) * 1000
-- The model's prompt cache off (Model:prompt_cache): with it, a generate call after the warm-up
-- on the same prompt takes the prompt's KV rows and logits from the cache and skips its prefill,
-- so a decode timed with its prompt was N tokens in N - 1 forward passes (6% high at 32 tokens)
-- where llama.cpp's ran its prompt. Both sides now leave the prompt's pass out of the timing, and
-- the cache stays off so that every run does the same work (taken_guard checks it).
model:prompt_cache(0)
local check_taken = require("taken_guard")() -- fails the run if a timed run takes from a cache
local vocab = model.config.vocab_size
local ids = { 1 }
for i = 1, prefill_n - 1 do ids[#ids + 1] = (i * 7919) % (vocab - 3) + 3 end
model:forward({ ids[1], ids[2], ids[3], ids[4] }) -- warm-up: pages the weights in
local best = math.huge
for _ = 1, tonumber(os.getenv("BENCH_REPEAT") or "3") do
  local t = seer.now()
  model:forward(ids)
  best = math.min(best, seer.now() - t)
end
local prompt = vocab == 512 and { 1, 403, 407, 261, 378 } or { ids[1], ids[2], ids[3], ids[4], ids[5] }
model:generate(prompt, { max_new_tokens = 8 })
-- Decode is timed from the first new token to the last (decode_n - 1 steps), as long_decode.lua
-- and batch_seer.lua time theirs: the prompt's pass is a prefill, not a decode step, and a
-- 5-token prefill costs some 3 decode steps at bf16 on one thread (2026-12-01, Zen 4 VM), so
-- counting it made a 32-token round read ~7% under the decode rate the read bound is about.
local first, last, k = nil, nil, 0
local out = model:generate(prompt, { max_new_tokens = decode_n, min_new_tokens = decode_n, stream = function()
  k = k + 1
  if k == 1 then first = seer.now() else last = seer.now() end
end })
assert(k == decode_n and #out.ids == decode_n and last, ("model_seer: %d tokens streamed, %d asked (DECODE >= 2)"):format(k, decode_n))
local dt = (last - first) / (decode_n - 1)
check_taken()
local c = model.config
local h, L, I, V = c.hidden_size, c.num_hidden_layers, c.intermediate_size, c.vocab_size
local nh = c.num_attention_heads
local hd = c.head_dim or math.floor(h / nh)
local nkv = c.num_key_value_heads or nh
local per_token = 2 * L * (2 * h * nh * hd + 2 * h * nkv * hd + 3 * h * I) + 2 * h * V
local pairs = prefill_n * (prefill_n + 1) / 2
local flops = prefill_n * per_token + L * nh * hd * 4 * pairs
print(("%.1f %.1f %.1f %d %.0f"):format(load_ms, prefill_n / best, 1 / dt, #out.ids, flops))
