-- toolkit.sae on data with known answers: activations built from a known sparse dictionary (the
-- SAE must find its directions), a set where one known feature is boosted (diff must rank it
-- first), save/load round trips, published layouts, and bad input.
local T = require "testing"
local SAE = require "toolkit.sae"
local tensor = seer.tensor

-- n rows of d dims, each the sum of 2 of k unit directions with positive weights, plus noise.
local function synthetic(n, d, k, seed, boost)
  local dirs = tensor.randn({ k, d }, { seed = seed })
  dirs = dirs / dirs:norm(2, 2, true)
  local u = tensor.rand({ n, 4 }, { seed = seed + 1 }):totable()
  local rows = {}
  for i = 1, n do
    local a = math.floor(u[i][1] * k) + 1
    local b = math.floor(u[i][2] * k) + 1
    if boost and u[i][4] < 0.5 then a = boost end
    rows[i] = dirs:select(1, a) * (1 + u[i][3]) + dirs:select(1, b) * (1 + u[i][4])
  end
  local x = tensor.stack(rows) + tensor.randn({ n, d }, { seed = seed + 2 }) * 0.01
  return x, dirs
end

local x, dirs = synthetic(2000, 32, 16, 7)
local sae = SAE.train(x, { features = 64, steps = 600, seed = 1 })

T.test("an SAE trained on a known sparse dictionary reconstructs it sparsely and recovers its directions", function()
  local s = sae:stats(x)
  T.ok(s.explained > 0.9, "explained " .. s.explained)
  T.ok(s.l0 < 8, "l0 " .. s.l0)
  -- every true direction has a decoder row pointing the same way
  local Wn = sae.W_dec / sae.W_dec:norm(2, 2, true)
  local cos = dirs:matmul(Wn:t())            -- [16, 64]
  local best = cos:max(2):totable()
  local recovered = 0
  for _, c in ipairs(best) do if c > 0.9 then recovered = recovered + 1 end end
  T.ok(recovered >= 14, ("%d of 16 directions recovered (cosine > 0.9)"):format(recovered))
end)

T.test("training is deterministic for a seed", function()
  local again = SAE.train(x, { features = 64, steps = 600, seed = 1 })
  T.eq(again.W_enc:totable(), sae.W_enc:totable())
  local other = SAE.train(x, { features = 64, steps = 50, seed = 2 })
  T.ne(other.W_enc:select(1, 1):totable(), sae.W_enc:select(1, 1):totable())
end)

