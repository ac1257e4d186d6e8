-- seer.model from Lua on the real stories260K Llama: loading, config, forward against the
-- golden logits, greedy generation against the golden continuation, streaming, sampling
-- options and the errors a researcher can run into.
local T = require "testing"
local ffi = require "ffi"

local root = seer.script_dir() .. "/../fixtures/models/stories260K"
local golden = seer.json.decode(seer.read_file(root .. "/golden/golden.json"))
local model = seer.model.load(root)

T.test("model loads with its config and tokenizer", function()
  T.eq(model.config.model_type, "llama")
  T.eq(model.config.num_hidden_layers, 5)
  T.eq(model.config.num_key_value_heads, 4)
  T.eq(model.config.num_parameters, 260032)
  T.eq(model.config.dtype, "f32")
  T.eq(model.config.eos_token_ids, { 2 })
  T.eq(model.device, "cpu")
  T.contains(tostring(model), "Model(llama: 5 layers, d_model 64, 8 heads (4 kv, head_dim 8), vocab 512, f32, cpu, 260,032 params)")
end)

-- seer.core.model.load read its optional arguments after putting the model's userdata on the
-- stack: called with three, the device was the userdata ("bad argument #4").
T.test("seer.core.model.load takes fewer than its six arguments", function()
  local core = require "seer.core.model"
  for _, args in ipairs({ { root }, { root, 1 }, { root, 1, false }, { root, 1, false, "cpu" }, { root, 1, false, "cpu", false } }) do
    local c = core.load(unpack(args))
    T.eq(c:device(), "cpu", #args .. " arguments")
    T.eq(c:config().vocab_size, 512, #args .. " arguments")
  end
end)

T.test("forward matches the golden logits", function()
  local logits = model:forward(golden.prompt_ids_with_bos)
  T.eq({ logits:size(1), logits:size(2) }, { 5, 512 })
  local want = ffi.cast("const float *", seer.read_file(root .. "/golden/" .. golden.logits_file))
  local worst = 0
  local rows = logits:totable()
  for r = 1, 5 do
    for c = 1, 512 do
      worst = math.max(worst, math.abs(rows[r][c] - want[(r - 1) * 512 + (c - 1)]))
    end
  end
  T.ok(worst <= 1e-4, "max abs diff " .. worst)
end)

T.test("hidden_states' last entry is what the head reads (after the final norm, as transformers')", function()
  -- stories260K ties its head to the embeddings: logits = hidden[-1] E^T, against the float64
  -- reference's logits (independent of seer's head and norm code)
  local _, hidden = model:forward(golden.prompt_ids_with_bos, { hidden_states = true })
  T.eq(#hidden, 6)
  local E = seer.tensor.load(root .. "/model.safetensors")["model.embed_tokens.weight"]
  local logits = hidden[6]:matmul(E:t()):totable()
  local want = ffi.cast("const float *", seer.read_file(root .. "/golden/" .. golden.logits_file))
  local worst = 0
  for r = 1, 5 do
    for c = 1, 512 do worst = math.max(worst, math.abs(logits[r][c] - want[(r - 1) * 512 + (c - 1)])) end
  end
  T.ok(worst <= 1e-4, "max abs diff " .. worst)
end)

T.test("greedy generation reproduces the golden 120 tokens", function()
  local out = model:generate(golden.prompt_ids_with_bos, { max_new_tokens = golden.greedy_n })
  T.eq(out.ids, golden.greedy_new_ids)
  if model.tokenizer then
    T.eq(golden.prompt .. out.text, golden.greedy_text_including_prompt)
  end
end)

T.test("generate_iter and stream yield the same tokens as generate", function()
  local want = model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 12 }).ids
  local got = {}
  for id in model:generate_iter(golden.prompt_ids_with_bos, { max_new_tokens = 12 }) do got[#got + 1] = id end
  T.eq(got, want)
  local streamed = {}
  model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 12, stream = function(_, id) streamed[#streamed + 1] = id end })
  T.eq(streamed, want)
end)

T.test("streamed pieces add up to generate's text, stop strings included (the stop string never streams)", function()
  local plain = model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 30 }).text
  T.contains(plain, "Lily") -- the stories260K continuation names her; the cases below rest on it
  local at = plain:find("Lily", 1, true)
  for _, stop in ipairs({ { "Lily" }, { "named L" }, { "y", "Lily" }, { "zzz" }, { plain:sub(at, at + 6) .. "#" } }) do
    for _, max in ipairs({ 30, 12 }) do
      local pieces = {}
      local r = model:generate(golden.prompt_ids_with_bos, { max_new_tokens = max, stop = stop,
                                                              stream = function(p) pieces[#pieces + 1] = p end })
      T.eq(table.concat(pieces), r.text, "stream, stop " .. stop[1] .. ", max " .. max)
      for _, s in ipairs(stop) do T.eq(r.text:find(s, 1, true), nil) end
      local it = {}
      for _, p in model:generate_iter(golden.prompt_ids_with_bos, { max_new_tokens = max, stop = stop }) do it[#it + 1] = p end
      T.eq(table.concat(it), r.text, "generate_iter, stop " .. stop[1] .. ", max " .. max)
      local batch = model:generate_batch({ golden.prompt_ids_with_bos, { 1 } }, { max_new_tokens = max, stop = stop })
      T.eq(batch[1].text, r.text, "generate_batch, stop " .. stop[1] .. ", max " .. max)
    end
  end
  -- a held-back tail that never becomes the stop string is handed out with the last token
  local pieces = {}
  local r = model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 30, stop = { plain:sub(at, at + 3) .. "XYZ" },
                                                          stream = function(p) pieces[#pieces + 1] = p end })
  T.eq(r.text, plain)
  T.eq(table.concat(pieces), plain)
end)

T.test("a seed makes sampling reproducible; different seeds differ", function()
  local opts = { max_new_tokens = 30, temperature = 1.0, top_k = 50, top_p = 0.95, seed = 42 }
  local a = model:generate(golden.prompt_ids_with_bos, opts).ids
  local b = model:generate(golden.prompt_ids_with_bos, opts).ids
  T.eq(a, b)
  opts.seed = 43
  T.ne(model:generate(golden.prompt_ids_with_bos, opts).ids, a)
end)

T.test("a tiny temperature samples the greedy tokens; logits that are not finite stop generation with a message", function()
  local p = golden.prompt_ids_with_bos
  local greedy = model:generate(p, { max_new_tokens = 10 }).ids
  for _, t in ipairs({ 1e-30, 1e-38, 1e-40, 1e-45 }) do
    -- logit / temperature overflowed to infinity: the least likely token (511) every step
    T.eq(model:generate(p, { max_new_tokens = 10, temperature = t, seed = 3 }).ids, greedy, "temperature " .. t)
  end
  -- a hook that writes NaN: greedy took token 0 ("<unk>") at every step without a word
  local nan = { { "blocks.2.hook_resid_post", function(x) return x * (0 / 0) end } }
  for _, o in ipairs({ { max_new_tokens = 3 }, { max_new_tokens = 3, temperature = 0.8, seed = 1 } }) do
    T.raises(function() model:with_hooks(nan, function() return model:generate(p, o) end) end,
      "generate: the logits for new token 1 are not finite (NaN or infinity), so no token can be chosen", true)
  end
  -- from the third new token on, in the second sequence of a batch only
  local late = { { "blocks.4.hook_resid_post", function(x, hook)
    if hook.batch == 2 and hook.pos >= #p + 1 then return x * (1 / 0) end
  end } }
  T.raises(function() model:with_hooks(late, function() return model:generate_batch({ p, p }, { max_new_tokens = 5 }) end) end,
    "generate: the logits for new token 3 of sequence 2 are not finite", true)
  -- the forward pass itself returns what the model computed
  local logits = model:run_with_hooks(p, { fwd_hooks = nan })
  T.ok(logits:max() ~= logits:max(), "NaN logits")
end)

T.test("threads do not change results", function()
  local one = seer.model.load(root, { threads = 1 })
  local opts = { max_new_tokens = 20, temperature = 0.7, seed = 7 }
  T.eq(one:generate(golden.prompt_ids_with_bos, opts).ids, model:generate(golden.prompt_ids_with_bos, opts).ids)
end)

T.test("stop token ids end generation after the stop token", function()
  local ids = model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 20 }).ids
  local out = model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 20, stop = ids[3] })
  T.eq(#out.ids, 3)
  T.eq(out.ids[3], ids[3])
end)

T.test("more stop token ids than the engine holds are an error, never dropped unseen", function()
  -- the engine kept the model's end-of-sequence ids and 32 more and dropped the rest: a stop id
  -- past the 32nd never stopped anything (seer serve answered such requests as if it had)
  local ids = model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 20 }).ids
  local stop = {}
  for i = 1, 32 do stop[i] = (ids[3] + i) % model.config.vocab_size end
  stop[#stop + 1] = ids[3] -- the 33rd: the one that would stop it
  T.raises(function() model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 20, stop = stop }) end,
           "at most 32 stop token ids, got 33", true)
  -- 32 work, the last of them included
  table.remove(stop, 1)
  T.eq(#model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 20, stop = stop }).ids, 3)
  T.eq(require("seer.model").MAX_STOP_IDS, 32)
end)

