-- Hostile arguments to the model API that batched generation and hooks stand on (issue 24's
-- surface): generate, generate_iter, generate_batch (per_sequence), forward, run_with_hooks,
-- run_with_cache, with_hooks, add_hook, prompt_cache, unembed and the intervention constructors,
-- each called with random values in every argument and option (wrong types, NaN and infinities,
-- huge and negative numbers, out-of-range token ids, empty and nested tables, functions,
-- tensors of the wrong shape, unknown keys). Each call must return or raise an error that names
-- the API it came from; an error from inside the implementation ("attempt to index a nil value",
-- a bare "bad argument #2 to '?'") means an input went unchecked, and a crash or hang ends the
-- test. After every case the model must still generate what it generated before (nothing the
-- bad call left behind changes a result).
-- make test runs FUZZ_API_N calls (default 1500) from a fixed seed; `make fuzz-batch` 200,000 from
-- a seed of the clock. FUZZ_API_SHOW=1 prints every error raised (to read what they say);
-- FUZZ_API_TRACE=1 names each case before it runs (to find one that hangs).
local T = require "testing"
local I = require "seer.interventions"
local tensor = seer.tensor

local here = seer.script_dir()
local N = tonumber(os.getenv("FUZZ_API_N") or "1500")
local SEED = tonumber(os.getenv("FUZZ_API_SEED") or "424242")

local rng = T.rng

local m = seer.model.load(here .. "/../fixtures/models/stories260K", { threads = 2 })
local D, L, V = m.config.hidden_size, m.config.num_hidden_layers, m.config.vocab_size
local base = m:generate("Once upon a time", { max_new_tokens = 8 }).ids

-- random values, most of them wrong for wherever they land
local function value(r, depth)
  depth = depth or 0
  local k = r.int(1, 30)
  if k == 1 then return nil
  elseif k == 2 then return true
  elseif k == 3 then return false
  elseif k == 4 then return 0
  elseif k == 5 then return -1
  elseif k == 6 then return r.int(1, 40)
  elseif k == 7 then return 2 ^ 31
  elseif k == 8 then return 2 ^ 53 + 2
  elseif k == 9 then return -(2 ^ 63)
  elseif k == 10 then return 0 / 0
  elseif k == 11 then return math.huge
  elseif k == 12 then return -math.huge
  elseif k == 13 then return 0.5
  elseif k == 14 then return ""
  elseif k == 15 then return "blocks.0.hook_resid_post"
  elseif k == 16 then return ("x"):rep(r.int(1, 300))
  elseif k == 17 then return {}
  elseif k == 18 then return { 1, 2, 3 }
  elseif k == 19 then return { V + 5, -3 }
  elseif k == 20 then return depth < 2 and { value(r, depth + 1), value(r, depth + 1) } or {}
  elseif k == 21 then
    local key = depth < 2 and value(r, depth + 1) or "a"
    if key == nil or key ~= key then key = "a" end -- (nil and NaN cannot be keys)
    return { [key] = value(r, depth + 1) }
  elseif k == 22 then return function() error("from a hostile callback") end
  elseif k == 23 then return function(x) return x end
  elseif k == 24 then return tensor.ones(D)
  elseif k == 25 then return tensor.ones(3, 3)
  elseif k == 26 then return tensor.zeros(0)
  elseif k == 27 then return "hook_pattern"
  elseif k == 28 then return { { "blocks.0.hook_resid_post", I.add(tensor.ones(D)) } }
  elseif k == 29 then return 1.5
  end
  return "Once upon a time"
end

