-- Prefill throughput at several prompt lengths: one forward of N tokens (best of 3) per length,
-- the way a sweep over short prompts runs them. Finds where a linear layer's GEMM path (from
-- model.config.gemm_min_tokens tokens) overtakes the per-token kernel on a CPU: run it twice,
-- the second time with SEER_GEMM_MIN_TOKENS=100000 (every length on the per-token kernel).
-- Usage: seer tests/bench/prefill_lengths.lua MODEL THREADS N1 [N2 ...]
-- SEER_BENCH_PRECISION=fast as batch_seer.lua. Prints one line: "n=N T tok/s" per length.
local path, threads = arg[1], tonumber(arg[2])
if not (path and threads and tonumber(arg[3])) then
  io.stderr:write("usage: seer tests/bench/prefill_lengths.lua MODEL THREADS N1 [N2 ...]\n")
  os.exit(2)
end
local prec = os.getenv("SEER_BENCH_PRECISION")
local model = seer.model.load(path, { threads = threads, tokenizer = false, precision = prec ~= "" and prec or nil })
local vocab = model.config.vocab_size
model:forward({ 1, 2, 3, 4 }) -- warm-up: pages the weights in
local parts = { ("gemm_min_tokens %s:"):format(tostring(model.config.gemm_min_tokens)) }
for k = 3, #arg do
  local n = tonumber(arg[k])
  local ids = { 1 }
  for i = 1, n - 1 do ids[#ids + 1] = (i * 7919) % (vocab - 3) + 3 end
  local best = math.huge
  for _ = 1, 3 do
    local t = seer.now()
    model:forward(ids)
    best = math.min(best, seer.now() - t)
  end
  parts[#parts + 1] = ("n=%d %.1f tok/s"):format(n, n / best)
end
print(table.concat(parts, "  "))