T.test("min_new_tokens keeps stop tokens from ending generation early", function()
  local ids = model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 20 }).ids
  local out = model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 20, stop = ids[3], min_new_tokens = 5 })
  T.ok(#out.ids >= 5, "generated " .. #out.ids)
  T.ne(out.ids[3], ids[3], "the stop token was suppressed at step 3")
end)

T.test("max_new_tokens = 0 generates nothing", function()
  T.eq(model:generate(golden.prompt_ids_with_bos, { max_new_tokens = 0 }).ids, {})
end)

T.test("errors name the problem", function()
  T.raises(function() seer.model.load("/nonexistent/model") end, "/nonexistent/model is not a model directory", true)
  T.raises(function() seer.model.load("nobody/nothing") end, "not in the Hugging Face cache", true)
  T.raises(function() seer.model.load(root, { devcie = "cpu" }) end, "unknown option 'devcie'; valid options: device, dtype", true)
  T.raises(function() seer.model.load(root, { device = "tpu" }) end, "unknown device 'tpu'", true)
  T.raises(function() seer.model.load(root, { dtype = "bf16" }) end, "the weights are f32", true)
  T.raises(function() model:generate(golden.prompt_ids_with_bos, { max_new_token = 3 }) end, "unknown option 'max_new_token'", true)
  T.raises(function() model:generate({}, {}) end, "the prompt has no tokens", true)
  T.raises(function() model:generate({ 1, 9999 }, { max_new_tokens = 1 }) end, "token id 9999 at position 1 is outside the vocabulary", true)
  T.raises(function() model:forward({ 1, "x" }) end, "element 2 is a string", true)
  T.raises(function() model:forward({ { 1, 2 }, {} }) end, "forward: sequence 2 has no tokens", true)
  -- an empty input named the C forward ("forward: empty token list") at a line inside seer, or
  -- with no line at all (run_with_hooks); now the method and the caller's line
  for _, c in ipairs({
    { function() return model:forward({}) end, "forward: the input has no tokens" },
    { function() return model:run_with_cache({}) end, "run_with_cache: the input has no tokens" },
    { function() return model:run_with_cache({ { 1, 2 }, {} }) end, "run_with_cache: sequence 2 has no tokens" },
    { function() return model:run_with_hooks({}, { fwd_hooks = {} }) end, "run_with_hooks: the input has no tokens" },
    { function() return model:generate({}) end, "generate: the prompt has no tokens" },
  }) do
    local ok, err = pcall(function() local r = c[1](); return r end)
    T.eq(ok, false)
    T.contains(err, "test_model.lua:")
    T.contains(err, c[2])
  end
  T.raises(function() model:forward({ { 1, 2 }, "Once" }) end, "forward: sequence 2 is a string; a batch is a list of token-id lists", true)
  -- an empty stop string ended generation before its first token; a stop list with a hole dropped
  -- what followed it; a message list said "element 1 is table"
  T.raises(function() model:generate("Once", { max_new_tokens = 3, stop = { "." , "" } }) end, "generate: a stop string must not be empty", true)
  T.raises(function() model:generate("Once", { max_new_tokens = 3, stop = { [1] = ".", [3] = "!" } }) end,
           "generate: stop: entry 2 is missing (the list has a hole before entry 3)", true)
  T.raises(function() model:generate({ { role = "user", content = "hi" } }, { max_new_tokens = 3 }) end,
           "generate: the prompt is a list of chat messages; render it first: model.tokenizer:apply_chat_template", true)
  local bare = seer.model.load(root, { tokenizer = false })
  T.raises(function() bare:generate("Once", {}) end, "needs a tokenizer", true)
end)