local OPTION_KEYS = {
  generate = { "max_new_tokens", "min_new_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed", "stop", "stream" },
  batch = { "max_batch", "per_sequence", "progress", "share_prompts" },
  cache = { "names", "positions", "stop_at_layer", "start_at_layer" },
  hooks = { "fwd_hooks", "per_sequence", "start_at_layer" },
  forward = { "hidden_states", "start_at_layer" },
  iv = { "positions", "from", "to", "only_prompt", "strength", "heads" },
}
-- a value near the edge of what a key takes (so calls get past the first check and reach the
-- deeper ones): small and boundary integers, in-range and out-of-range positions and layers
local function plausible(r, key)
  local edge = { -1, 0, 1, 2, 3, L - 1, L, L + 1, -L, -L - 1, 0.5 }
  if key == "temperature" or key == "top_p" or key == "min_p" or key == "repetition_penalty" or key == "strength" then
    return r.pick({ 0, 0.5, 1, 1.5, 2, -0.1, 1e-30, 0 / 0, math.huge })
  elseif key == "positions" or key == "heads" then
    local t = {}
    for i = 1, r.int(0, 3) do t[i] = r.pick({ 0, 1, 2, -1, -2, 7, 40, -40, 1.5 }) end
    return t
  elseif key == "names" then
    return r.pick({ "hook_resid_post", "blocks.0.hook_resid_post", "blocks.-1.attn.hook_pattern", "hook_pattern$", "blocks%.[01]",
      "(", "blocks.9.hook_z", { "hook_mlp_out", "blocks.1" }, {}, function(n) return n:find("resid") ~= nil end, function() error("x") end })
  elseif key == "stop" then
    return r.pick({ ".", "", { "a", 5 }, 5, -5, V + 10, { {} } })
  elseif key == "per_sequence" then
    return { [r.int(1, 3)] = { max_new_tokens = r.int(0, 3), seed = r.int(0, 9) } }
  elseif key == "stream" then
    return r.pick({ function() end, function() error("from a hostile callback") end })
  elseif key == "hidden_states" or key == "progress" or key == "share_prompts" or key == "only_prompt" then
    return r.chance(0.5)
  end
  return r.pick(edge)
end

-- an options table: mostly known keys with plausible or random values, sometimes an unknown key
-- or not a table
local function options(r, kind)
  if r.chance(0.1) then return value(r) end
  local o = {}
  for _ = 1, r.int(0, 4) do
    local keys = OPTION_KEYS[kind]
    local key = r.chance(0.08) and value(r) or r.pick(keys)
    if key ~= nil and key == key then o[key] = r.chance(0.6) and plausible(r, key) or value(r) end
  end
  -- sane values now and then, so calls get past the first check
  if kind == "generate" and r.chance(0.5) then o.max_new_tokens = r.int(0, 4) end
  return o
end
local function input(r)
  local k = r.int(1, 6)
  if k == 1 then return "Once upon a time" end
  if k == 2 then
    local t = {}
    for i = 1, r.int(1, 20) do t[i] = r.int(1, V - 1) end
    return t
  end
  return value(r)
end
local function intervention(r)
  local make = r.pick({ I.add, I.ablate, I.scale, I.zero_heads, I.replace, I.capture })
  local a = r.chance(0.5) and tensor.ones(D) or value(r)
  if make == I.capture then return make(options(r, "iv")) end
  return make(a, options(r, "iv"))
end
local function hook_list(r)
  if r.chance(0.2) then return value(r) end
  local list = {}
  for i = 1, r.int(0, 3) do
    local name = r.chance(0.7) and ("blocks.%d.%s"):format(r.int(-2, L + 1), r.pick({ "hook_resid_post", "attn.hook_pattern", "hook_mlp_out", "attn.hook_z" })) or value(r)
    local ok, iv = pcall(intervention, r)
    list[i] = { name, ok and iv or value(r) }
  end
  return list
end

