-- Differential fuzzing of batched generation and prompt sharing (issue 24): random batteries of
-- prompts (shared beginnings of random lengths across the 64-row blocks and the kernel
-- crossings, repeats, fresh prompts; stories260K's text prompts and stop strings), random
-- sampling options, per-sequence and model-wide interventions at random points and positions,
-- captures and pattern hooks (which share nothing), a LoRA adapter switched on and off, run as
-- one `generate_batch` (random max_batch, sharing on or off), as a loop of `generate` calls
-- through the prompt cache (random budgets, entries left by earlier cases under other GEMM
-- settings, hooks and adapter states), as `generate_iter`s abandoned part-way before that loop,
-- as one batched `run_with_hooks` with per-sequence hooks (sequences of one prompt sharing what
-- their hooks compute alike), as a loop of `run_with_hooks` calls through the prompt cache (each
-- may run from a residual an earlier call kept), as one batched `run_with_cache` (random
-- points, `stop_at_layer`), or as `toolkit.extract_activations` over the list. Every sequence's
-- tokens (or logits, residuals, cached activations) must be those of the same prompt run alone
-- by a second instance of the model that shares nothing (prompt cache off) on one thread, bit for
-- bit. A failing case prints what it ran and the line that replays it alone.
--
-- make test runs FUZZ_BATCH_N cases (default 120) from a fixed seed; `make fuzz-batch` runs many
-- more from a seed of the clock (printed).
local T = require "testing"
local I = require "seer.interventions"
local check = require "batch_check"
local core = require "seer.core.model"
local tensor = seer.tensor

local here = seer.script_dir()
local pdir = here .. "/../parity/models"
local N = tonumber(os.getenv("FUZZ_BATCH_N") or "120")
local SEED = tonumber(os.getenv("FUZZ_BATCH_SEED") or "20261130")

-- models whose positions reach 300 tokens (gpt2's learned table stops at 64), both dtypes
-- "+lora": the base with a LoRA adapter (tests/parity/lora), switched on and off at random;
-- "@fast": precision = "fast" (VDPBF16PS and a bf16 KV cache where the CPU has AVX512_BF16)
local MODELS = { "llama", "llama+lora", "qwen3+lora", "llama_bf16", "llama_bf16@fast", "gemma2_bf16@fast", "mistral", "qwen2", "qwen3_bf16", "gemma", "gemma2", "gemma3", "gemma3_softcap",
  "gpt_neox", "olmo2", "granite", "phi3", "llama_tied_bias", "llama_mlp_bias_bf16", "qwen2_yarn" }

local rng = T.rng

local stories = here .. "/../fixtures/models/stories260K"
local loaded = {}
-- the model under test (2 threads, prompt cache on, kept across cases) and the reference (one
-- thread, shares nothing): a result may depend on neither
local function models(name)
  if not loaded[name] then
    local base = name:match("^(.-)%+lora$")
    local fast = name:match("^(.-)@fast$")
    local dir = name == "stories260K" and stories or pdir .. "/" .. (base or fast or name)
    local tok = false
    if name == "stories260K" then tok = nil end -- its tokenizer: text prompts, stop strings
    local prec = fast and "fast" or nil
    local sub = seer.model.load(dir, { tokenizer = tok, threads = 2, precision = prec })
    local ref = check.load_uncached(dir, { tokenizer = tok, threads = 1, precision = prec })
    if base then
      local adir = here .. "/../parity/lora/" .. (base == "qwen3" and "qwen3_rslora" or "llama_all")
      sub:load_adapter(adir)
      ref:load_adapter(adir)
    end
    loaded[name] = { sub, ref }
  end
  return loaded[name][1], loaded[name][2]
end

local function join(t) return table.concat(t, ",") end
local function tokens(r, vocab, n)
  local out = {}
  for i = 1, n do out[i] = r.int(3, vocab - 1) end
  return out
end

-- One intervention as a recipe (so the run under test and the reference each get their own
-- object: hit counts are per object) and a text for the report.
local function intervention(r, m, plen)
  local L, d = m.config.num_hidden_layers, m.config.hidden_size
  local layer = r.int(0, L - 1)
  local where = {}
  local w = r.int(1, 5)
  if w == 2 then where.from = r.int(0, plen - 1)
  elseif w == 3 then where.from = -r.int(1, plen)
  elseif w == 4 then where.positions = { r.int(0, plen - 1), r.int(0, plen - 1) }
  elseif w == 5 then where.positions = { -r.int(1, plen) } end
  local kind = r.int(1, 4)
  local vseed = r.int(1, 100000)
  local strength = r.pick({ 0.5, 2, 8 })
  local function make()
    local o = next(where) and where or nil
    tensor.manual_seed(vseed)
    if kind == 1 then
      return { ("blocks.%d.hook_resid_post"):format(layer), I.add(tensor.randn(d), o and { positions = o.positions, from = o.from, strength = strength } or { strength = strength }) }
    elseif kind == 2 then
      return { ("blocks.%d.hook_resid_pre"):format(layer), I.ablate(tensor.randn(d), o) }
    elseif kind == 3 then
      return { ("blocks.%d.attn.hook_z"):format(layer), I.scale(0.25, { heads = { 0 }, positions = o and o.positions, from = o and o.from }) }
    end
    return { ("blocks.%d.hook_mlp_out"):format(layer), I.scale(strength, o) }
  end
  return make, ("%s@%d%s"):format(({ "add", "ablate", "scale_z", "scale_mlp" })[kind], layer,
    where.from and (" from " .. where.from) or where.positions and (" positions " .. join(where.positions)) or "")
end

local compared = 0 -- cache tensors (cache mode) and grid cells (sweep mode) compared

local ex = require "toolkit.extract_activations"
local AP = require "toolkit.activation_patching"

local function case(seed)
  local r = rng(seed)
  local name = r.chance(0.12) and "stories260K" or r.pick(MODELS)
  local m, ref = models(name)
  local vocab = m.config.vocab_size
  local g = r.pick({ 0, 0, 16, 100000 }) -- this CPU's GEMM crossing, the GEMM path from 16, never
  local log = { ("case seed %d (replay: FUZZ_BATCH_SEED=%d FUZZ_BATCH_N=1): %s, gemm_min %s"):format(seed, seed, name, g == 0 and "default" or tostring(g)) }
  local budget = r.pick({ -1, -1, 0, 4096, 1048576 }) -- -1: leave the cache as earlier cases left it
  if budget >= 0 then m:prompt_cache(budget) log[#log + 1] = "prompt_cache " .. budget end
  if r.chance(0.1) then m:prompt_cache(268435456) log[#log + 1] = "prompt_cache 268435456" end

  -- the battery
  local base = tokens(r, vocab, r.int(1, 260))
  local k = r.int(1, 9)
  local prompts = {}
  for i = 1, k do
    local p
    local kind = r.int(1, 10)
    if kind <= 6 then -- a beginning of the base, then its own tokens
      p = { unpack(base, 1, r.int(1, #base)) }
      for _, t in ipairs(tokens(r, vocab, r.pick({ 0, 1, 5, 30, r.int(0, 70) }))) do p[#p + 1] = t end
    elseif kind <= 8 and i > 1 then p = { unpack(prompts[r.int(1, i - 1)]) } -- a repeat
    else p = tokens(r, vocab, r.int(1, 120)) end
    if #p > 280 then p = { unpack(p, 1, 280) } end
    prompts[i] = p
  end
  -- stories260K (a real tokenizer): some prompts as text, and stop strings
  local words = { "Once upon a time", " there was a little girl", " named Lily.", " She liked to play", " in the park",
    " with her dog.", " One day,", " the sun was shining", " and the birds sang.", " Tom said," }
  local text = name == "stories260K"
  if text then
    for i = 1, k do
      if r.chance(0.5) then
        local parts = {}
        for j = 1, r.int(1, 12) do parts[j] = words[(j == 1 and 1) or r.int(1, #words)] end
        prompts[i] = table.concat(parts)
      end
    end
  end

  -- each prompt's length in tokens (a text prompt as generate encodes it)
  local function len(i)
    local p = prompts[i]
    if type(p) == "string" then return #m.tokenizer:encode(p, { add_special_tokens = true }) end
    return #p
  end
  -- options and hooks per sequence
  local opts, hooks, descr = {}, {}, {}
  for i = 1, k do
    local o = { max_new_tokens = r.int(1, 5) }
    if r.chance(0.4) then
      o.temperature = r.pick({ 0.5, 1, 1.5 })
      o.seed = r.int(1, 1000)
      if r.chance(0.3) then o.top_k = r.int(1, 20) end
      if r.chance(0.3) then o.top_p = r.pick({ 0.5, 0.9 }) end
    end
    if r.chance(0.15) then o.repetition_penalty = 1.3 end
    if r.chance(0.15) then o.stop = r.int(3, vocab - 1) end
    if text and r.chance(0.4) then o.stop = r.pick({ ".", " the", "Lily", { "a", "!" }, { "," , 13 } }) o.max_new_tokens = r.int(1, 12) end
    if r.chance(0.2) then o.min_new_tokens = 1 end
    opts[i] = o
    local list, d = {}, {}
    if r.chance(0.35) then
      for _ = 1, r.int(1, 2) do
        local make, text = intervention(r, m, len(i))
        list[#list + 1] = make
        d[#d + 1] = text
      end
    end
    if r.chance(0.05) then
      local layer = r.int(0, m.config.num_hidden_layers - 1)
      list[#list + 1] = function() return { ("blocks.%d.hook_resid_post"):format(layer), I.capture() } end
      d[#d + 1] = "capture@" .. layer
    end
    if r.chance(0.12) then
      list[#list + 1] = function() return { "blocks.0.attn.hook_pattern", I.scale(1, { heads = { 0 } }) } end
      d[#d + 1] = "pattern"
    end
    if #list > 0 then hooks[i] = list end
    descr[i] = ("  %d: %s %s %s"):format(i, type(prompts[i]) == "string" and ("%q"):format(prompts[i])
      or ("%d tokens [%s]"):format(#prompts[i], join({ unpack(prompts[i], 1, 6) })),
      seer.json.encode(o), table.concat(d, ", "))
  end
  -- a model-wide intervention on every sequence (and on the reference), now and then
  local wide, wide_text
  if r.chance(0.15) then
    local shortest = math.huge
    for i = 1, k do shortest = math.min(shortest, len(i)) end
    wide, wide_text = intervention(r, m, shortest)
    -- the interventions are judged per call: a wide one must select a position in every prompt
    log[#log + 1] = "model-wide: " .. wide_text
  end
  local function hooks_of(i)
    local list = {}
    for _, make in ipairs(hooks[i] or {}) do list[#list + 1] = make() end
    return list
  end
  local mode = r.pick({ "batch", "batch", "batch", "loop", "loop", "iter", "forward", "fwdloop", "cache", "extract", "sweep" })
  -- toolkit.activation_patching.patch_sweep's grid against each patch alone (sweep mode): a
  -- corrupt prompt of the first one's length with a few tokens changed, a few layers and points
  local sweep = {}
  if mode == "sweep" then
    local clean = type(prompts[1]) == "string" and m.tokenizer:encode(prompts[1], { add_special_tokens = true }) or prompts[1]
    if #clean > 40 then clean = { unpack(clean, 1, 40) } end
    local corrupt = { unpack(clean) }
    for _ = 1, r.int(1, 3) do corrupt[r.int(1, #corrupt)] = r.int(3, vocab - 1) end
    local ls = {}
    local nl = m.config.num_hidden_layers
    for i = 1, r.int(1, 3) do ls[i] = r.int(-nl, nl - 1) end
    sweep = { clean = clean, corrupt = corrupt, layers = ls, point = r.pick({ "hook_resid_pre", "hook_resid_post", "hook_mlp_out", "attn.hook_z" }),
      tok = r.int(3, vocab - 1) }
    log[#log + 1] = ("patch_sweep: %d tokens, layers %s, point %s"):format(#clean, table.concat(ls, " "), sweep.point)
  end
  -- run_with_cache's points and where it stops (cache mode)
  local L = m.config.num_hidden_layers
  local names = { ("blocks.%d.hook_resid_post"):format(r.int(0, L - 1)), ("blocks.%d.attn.hook_z"):format(r.int(0, L - 1)) }
  if r.chance(0.3) then names[#names + 1] = ("blocks.%d.attn.hook_pattern"):format(r.int(0, L - 1)) end
  local stop = r.chance(0.5) and r.int(1, L) or nil
  if mode == "cache" then log[#log + 1] = ("names %s, stop_at_layer %s"):format(table.concat(names, " "), tostring(stop)) end
  -- toolkit.extract_activations' layer and position (extract mode)
  local xlayer, xpos = r.int(-L, L - 1), r.pick({ -1, -1, 0, -r.int(1, 4) })
  for i = 1, k do xpos = math.max(xpos, -len(i)) end
  if mode == "extract" then log[#log + 1] = ("extract_activations layer %d position %d"):format(xlayer, xpos) end
  -- with an adapter: on or off for the whole case, or (a loop of generate calls) per call
  local adapter = {}
  if m.adapter then
    local on = r.chance(0.5)
    for i = 1, k do
      if mode == "loop" and r.chance(0.3) then on = not on end
      adapter[i] = on
    end
    log[#log + 1] = "adapter per sequence: " .. table.concat((function()
      local t = {}
      for i = 1, k do t[i] = adapter[i] and "on" or "off" end
      return t
    end)(), " ")
  end
  local function set_adapter(model, i)
    if model.adapter and model.adapter.enabled ~= adapter[i] then model:set_adapter(adapter[i]) end
  end
  local max_batch, share = r.int(1, k), not r.chance(0.15)
  log[#log + 1] = ("mode %s, %d prompts%s"):format(mode, k, mode == "batch" and (", max_batch %d, share_prompts %s"):format(max_batch, tostring(share)) or "")
  for i = 1, k do log[#log + 1] = descr[i] end

  local function ids_of(i)
    if type(prompts[i]) == "string" then return m.tokenizer:encode(prompts[i], { add_special_tokens = true }) end
    return prompts[i]
  end
  local got, logits = {}, nil
  local ok, err = pcall(check.at_gemm_min, g, function()
    local function run()
      set_adapter(m, 1)
      if mode == "sweep" then
        local function metric(l) return l[{ -1, sweep.tok + 1 }] end
        logits, got = AP.patch_sweep(m, sweep.clean, sweep.corrupt, metric, { layers = sweep.layers, point = sweep.point, progress = false })
      elseif mode == "extract" then -- the toolkit's batches
        local list = {}
        for i = 1, k do list[i] = ids_of(i) end
        logits = ex.extract_activations(m, nil, list, xlayer, xpos)
      elseif mode == "cache" then -- one batched pass with captures (left-padded caches)
        local list = {}
        for i = 1, k do list[i] = ids_of(i) end
        logits, got = m:run_with_cache(list, { names = names, stop_at_layer = stop })
      elseif mode == "forward" then -- one batched pass (left-padded) with each sequence's own hooks
        local list, per = {}, {}
        for i = 1, k do
          list[i] = ids_of(i)
          if hooks[i] then per[i] = hooks_of(i) end
        end
        logits = m:run_with_hooks(list, { per_sequence = per })
      elseif mode == "fwdloop" then -- a run_with_hooks call per prompt, through the prompt cache,
        -- each made twice (the second may run from what the first kept)
        logits = {}
        for i = 1, k do
          set_adapter(m, i)
          local first = m:run_with_hooks(ids_of(i), { fwd_hooks = hooks_of(i) })
          logits[i] = m:run_with_hooks(ids_of(i), { fwd_hooks = hooks_of(i) })
          local d = (first - logits[i]):abs():max()
          if d ~= 0 then error(("call %d: made again, its logits differ by up to %g"):format(i, d), 0) end
        end
      elseif mode == "batch" then
        local per = {}
        for i = 1, k do
          per[i] = {}
          for kk, v in pairs(opts[i]) do per[i][kk] = v end
          if hooks[i] then per[i].hooks = hooks_of(i) end
        end
        local outs = m:generate_batch(prompts, { per_sequence = per, max_batch = max_batch, share_prompts = share, progress = false })
        for i = 1, k do got[i] = outs[i].ids end
      else
        if mode == "iter" then -- generations abandoned part-way, their generators left to the collector
          for i = 1, k do
            local it = m:with_hooks(hooks_of(i), function()
              local f = m:generate_iter(prompts[i], opts[i])
              f()
              return f
            end)
            if r.chance(0.5) then it = nil end
          end
          collectgarbage()
        end
        for i = 1, k do
          set_adapter(m, i)
          got[i] = m:with_hooks(hooks_of(i), function() return m:generate(prompts[i], opts[i]) end).ids
        end
      end
    end
    local function with_wide(model, fn)
      if wide then return model:with_hooks({ wide() }, fn) end
      return fn()
    end
    with_wide(m, run)
    if mode == "sweep" then
      local function metric(l) return l[{ -1, sweep.tok + 1 }] end
      set_adapter(ref, 1)
      for i, l in ipairs(got.layers) do
        for j, pos in ipairs(got.positions) do
          local want = with_wide(ref, function()
            return AP.patch(ref, sweep.clean, sweep.corrupt, ("blocks.%d.%s"):format(l, sweep.point), { pos }, metric)
          end)
          if logits[{ i, j }] ~= want then
            error(("patch_sweep layer %d position %s: %.9g, patched alone %.9g"):format(l, tostring(pos), logits[{ i, j }], want), 0)
          end
          compared = compared + 1
        end
      end
      return
    end
    if mode == "extract" then
      for i = 1, k do
        set_adapter(ref, i)
        local one = with_wide(ref, function() return ex.extract_activation(ref, nil, ids_of(i), xlayer, xpos) end)
        local d = (logits:select(1, i) - one):abs():max()
        if d ~= 0 then error(("sequence %d: its activation differs from the sequence alone by up to %g"):format(i, d), 0) end
      end
      return
    end
    -- sequence i's rows of a left-padded batch result, and a difference that must be none
    local function rows(t, i, n) return t:select(1, i):narrow(1, t:size(2) - n + 1, n) end
    local function none(a, b, what)
      local d = (a - b):abs():max()
      if d ~= 0 then error(("%s differ from the sequence alone by up to %g"):format(what, d), 0) end
    end
    if mode == "cache" or mode == "forward" or mode == "fwdloop" then
      for i = 1, k do
        local n = #ids_of(i)
        set_adapter(ref, i)
        if mode == "fwdloop" then
          local alone = with_wide(ref, function() return ref:run_with_hooks(ids_of(i), { fwd_hooks = hooks_of(i) }) end)
          none(logits[i], alone, ("call %d: logits"):format(i))
        elseif mode == "forward" then
          local alone = with_wide(ref, function() return ref:run_with_hooks(ids_of(i), { fwd_hooks = hooks_of(i) }) end)
          none(rows(logits, i, n), alone, ("sequence %d: logits"):format(i))
        else
          local out, cache = with_wide(ref, function() return ref:run_with_cache(ids_of(i), { names = names, stop_at_layer = stop }) end)
          none(rows(logits, i, n), out, ("sequence %d: %s"):format(i, stop and "residuals" or "logits"))
          for name, t in pairs(cache) do
            local b
            if name:find("pattern") then -- [batch, head, longest, longest]: the last n queries and keys
              local L = got[name]:size(3)
              b = got[name]:select(1, i):narrow(2, L - n + 1, n):narrow(3, L - n + 1, n)
            else
              b = rows(got[name], i, n)
            end
            compared = compared + 1
            none(b, t, ("sequence %d: cache %s"):format(i, name))
          end
        end
      end
      return
    end
    for i = 1, k do
      set_adapter(ref, i)
      local alone = with_wide(ref, function()
        return ref:with_hooks(hooks_of(i), function() return ref:generate(prompts[i], opts[i]) end)
      end)
      if join(alone.ids) ~= join(got[i]) then
        error(("sequence %d: got [%s], alone [%s]"):format(i, join(got[i]), join(alone.ids)), 0)
      end
    end
  end)
  if not ok then error(tostring(err) .. "\n" .. table.concat(log, "\n"), 0) end
  return mode
end

T.test(("%d random batteries: batched and cached generations equal each prompt alone (seed %d)"):format(N, SEED), function()
  local modes, failures = {}, {}
  local whole0, rows0, blocks0 = core.shared_prefills()
  local bar = require("seer.progress").new("fuzz-batch", N >= 1000) -- a line on a terminal for long runs
  for c = 1, N do
    bar:update("case %d/%d, %d failing", c, N, #failures)
    local ok, err = pcall(case, SEED + c - 1)
    if ok then modes[err] = (modes[err] or 0) + 1
    else failures[#failures + 1] = tostring(err) end
    if #failures >= 3 then break end
  end
  bar:done()
  local whole1, rows1, blocks1 = core.shared_prefills()
  T.eq(#failures, 0, "cases failing:\n" .. table.concat(failures, "\n\n"))
  io.stderr:write(("  modes: batch %d, loop %d, iter %d, forward %d, forward loop %d, cache %d, extract %d, sweep %d (%d tensors and cells compared); prompts taken whole %d, positions taken as beginnings %d, (position, block) pairs taken as first blocks %d\n"):format(
    modes.batch or 0, modes.loop or 0, modes.iter or 0, modes.forward or 0, modes.fwdloop or 0, modes.cache or 0, modes.extract or 0, modes.sweep or 0, compared,
    whole1 - whole0, rows1 - rows0, blocks1 - blocks0))
  -- the cases shared something (else they tested the plain path only; a replay of one case may not)
  T.ok(N < 12 or whole1 - whole0 > 0, "some prompt was taken whole")
  T.ok(N < 12 or rows1 - rows0 > 0 or core.blas_row_period() == 0, "some beginning was taken")
  T.ok(N < 12 or blocks1 - blocks0 > 0, "some first blocks were taken")
end)