T.test("generation options: a NaN, an infinity, a fraction or a value out of range is refused by name", function()
  local p = golden.prompt_ids_with_bos
  local bad = {
    { { temperature = 0 / 0 }, "temperature must be a finite number >= 0 (0 = greedy), got nan" },
    { { temperature = 1 / 0 }, "temperature must be a finite number >= 0 (0 = greedy), got inf" },
    { { temperature = -1 }, "temperature must be a finite number >= 0" },
    { { top_p = 1.5 }, "top_p must be a finite number from 0 to 1 (1 = off), got 1.5" },
    { { top_p = 0 / 0 }, "top_p must be a finite number from 0 to 1 (1 = off), got nan" },
    { { min_p = -0.1 }, "min_p must be a finite number from 0 to 1 (0 = off), got -0.1" },
    { { repetition_penalty = 0 }, "repetition_penalty must be a finite number > 0 (1 = off), got 0" },
    { { repetition_penalty = 1 / 0 }, "repetition_penalty must be a finite number > 0 (1 = off), got inf" },
    { { top_k = 1.5 }, "top_k must be a whole number from 0 to 2147483647, got 1.5" },
    { { seed = 0 / 0 }, "seed must be a whole number" },
    { { seed = 2 ^ 60 }, "seed must be a whole number" },
    { { max_new_tokens = 1 / 0 }, "max_new_tokens must be a whole number from 0 to 2147483647, got inf" },
    { { max_new_tokens = 2 ^ 31 }, "max_new_tokens must be a whole number from 0 to 2147483647, got 2147483648" },
    { { min_new_tokens = -1 }, "min_new_tokens must be a whole number from 0 to 2147483647, got -1" },
    { { min_new_tokens = 2.5 }, "min_new_tokens must be a whole number" },
    { { stop = 2 ^ 32 + 2 } , "stop token id 4294967298 is outside the vocabulary [0, 512)" },
    { { stop = { 1.5 } }, "stop token ids must be whole numbers, got 1.5" },
  }
  for _, case in ipairs(bad) do
    case[1].max_new_tokens = case[1].max_new_tokens or 2
    T.raises(function() model:generate(p, case[1]) end, "generate: " .. case[2], true)
    T.raises(function() model:generate_batch({ p, p }, case[1]) end, "generate_batch: prompt 1: " .. case[2], true)
  end
  T.raises(function() model:generate({ 1, 2.5 }, {}) end, "token ids must be integers; element 2 is 2.5", true)
  -- the C generator checks them again for code that reaches it without the Lua layer (a cast of
  -- NaN or of a number out of an integer's range is undefined behaviour in C)
  local c = model._c
  T.raises(function() c:generator({ 1, 2 }, { temperature = 0 / 0 }) end, "generate: temperature must be a finite number", true)
  T.raises(function() c:generator({ 1, 2 }, { top_k = 1 / 0 }) end, "generate: top_k must be a whole number from 0 to 2147483647, got inf", true)
  T.raises(function() c:generator({ 1, 2 }, { seed = 0 / 0 }) end, "generate: seed must be a whole number, got nan", true)
  T.raises(function() c:generator({ 1, 2 }, { max_new_tokens = 2 ^ 40 }) end, "generate: max_new_tokens must be a whole number", true)
  T.raises(function() c:generator({ 1, 2 ^ 40 }, {}) end, "token ids: element 2 must be a whole number from -2147483648 to 2147483647", true)
  -- top_p = 0 keeps the most likely token alone, as transformers' top-p does (min_tokens_to_keep = 1)
  local greedy = model:generate(p, { max_new_tokens = 8 }).ids
  T.eq(model:generate(p, { max_new_tokens = 8, temperature = 1, top_p = 0, seed = 5 }).ids, greedy)
  -- seeds are exact integers (they went through a float before: 2^24 + 1 gave 2^24's samples)
  local a = model:generate(p, { max_new_tokens = 12, temperature = 1.5, seed = 2 ^ 24 }).ids
  local b = model:generate(p, { max_new_tokens = 12, temperature = 1.5, seed = 2 ^ 24 + 1 }).ids
  T.ne(table.concat(a, ","), table.concat(b, ","), "neighbouring seeds give different samples")
end)

T.test("generate_batch checks every prompt before it runs any, and refuses a list with holes", function()
  local p = golden.prompt_ids_with_bos
  local steps = 0
  local count = { { "blocks.0.hook_resid_post", function() steps = steps + 1 end } }
  -- prompt 3 is bad; with one sequence at a time, prompts 1 and 2 used to run to the end before
  -- prompt 3 failed and their results were lost
  T.raises(function()
    model:generate_batch({ p, p, { 1, 9999 } }, { max_new_tokens = 4, max_batch = 1, per_sequence = { [1] = { hooks = count } } })
  end, "generate_batch: prompt 3: token id 9999 at position 1 is outside the vocabulary [0, 512)", true)
  T.eq(steps, 0, "no forward pass ran")
  T.raises(function() model:generate_batch({ p, p }, { max_new_tokens = 2, per_sequence = { [2] = { top_p = 2 } } }) end,
    "generate_batch: prompt 2: top_p must be a finite number from 0 to 1", true)
  T.raises(function() model:generate_batch({ p, p }, { max_new_tokens = 2, per_sequence = { [2] = 5 } }) end,
    "generate_batch: per_sequence[2] must be a table of options", true)
  T.raises(function() model:generate_batch({ [1] = p, [3] = p }, { max_new_tokens = 2 }) end,
    "generate_batch: prompt 2 is missing (the list has a hole before prompt 3)", true)
  T.raises(function() model:generate_batch({ p, x = p }, { max_new_tokens = 2 }) end, "generate_batch: prompts must be a list; it has a key x", true)
  T.raises(function() model:forward({ [1] = { 1, 2 }, [3] = { 1 } }) end, "forward: sequence 2 is missing (the list has a hole before sequence 3)", true)
  T.raises(function() model:run_with_cache({ [1] = { 1, 2 }, [3] = { 1 } }) end, "run_with_cache: sequence 2 is missing", true)
end)

T.test("a hub id resolves through the Hugging Face cache layout", function()
  local home = T.tmpdir()
  local repo = home .. "/hub/models--tiny--stories"
  os.execute(("mkdir -p '%s/refs' '%s/snapshots/abc123'"):format(repo, repo))
  seer.write_file(repo .. "/refs/main", "abc123\n")
  for _, f in ipairs({ "config.json", "model.safetensors", "generation_config.json" }) do
    os.execute(("cp '%s/%s' '%s/snapshots/abc123/%s'"):format(root, f, repo, f)) -- a copy: a link out of the folder is refused
  end
  local script = ("local m = seer.model.load('tiny/stories') io.write(m.path, ' ', m.config.num_parameters)")
  local p = io.popen(("HF_HOME='%s' '%s' -e \"%s\" 2>&1"):format(home, arg[-1], script))
  local out = p:read("*a")
  p:close()
  T.eq(out, repo .. "/snapshots/abc123 260032")
end)

T.test("a sharded checkpoint (model.safetensors.index.json) loads and gives the same logits", function()
  local tensor = require "seer.tensor"
  local d = T.tmpdir()
  local all = tensor.load(root .. "/model.safetensors")
  local names = {}
  for name in pairs(all) do names[#names + 1] = name end
  table.sort(names)
  local shards, weight_map = { {}, {} }, {}
  for i, name in ipairs(names) do
    local s = i <= #names / 2 and 1 or 2
    shards[s][name] = all[name]
    weight_map[name] = ("model-%05d-of-00002.safetensors"):format(s)
  end
  tensor.save(d .. "/model-00001-of-00002.safetensors", shards[1])
  tensor.save(d .. "/model-00002-of-00002.safetensors", shards[2])
  seer.write_file(d .. "/model.safetensors.index.json", seer.json.encode({ metadata = { total_size = 1040128 }, weight_map = weight_map }))
  seer.write_file(d .. "/config.json", seer.read_file(root .. "/config.json"))
  local sharded = seer.model.load(d, { tokenizer = false })
  T.eq(sharded.config.num_parameters, 260032)
  local a = sharded:forward(golden.prompt_ids_with_bos)
  local b = model:forward(golden.prompt_ids_with_bos)
  T.eq((a - b):abs():max(), 0)
  -- A shard that the index names but that is missing is an error naming it.
  os.remove(d .. "/model-00002-of-00002.safetensors")
  T.raises(function() seer.model.load(d, { tokenizer = false }) end, "model-00002-of-00002.safetensors", true)
end)

T.test("logits are bit-identical whatever the thread count, on both kernel paths", function()
  local one = seer.model.load(root, { threads = 1, tokenizer = false })
  local two = seer.model.load(root, { threads = 2, tokenizer = false })
  T.ok(one.config.gemm_min_tokens >= 16, "config.gemm_min_tokens: " .. tostring(one.config.gemm_min_tokens))
  local long = {}
  -- from config.gemm_min_tokens tokens: the prefill GEMM path; 40 (below it on CPUs where the
  -- blocked kernel runs short prompts): the blocked kernel
  for i = 1, one.config.gemm_min_tokens + 3 do long[i] = (i * 37) % 500 + 3 end
  T.eq((one:forward(long) - two:forward(long)):abs():max(), 0)
  local mid = {}
  for i = 1, 40 do mid[i] = long[i] end
  T.eq((one:forward(mid) - two:forward(mid)):abs():max(), 0)
  T.eq((one:forward({ 1, 2, 3 }) - two:forward({ 1, 2, 3 })):abs():max(), 0) -- the register-blocked path
end)

-- The CUDA side as a user sees it without a GPU (a child seer with SEER_LIBCUDA pointing
-- nowhere, so the answer does not depend on this machine): devices() says why there are none,
-- `seer model info --devices` prints it, and device = "cuda" runs on the CPU after one line.
T.test("cuda without a driver: devices() explains, load falls back to the CPU", function()
  local function sh(cmd)
    local p = io.popen("SEER_LIBCUDA=/nonexistent/libcuda.so.1 " .. cmd .. " 2>&1")
    local out = p:read("*a")
    p:close()
    return out
  end
  local seer_bin = arg[-1]
  local out = sh(("'%s' -e \"local l, why = seer.model.devices() print(#l, why)\""):format(seer_bin))
  T.eq(out, "0\tno NVIDIA driver (/nonexistent/libcuda.so.1 could not be loaded)\n")
  T.eq(sh(("'%s' model info --devices"):format(seer_bin)),
    "no CUDA devices: no NVIDIA driver (/nonexistent/libcuda.so.1 could not be loaded)\n")
  out = sh(("'%s' -e \"local m = seer.model.load('%s', {device = 'cuda:1'}) print(m.device, m:generate('Once', {max_new_tokens = 3}).text ~= nil)\""):format(seer_bin, root))
  T.eq(out, "seer: cuda:1: no NVIDIA driver (/nonexistent/libcuda.so.1 could not be loaded); running on the CPU\ncpu\ttrue\n")
  T.raises(function() seer.model.load(root, { device = "cuda:x" }) end, "unknown device 'cuda:x'", true)
end)

-- `seer model info`: the dimensions a user sizes a run by, the KV cache among them (5 layers x 2
-- x 4 key/value heads x 8 dims x 4 bytes = 1,280 bytes a token; 512 tokens: 640 KiB); a bf16
-- parity model also says what precision = "fast" would keep where this CPU has its kernels.
T.test("seer model info prints the dimensions and what a KV cache takes", function()
  local function sh(cmd)
    local p = io.popen(cmd .. " 2>&1")
    local out = p:read("*a")
    p:close()
    return out
  end
  local out = sh(("'%s' model info '%s'"):format(arg[-1], root))
  T.ok(out:find("layers:            5\n", 1, true), out)
  T.ok(out:find("attention heads:   8 query, 4 key/value, head_dim 8\n", 1, true), out)
  T.ok(out:find("KV cache:          1.3 KiB a token, 640.0 KiB for the 512-token context (f32)\n", 1, true), out)
  local bf = sh(("'%s' model info '%s'"):format(arg[-1], seer.script_dir() .. "/../parity/models/llama_bf16"))
  T.eq(bf:find("in bf16 with --precision fast", 1, true) ~= nil, require("seer.core.model").fast_kind() ~= nil, bf)
end)

T.test("errors in a model method's arguments name the caller's line, not seer's", function()
  local model = seer.model.load(seer.script_dir() .. "/../fixtures/models/stories260K")
  local here = debug.getinfo(1, "S").short_src -- this file, as the error positions spell it
  local function at(f)
    local ok, err = pcall(f)
    T.ok(not ok, "an error")
    return (tostring(err):match("^(.-):%d+: ")), err
  end
  local cases = {
    function() local r = model:generate("Once", { max_new_token = 5 }) return r end,
    function() local r = model:generate_batch({ "Once" }, { max_new_token = 5 }) return r end,
    function() local r = model:generate_iter("Once", { max_new_token = 5 }) return r end,
    function() local r = model:run_with_cache("Once", { names = { "nonexistent" } }) return r end,
    function() local r = model:run_with_cache("Once", { names = "[" }) return r end,
    function() local r = model:run_with_hooks("Once", { fwd_hooks = { { "nonexistent", function(a) return a end } } }) return r end,
    function() local r = model:with_hooks({ { "nonexistent", function(a) return a end } }, function() end) return r end,
    function() local r = model:add_hook("nonexistent", function(a) return a end) return r end,
    function() local r = model:forward("Once", { hidden = true }) return r end,
    function()
      local r = model:generate_batch({ "Once", "The" }, { per_sequence = { [2] = { hooks = { { "nonexistent", function(a) return a end } } } } })
      return r
    end,
  }
  for i, f in ipairs(cases) do
    local file, err = at(f)
    T.eq(file, here, ("case %d: %s"):format(i, tostring(err)))
    T.ok(not tostring(err):find("lua/seer/", 1, true), ("case %d names seer's source: %s"):format(i, tostring(err)))
  end
end)