-- the calls; each returns nothing useful, only whether it raised
local CALLS = {
  function(r) return m:generate(input(r), options(r, "generate")) end,
  function(r)
    local it = m:generate_iter(input(r), options(r, "generate"))
    for _ = 1, r.int(0, 3) do it() end
  end,
  function(r)
    local o = options(r, "generate")
    if type(o) == "table" then
      local b = options(r, "batch")
      if type(b) == "table" then for k, v in pairs(b) do o[k] = v end end
      if r.chance(0.4) then o.per_sequence = { [r.int(1, 3)] = r.chance(0.5) and options(r, "generate") or { hooks = hook_list(r) } } end
    end
    local ps = r.chance(0.8) and { input(r), input(r) } or value(r)
    return m:generate_batch(ps, o)
  end,
  function(r) return m:forward(input(r), options(r, "forward")) end,
  function(r)
    local o = options(r, "hooks")
    if type(o) == "table" and r.chance(0.5) then o.fwd_hooks = hook_list(r) end
    return m:run_with_hooks(r.chance(0.7) and input(r) or { input(r), input(r) }, o)
  end,
  function(r) return m:run_with_cache(r.chance(0.7) and input(r) or { input(r), input(r) }, options(r, "cache")) end,
  function(r) return m:with_hooks(hook_list(r), function() return m:generate(input(r), options(r, "generate")) end) end,
  function(r)
    local h = m:add_hook(r.chance(0.6) and "blocks.0.hook_resid_post" or value(r), r.chance(0.5) and intervention(r) or value(r))
    local ok = pcall(m.generate, m, input(r), options(r, "generate"))
    if h then h:remove() end
    m:reset_hooks()
    return ok
  end,
  function(r) return m:prompt_cache(value(r)) end,
  function(r) return m:unembed(r.chance(0.5) and tensor.ones(r.int(1, 3), D) or value(r)) end,
  function(r) return intervention(r) end,
  -- the toolkit's functions over the same API, as agents call them
  function(r)
    local convs = r.chance(0.7) and { input(r), r.chance(0.5) and { { role = "user", content = "Hi" } } or input(r) } or value(r)
    return require("toolkit.batch_generate").batch_generate(m, nil, convs, r.chance(0.6) and r.int(0, 3) or value(r),
      r.chance(0.5) and 0.7 or value(r), r.chance(0.5) and 0.9 or value(r), r.chance(0.5) and { seed = r.int(0, 5) } or value(r))
  end,
  function(r)
    local ex = require "toolkit.extract_activations"
    local f = r.pick({ "extract_activation", "extract_activations", "extract_layers" })
    local inp = f == "extract_activations" and (r.chance(0.7) and { input(r), input(r) } or value(r)) or input(r)
    return ex[f](m, nil, inp, r.chance(0.6) and plausible(r, "layer") or value(r), r.chance(0.6) and r.pick({ -1, 0, 2, -30 }) or value(r))
  end,
  function(r)
    local AP = require "toolkit.activation_patching"
    local clean, corrupt = input(r), r.chance(0.6) and "Once upon a time" or input(r)
    local metric = r.chance(0.7) and AP.logit_difference or value(r)
    if r.chance(0.5) then
      return AP.patch(m, clean, corrupt, r.chance(0.6) and "blocks.1.hook_resid_pre" or value(r), r.chance(0.6) and { r.int(-2, 3) } or value(r),
        r.chance(0.7) and function(l) return l[{ -1, 5 }] end or metric)
    end
    return AP.patch_sweep(m, clean, corrupt, r.chance(0.7) and function(l) return l[{ -1, 5 }] end or metric,
      r.chance(0.6) and { layers = { r.int(-1, L) } } or value(r))
  end,
  function(r)
    local steer = require "toolkit.steering_hook"
    return steer.steering_hook(m, r.chance(0.6) and r.int(-1, L) or value(r), r.chance(0.6) and tensor.ones(D) or value(r),
      r.chance(0.6) and 2 or value(r), r.chance(0.6) and r.int(-2, 4) or value(r),
      function() return m:generate("Once upon a time", { max_new_tokens = r.int(0, 3) }) end)
  end,
  function(r)
    local LL = require "toolkit.logit_lens"
    return LL.logit_lens(m, nil, input(r), r.chance(0.6) and { layers = { r.int(-1, L) }, position = r.int(-2, 2), k = r.int(0, 5) } or value(r))
  end,
  function(r)
    local GR = require "toolkit.generate_response"
    return GR.generate_response(m, nil, r.chance(0.5) and { { role = "user", content = "Hi" } } or input(r),
      r.chance(0.6) and r.int(0, 3) or value(r), r.chance(0.5) and 0 or value(r), r.chance(0.5) and {} or value(r))
  end,
  function(r)
    local steer = require "toolkit.steering_hook"
    local prompts = r.chance(0.7) and { input(r), r.chance(0.5) and "Once upon a time" or input(r) } or value(r)
    local strengths = r.chance(0.7) and { 0, r.chance(0.7) and 2 or value(r) } or value(r)
    local o = r.chance(0.6) and { max_new_tokens = r.int(0, 3), temperature = r.pick({ 0, 0.8 }), start_pos = r.int(-2, 6),
      samples = r.chance(0.8) and r.int(1, 2) or value(r), seed = r.chance(0.8) and r.int(0, 3) or value(r) } or options(r, "generate")
    if type(o) == "table" and r.chance(0.3) then o[r.pick({ "max_batch", "texts", "chat", "top_p", "stop" })] = value(r) end
    return steer.steering_sweep(m, nil, prompts, r.chance(0.7) and r.int(-1, L) or value(r),
      r.chance(0.7) and tensor.ones(D) or value(r), strengths, o)
  end,
}
local NAMES = { "generate", "generate_iter", "generate_batch", "forward", "run_with_hooks", "run_with_cache", "with_hooks", "add_hook",
  "prompt_cache", "unembed", "interventions", "batch_generate", "extract_activations", "activation_patching", "steering_hook",
  "logit_lens", "generate_response", "steering_sweep" }