T.test("diff ranks first the feature of the boosted direction", function()
  local a = synthetic(1000, 32, 16, 7)
  local b = synthetic(1000, 32, 16, 7, 5)        -- direction 5 in half the rows
  local top = SAE.diff(sae, a, b, 3)
  T.eq(#top, 3)
  T.ok(top[1].delta > 0 and top[1].mean_b > top[1].mean_a, seer.json.encode(top[1]))
  local w = sae.W_dec:select(1, top[1].feature + 1)
  local c = tensor.cosine_similarity(w, dirs:select(1, 5))
  T.ok(c > 0.9, "the top feature's direction has cosine " .. c .. " with the boosted one")
  local acts = SAE.top_activations(sae, b, nil, top[1].feature, 3)
  T.eq(#acts, 3)
  T.ok(acts[1].value >= acts[2].value and acts[2].value >= acts[3].value)
end)

T.test("save and load round-trip; published layouts load through names and transposes", function()
  local dir = T.tmpdir()
  sae:save(dir .. "/sae.safetensors")
  local back = SAE.load(dir .. "/sae.safetensors")
  T.eq(back:encode(x:narrow(1, 1, 5)):totable(), sae:encode(x:narrow(1, 1, 5)):totable())
  -- torch.nn.Linear layout: encoder.weight [m, d], decoder.weight [d, m]
  tensor.save(dir .. "/linear.safetensors", { ["encoder.weight"] = sae.W_enc:t():contiguous(), ["encoder.bias"] = sae.b_enc,
    ["decoder.weight"] = sae.W_dec:t():contiguous(), ["decoder.bias"] = sae.b_dec })
  local lin = SAE.load(dir .. "/linear.safetensors", { W_enc = "encoder.weight", b_enc = "encoder.bias", W_dec = "decoder.weight",
                                                       b_dec = "decoder.bias", transpose_enc = true, transpose_dec = true })
  T.eq(lin:encode(x:narrow(1, 1, 5)):totable(), sae:encode(x:narrow(1, 1, 5)):totable())
  T.raises(function() SAE.load(dir .. "/linear.safetensors") end, 'has no tensor "W_enc"', true)
  tensor.save(dir .. "/bad.safetensors", { W_enc = tensor.zeros(4, 8), b_enc = tensor.zeros(8), W_dec = tensor.zeros(8, 5), b_dec = tensor.zeros(4) })
  T.raises(function() SAE.load(dir .. "/bad.safetensors") end, "shapes do not fit an SAE", true)
end)

T.test("bad input says what is wrong", function()
  T.raises(function() SAE.train(tensor.zeros(10)) end, "must be a [n, d_model] tensor", true)
  T.raises(function() SAE.train(tensor.zeros(10, 4)) end, "the activations are all zero", true)
  T.raises(function() sae:encode(tensor.zeros(3, 7)) end, "activations have width 7, the SAE 32", true)
  -- options checked by name before any training (a NaN lr trained an SAE of NaNs)
  local x = tensor.randn({ 12, 4 }, { seed = 3 })
  T.raises(function() SAE.train(x, { lr = 0 / 0 }) end, "option 'lr' must be a finite number > 0, got nan", true)
  T.raises(function() SAE.train(x, { l1 = -1 }) end, "option 'l1' must be a finite number >= 0, got -1", true)
  T.raises(function() SAE.train(x, { features = 2.5 }) end, "option 'features' must be a whole number from 1, got 2.5", true)
  T.raises(function() SAE.train(x, { batch = 0 }) end, "option 'batch' must be a whole number from 1, got 0", true)
  T.raises(function() SAE.train(x, { steps = 1e300 }) end, "option 'steps' must be a whole number from 1", true)
  local bad = tensor.randn({ 12, 4 }, { seed = 4 })
  bad[5][2] = math.huge
  T.raises(function() SAE.train(bad, { steps = 2 }) end, "the activations hold NaN or infinite values", true)
  T.raises(function() SAE.diff(sae, tensor.randn({ 3, sae.d }), tensor.randn({ 3, sae.d }), 1.5) end, "sae.diff: k must be a whole number from 1", true)
  T.raises(function() SAE.top_activations(sae, tensor.randn({ 3, sae.d }), nil, sae.m) end,
           ("feature must be a 0-based feature index from 0 to %d, got %d"):format(sae.m - 1, sae.m), true)
end)

-- A tiny SAE written out by hand: d_model 4, 3 features, W_enc picks the first three coordinates.
local function tiny(dir, name, with_threshold, cfg)
  local W_enc = tensor.from({ { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 }, { 0, 0, 0 } })
  local t = { W_enc = W_enc, b_enc = tensor.from({ 0, 0.5, -1 }), W_dec = W_enc:t():contiguous(), b_dec = tensor.from({ 5, 0, 0, 0 }) }
  if with_threshold then t.threshold = tensor.from({ 0.5, 3, 0 }) end
  os.execute(("mkdir -p %q"):format(dir))
  tensor.save(dir .. "/" .. name, t)
  if cfg then
    local f = assert(io.open(dir .. "/cfg.json", "w"))
    f:write(cfg)
    f:close()
  end
  return dir .. "/" .. name
end

T.test("SAE.load: a JumpReLU threshold and SAELens's apply_b_dec_to_input are applied (they were ignored)", function()
  local dir = T.tmpdir()
  local x = tensor.from({ { 6, 2, 0.5, 0 }, { 0.2, 4, 3, 1 } })
  -- Gemma Scope's layout (a threshold, no cfg.json): z = relu(pre) * (pre > threshold), pre = x W_enc + b_enc
  -- row 1: pre = [6, 2.5, -0.5] -> [6, 0 (2.5 <= 3), 0]; row 2: pre = [0.2, 4.5, 2] -> [0 (0.2 <= 0.5), 4.5, 2]
  local jr = SAE.load(tiny(dir .. "/gs", "params.safetensors", true))
  T.eq(jr.apply_b_dec_to_input, false)
  T.eq(jr:encode(x):totable(), { { 6, 0, 0 }, { 0, 4.5, 2 } })
  -- SAELens folder: cfg.json says jumprelu with apply_b_dec_to_input: the input is x - b_dec first
  -- row 1: x - b_dec = [1, 2, 0.5, 0], pre = [1, 2.5, -0.5] -> [1, 0, 0]; row 2: [-4.8, 4, 3, 1] -> [0, 4.5, 2]
  local sl = SAE.load(tiny(dir .. "/sl", "sae_weights.safetensors", true,
    '{"architecture": "jumprelu", "apply_b_dec_to_input": true, "d_in": 4, "d_sae": 3, "normalize_activations": "none"}'))
  T.eq(sl.apply_b_dec_to_input, true)
  T.eq(sl:encode(x):totable(), { { 1, 0, 0 }, { 0, 4.5, 2 } })
  -- the option wins over cfg.json
  local off = SAE.load(dir .. "/sl/sae_weights.safetensors", { apply_b_dec_to_input = false })
  T.eq(off:encode(x):totable(), { { 6, 0, 0 }, { 0, 4.5, 2 } })
  -- SAELens names without a threshold or cfg.json: ReLU with SAELens's default apply_b_dec_to_input = true
  local std = SAE.load(tiny(dir .. "/std", "sae.safetensors", false))
  T.eq(std.apply_b_dec_to_input, true)
  T.eq(std:encode(x):totable(), { { 1, 2.5, 0 }, { 0, 4.5, 2 } })
  -- sae:save keeps the threshold and the setting: the same codes after a round trip
  sl:save(dir .. "/again.safetensors")
  local back = SAE.load(dir .. "/again.safetensors")
  T.eq(back.apply_b_dec_to_input, true)
  T.eq(back:encode(x):totable(), sl:encode(x):totable())
  -- a trained SAE round-trips without subtracting b_dec (it was trained that way)
  sae:save(dir .. "/trained.safetensors")
  T.eq(SAE.load(dir .. "/trained.safetensors").apply_b_dec_to_input, false)
  -- architectures toolkit.sae does not compute are refused, not encoded as ReLU
  tiny(dir .. "/topk", "sae_weights.safetensors", false, '{"architecture": "topk", "apply_b_dec_to_input": false}')
  T.raises(function() SAE.load(dir .. "/topk/sae_weights.safetensors") end, "says architecture \"topk\"", true)
  tiny(dir .. "/norm", "sae_weights.safetensors", false, '{"architecture": "standard", "normalize_activations": "expected_average_only_in"}')
  T.raises(function() SAE.load(dir .. "/norm/sae_weights.safetensors") end, "normalize_activations", true)
end)

T.test("SAE encode/decode take one vector; load options and widths are checked by name", function()
  local dir = T.tmpdir()
  local jr = SAE.load(tiny(dir, "params.safetensors", true))
  local z = jr:encode(tensor.from({ 6, 2, 0.5, 0 }))
  T.eq(z:dim(), 1)
  T.eq(z:totable(), { 6, 0, 0 })
  local r = jr:decode(z)
  T.eq(r:dim(), 1)
  T.eq(r:totable(), { 11, 0, 0, 0 })
  T.raises(function() SAE.load(dir .. "/params.safetensors", { transpose = true }) end,
    "unknown option 'transpose'; valid options: W_enc, b_enc, W_dec, b_dec, threshold, transpose_enc, transpose_dec, apply_b_dec_to_input", true)
  T.raises(function() SAE.load(dir .. "/params.safetensors", { transpose_enc = "yes" }) end, "option 'transpose_enc' must be true or false", true)
  T.raises(function() jr:encode(tensor.zeros(2, 5)) end, "activations have width 5, the SAE 4 (it expects d_model = 4", true)
  T.raises(function() jr:encode(tensor.zeros(2, 5)) end, "transpose_enc = true", true)
  T.raises(function() jr:decode(tensor.zeros(2, 4)) end, "sae:decode: codes have width 4, the SAE has 3 features", true)
  T.raises(function() jr:decode(tensor.zeros(2, 5)) end, "transpose_dec = true", true)
  T.raises(function() jr:encode(tensor.zeros(2, 2, 4)) end, "one [d_model] vector, got a 3-d tensor", true)
end)
