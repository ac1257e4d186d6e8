-- seer side of `make bench`'s model benchmark: load time, prefill tokens/s (best of 3), greedy
-- decode tokens/s. Prints one line: load_ms prefill_tok_s decode_tok_s.
local path, threads, prefill_n, decode_n = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local t0 = seer.now()
local model = seer.model.load(path, { threads = threads, tokenizer = false })
local load_ms = (seer.now() - t0) * 1000
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
local t = seer.now()
local out = model:generate(prompt, { max_new_tokens = decode_n, min_new_tokens = decode_n })
local dt = seer.now() - t
print(("%.1f %.1f %.1f %d"):format(load_ms, prefill_n / best, #out.ids / dt, #out.ids))