-- an error from inside the implementation: the input was not checked where it entered
local INTERNAL = { "attempt to ", "bad argument #%d+ to '%?'", "stack overflow", "C stack overflow", "table index is nil",
  "table index is NaN", "invalid key to 'next'", "number has no integer representation",
  -- Lua's own functions, called on an argument nobody checked
  "bad argument #%d+ to 'i?pairs'", "bad argument #%d+ to 'insert'", "bad argument #%d+ to 'concat'",
  "bad argument #%d+ to 'format'", "bad argument #%d+ to 'unpack'", "bad argument #%d+ to 'tostring'",
  "bad argument #%d+ to 'sub'", "bad argument #%d+ to 'find'", "bad argument #%d+ to 'match'", "bad argument #%d+ to 'gsub'" }

-- Whether an error a call raised comes from inside the implementation (FUZZ_API_SHOW=1 prints
-- every one); a hostile callback's own error is the callback's.
local function from_inside(name, msg)
  if os.getenv("FUZZ_API_SHOW") then io.stderr:write(name .. " | " .. msg:gsub("\n.*", "") .. "\n") end
  if msg:find("from a hostile callback", 1, true) then return false end
  for _, p in ipairs(INTERNAL) do
    if msg:find(p) then return true end
  end
  return false
end

T.test(("%d calls with hostile arguments: errors name the API, none comes from inside, the model stays right (seed %d)"):format(N, SEED), function()
  local bad, raised, returned, slow = {}, 0, 0, {}
  local bar = require("seer.progress").new("fuzz-api", N >= 20000) -- a line on a terminal for long runs
  for c = 1, N do
    bar:update("call %d/%d, %d from inside", c, N, #bad)
    local seed = SEED + c - 1
    local r = rng(seed)
    local which = r.int(1, #CALLS)
    local t0 = seer.now()
    if os.getenv("FUZZ_API_TRACE") then io.stderr:write(("case %d (%s)\n"):format(seed, NAMES[which])) end
    local ok, err = pcall(CALLS[which], r)
    m:reset_hooks()
    if seer.now() - t0 > 2 then slow[#slow + 1] = ("%s (case seed %d): %.1f s"):format(NAMES[which], seed, seer.now() - t0) end
    if ok then returned = returned + 1
    else
      raised = raised + 1
      local msg = tostring(err)
      if from_inside(NAMES[which], msg) then
        bad[#bad + 1] = ("%s (case seed %d, replay: FUZZ_API_SEED=%d FUZZ_API_N=1): %s"):format(NAMES[which], seed, seed, msg)
      end
    end
    if #bad >= 8 then break end
  end
  bar:done()
  m:prompt_cache(256 * 1024 * 1024)
  T.eq(table.concat(m:generate("Once upon a time", { max_new_tokens = 8 }).ids, ","), table.concat(base, ","),
    "after the hostile calls the model generates what it did before")
  io.stderr:write(("  %d returned, %d raised\n"):format(returned, raised))
  T.eq(#slow, 0, "calls that took over 2 s (a loop on a bad input?):\n" .. table.concat(slow, "\n"))
  T.eq(#bad, 0, "errors from inside the implementation:\n" .. table.concat(bad, "\n"))
  T.ok(N < 200 or (raised > N / 4 and returned > N / 20), "both outcomes occurred (else the arguments are too tame or too wild)")
end)

-- The tensor API under the same kind of arguments: every method of a tensor (on tensors of
-- several dtypes and shapes, views among them, and on values that are not tensors, as `t.sum()`
-- instead of `t:sum()` passes) and the module's constructors. An error must name the method;
-- Lua's own "bad argument #2 to '?'" (a C method checking an argument with luaL_check*) is an
-- unnamed one. make test runs FUZZ_TENSOR_N calls (default 3000); make fuzz-batch 100,000.
local TN = tonumber(os.getenv("FUZZ_TENSOR_N") or "3000")
T.test(("%d tensor method calls with hostile arguments: every error names the method (seed %d)"):format(TN, SEED), function()
  local methods = getmetatable(tensor.zeros(1)).methods
  local names = {}
  for k in pairs(methods) do names[#names + 1] = k end
  table.sort(names)
  local module = { "arange", "cat", "cosine_similarity", "format", "from", "full", "is_tensor", "matmul", "new", "ones",
    "rand", "randn", "stack", "zeros", "load" } -- not save: it would write wherever a random string points
  local function receiver(r)
    local k = r.int(1, 12)
    if k == 1 then return tensor.ones(D)
    elseif k == 2 then return tensor.zeros(0)
    elseif k == 3 then return tensor.randn(2, 3, 4, { seed = r.int(1, 100) })
    elseif k == 4 then return tensor.randn(3, 4, { seed = r.int(1, 100) }):to("bf16")
    elseif k == 5 then return tensor.arange(0, 6, 1, { dtype = "i64" }):view(2, 3)
    elseif k == 6 then return tensor.randn(4, 3, { seed = 7 }):t() -- not contiguous
    elseif k == 7 then return tensor.ones(2, 2):to("bool")
    elseif k == 8 then return tensor.ones(5):sum() -- 0-d
    elseif k == 9 then return tensor.randn(3, 3, { seed = 9 }):to("f16")
    elseif k == 10 then return tensor.ones(2, 3):to("u8")
    end
    return value(r) -- not a tensor: what `t.method(...)` and stray values pass
  end
  local function arg(r)
    local k = r.int(1, 6)
    if k == 1 then return r.int(-4, 4) end
    if k == 2 then return receiver(r) end
    if k == 3 then return ({ "f32", "bf16", "i64", "bool", "float16", "nonsense" })[r.int(1, 6)] end
    return value(r)
  end
  local bad, raised, returned, slow = {}, 0, 0, {}
  local bar = require("seer.progress").new("fuzz-tensor", TN >= 20000)
  for c = 1, TN do
    bar:update("call %d/%d, %d unnamed", c, TN, #bad)
    local seed = SEED + c - 1
    local r = rng(seed)
    local on_module = r.int(1, 6) == 1
    local name = on_module and module[r.int(1, #module)] or names[r.int(1, #names)]
    local args, n = {}, r.int(0, 4)
    for i = 1, n do args[i] = arg(r) end
    -- a constructor asked for 2^31 elements makes them (8 GiB, as torch would): a shape of more
    -- than 2^24 elements becomes ones here; the sizes that are errors (2^53 + 2, -2^63) stay
    local function sizeish(x) return type(x) == "number" and x >= 1 and x <= 2 ^ 40 end
    local function list(v) return type(v) == "table" and not tensor.is_tensor(v) and v or nil end
    local size = 1
    for i = 1, n do
      for _, x in ipairs(list(args[i]) or { args[i] }) do if sizeish(x) then size = size * x end end
    end
    if on_module and size > 2 ^ 24 then
      for i = 1, n do
        if sizeish(args[i]) then args[i] = 1 end
        for k, x in ipairs(list(args[i]) or {}) do if sizeish(x) then args[i][k] = 1 end end
      end
    end
    local fn = on_module and tensor[name] or methods[name]
    local self = receiver(r)
    local t0 = seer.now()
    local ok, err
    if on_module then ok, err = pcall(fn, unpack(args, 1, n))
    else ok, err = pcall(fn, self, unpack(args, 1, n)) end
    if seer.now() - t0 > 2 then slow[#slow + 1] = ("%s (seed %d): %.1f s"):format(name, seed, seer.now() - t0) end
    if ok then returned = returned + 1
    else
      raised = raised + 1
      local msg = tostring(err)
      if from_inside(name, msg) then
        bad[#bad + 1] = ("%s (seed %d, replay: FUZZ_API_SEED=%d FUZZ_TENSOR_N=1): %s"):format(name, seed, seed, msg)
      end
    end
    if #bad >= 8 then break end
  end
  bar:done()
  io.stderr:write(("  %d returned, %d raised\n"):format(returned, raised))
  T.eq(#slow, 0, "calls that took over 2 s:\n" .. table.concat(slow, "\n"))
  T.eq(#bad, 0, "errors that do not name the method, or come from inside it:\n" .. table.concat(bad, "\n"))
  T.ok(TN < 200 or (raised > TN / 4 and returned > TN / 20), "both outcomes occurred")
end)
