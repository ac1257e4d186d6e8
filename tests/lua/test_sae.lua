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
