-- The research toolkit (lua/toolkit) on the real stories260K Llama and the tiny random-weight
-- parity models: extraction against the model's own hidden states, generation against
-- single-sequence generation, contrast vectors, steering (with a measured effect on sampled
-- stories), ablation, patching and the logit lens. Tests that need the hook API fail with a
-- clear message while the build lacks it.
local T = require "testing"
local tensor = seer.tensor
local CT = require "seer.chat_template"

local here = seer.script_dir()
local root = here .. "/../fixtures/models/stories260K"
local parity_root = here .. "/../parity/models"
local model = seer.model.load(root)
local tok = model.tokenizer

local P = require "toolkit.prompts"
local EX = require "toolkit.extract_activations"
local G = require "toolkit.generate_response"
local BG = require "toolkit.batch_generate"
local C = require "toolkit.contrastive"
local ST = require "toolkit.steering_hook"
local R = require "toolkit.refusal_direction"
local AP = require "toolkit.activation_patching"
local LL = require "toolkit.logit_lens"

local function need_hooks(m)
  m = m or model
  local ok = pcall(require, "seer.interventions")
  if not (ok and type(m.with_hooks) == "function" and type(m.run_with_cache) == "function") then
    error("needs the hook API (seer.interventions, model:with_hooks, model:run_with_cache), which this build lacks", 2)
  end
end

local function maxdiff(a, b)
  T.eq(a:size(), b:size(), "shapes")
  return (a - b):abs():max()
end

-- stories260K's tokenizer with a real chat template (Gemma 2's, from the fixtures), so chats
-- run end to end on the trained model. The tokens of the template's markup are nonsense to it,
-- but generation is just as deterministic.
local chat_tok = seer.tokenizer.load(root)
do
  local tmpl = CT.load_template(here .. "/../fixtures/tokenizers/gemma2")
  chat_tok.chat_template = tmpl
end

local goldens = seer.json.decode(seer.read_file(here .. "/../parity/chat_templates.json"))

local function parity_models()
  local out = {}
  local p = io.popen("ls '" .. parity_root .. "'")
  for name in p:lines() do
    local f = io.open(parity_root .. "/" .. name .. "/config.json")
    if f then
      f:close()
      out[#out + 1] = name
    end
  end
  p:close()
  return out
end

-- ---- prompts -------------------------------------------------------------------------------

T.test("prompts: strings get BOS, ids pass through, positions and layers are 0-based names", function()
  local ids = P.encode(model, nil, "Once upon a time")
  T.eq(ids, { 1, 403, 407, 261, 378 })
  T.eq(P.encode(model, nil, { 1, 2, 3 }), { 1, 2, 3 })
  T.eq(P.encode(model, nil, tensor.from({ 5, 6 }, "i64")), { 5, 6 })
  T.eq(P.row(0, 5), 1)
  T.eq(P.row(-1, 5), 5)
  T.eq(P.row(-5, 5), 1)
  T.raises(function() P.row(5, 5) end, "position 5 is outside the sequence of 5 tokens")
  T.raises(function() P.row(-6, 5) end, "outside")
  T.eq(P.layer(model, -1), 4)
  T.raises(function() P.layer(model, 5) end, "layer 5 does not exist; the model has 5 layers")
  T.raises(function() P.encode(model, nil, { role = "user" }) end, "expected a string, a message list or token ids")
end)

T.test("an input the toolkit cannot encode: the error names the function the user called and which input", function()
  T.raises(function() EX.extract_activations(model, nil, { "Once", {}, "upon" }, 1) end, "extract_activations: input 2: the input has no tokens")
  T.raises(function() EX.extract_activation(model, nil, 5, 1) end, "extract_activation: expected a string, a message list or token ids, got number")
  T.raises(function() EX.extract_layers(model, nil, true, { 0 }) end, "extract_layers: expected")
  T.raises(function() LL.logit_lens(model, nil, { "x" }) end, "logit_lens: entry 1 of the input is a string")
  T.raises(function() AP.patch(model, { 1, 2 }, {}, "blocks.0.hook_resid_post", nil, function() return 0 end) end,
    "patch: the corrupt input: ")
  T.raises(function() G.generate_response(model, nil, 5) end, "generate_response: expected a string")
  T.raises(function() BG.batch_generate(model, nil, { "a", 5 }) end, "batch_generate: conversation 2: expected a string")
end)

T.test("prompts: a trailing assistant message is a prefill (transformers' continue_final_message) for six real templates", function()
  local n = 0
  for fam, f in pairs(goldens.families) do
    local tmpl = CT.load_template(here .. "/../fixtures/tokenizers/" .. fam)
    local t = seer.tokenizer.load(root)
    t.chat_template = tmpl
    for k, v in pairs(f.tokens) do t[k] = v end
    for _, case in ipairs(f.cases) do
      if case.id == "trailing_assistant_prefill" then
        local vars = {}
        for k, v in pairs(case.template_kwargs) do vars[k] = v end
        local got = P.render(t, case.messages, vars)
        local content = case.messages[#case.messages].content
        local s, e = case.text:find(content, 1, true)
        T.ok(s, fam .. ": golden holds the prefill")
        T.eq(got, case.text:sub(1, e), fam)
        -- closed conversation when asked, identical to transformers' render
        vars.add_generation_prompt = false
        T.eq(P.render(t, case.messages, vars), case.text, fam .. " closed")
        n = n + 1
      elseif case.id == "user_only/flipped" then
        T.eq(P.render(t, case.messages, case.template_kwargs), case.text, fam .. " generation prompt")
      end
    end
  end
  T.eq(n, 6)
end)

-- ---- extraction ----------------------------------------------------------------------------

-- The last layer's output (before the final norm) is not in hidden_states, whose last entry is
-- after it (as transformers'): it is checked through the head, unembed(x) = the logits.
local function last_layer_ok(m, got, logits, row, tol)
  return maxdiff(m:unembed(got), logits:select(1, row)) <= (tol or 1e-5)
end

T.test("extract_activation equals the model's hidden_states[layer + 1] at every layer and position", function()
  local ids = tok:encode("Once upon a time, there was a little dog", { add_special_tokens = true })
  local logits, hidden = model:forward(ids, { hidden_states = true })
  for layer = 0, 4 do
    for _, pos in ipairs({ 0, 3, -1, -2 }) do
      local row = pos >= 0 and pos + 1 or #ids + pos + 1
      local got = EX.extract_activation(model, tok, "Once upon a time, there was a little dog", layer, pos)
      T.eq(got:size(), { 64 })
      if layer < 4 then
        T.ok(maxdiff(got, hidden[layer + 2]:select(1, row)) <= 1e-6, ("layer %d pos %d"):format(layer, pos))
      else
        T.ok(last_layer_ok(model, got, logits, row), ("layer %d pos %d"):format(layer, pos))
        T.ok(maxdiff(got, hidden[6]:select(1, row)) > 0.1, "the last layer's output is before the final norm")
      end
    end
  end
  -- default position is the last token; tokenizer nil means the model's; negative layer from the end
  local last = EX.extract_activation(model, nil, ids, -1)
  T.ok(last_layer_ok(model, last, logits, #ids))
  -- a different layer really is different (the test can fail)
  T.ok(maxdiff(EX.extract_activation(model, nil, ids, 1), EX.extract_activation(model, nil, ids, 2)) > 1e-3)
  -- the path without run_with_cache (model:forward with hidden_states) gives the same values
  local plain = setmetatable({ run_with_cache = false }, { __index = model })
  for _, layer in ipairs({ 0, 3 }) do
    T.ok(maxdiff(EX.extract_activation(plain, nil, ids, layer, 2), EX.extract_activation(model, nil, ids, layer, 2)) <= 1e-6)
  end
  T.ok(maxdiff(EX.extract_layers(plain, nil, ids, { 0, 1, 2, 3 }), EX.extract_layers(model, nil, ids, { 0, 1, 2, 3 })) <= 1e-6)
  T.raises(function() EX.extract_activation(plain, nil, ids, 4) end, "needs model:run_with_cache", true)
  T.raises(function() EX.extract_activation(model, nil, ids, 5) end, "layer 5 does not exist")
  T.raises(function() EX.extract_activation(model, nil, ids, 0, #ids) end, "outside the sequence")
end)

T.test("extract_activation renders a chat with the template and the generation prompt", function()
  local msgs = { { role = "user", content = "Tell me about a dog." } }
  local ids = chat_tok:apply_chat_template(msgs, { add_generation_prompt = true, tokenize = true })
  T.ok(#ids > 10)
  local _, hidden = model:forward(ids, { hidden_states = true })
  local got = EX.extract_activation(model, chat_tok, msgs, 2)
  T.ok(maxdiff(got, hidden[4]:select(1, #ids)) <= 1e-6)
  T.raises(function() EX.extract_activation(model, nil, msgs, 2) end, "no chat template")
end)

T.test("get_layer_activations (the reference's name) is the decoder layer's output at the last token", function()
  local text = "The cat sat on the mat."
  local ids = tok:encode(text)
  local logits, hidden = model:forward(ids, { hidden_states = true })
  for layer = 0, model.config.num_hidden_layers - 2 do
    local want = hidden[layer + 2]:select(1, -1)
    T.eq(EX.get_layer_activations(model, tok, text, layer):totable(), want:totable())
  end
  T.ok(last_layer_ok(model, EX.get_layer_activations(model, tok, text, 4), logits, #ids))
  T.eq(EX.get_layer_activations(model, tok, text, { layer = 2 }):totable(), hidden[4]:select(1, -1):totable())
  T.raises(function() EX.get_layer_activations(model, tok, text) end, "layer must be a 0-based layer number", true)
end)

T.test("extract_activations stacks single extractions; extract_layers gives every layer", function()
  local prompts = { "The dog ran.", "A cat sat on the big red mat.", { 1, 403 } }
  local b = EX.extract_activations(model, nil, prompts, 3, -1)
  T.eq(b:size(), { 3, 64 })
  for i, p in ipairs(prompts) do
    T.ok(maxdiff(b:select(1, i), EX.extract_activation(model, nil, p, 3, -1)) <= 1e-6, "row " .. i)
  end
  -- a hole would have cut the stack short without a word
  T.raises(function() EX.extract_activations(model, nil, { "The dog ran.", nil, { 1, 403 } }, 3) end,
    "extract_activations: input 2 is missing (the list has a hole before input 3)", true)
  local ids = tok:encode("Once upon a time", { add_special_tokens = true })
  local logits, hidden = model:forward(ids, { hidden_states = true })
  local all = EX.extract_layers(model, nil, ids, nil, 2)
  T.eq(all:size(), { 5, 64 })
  for l = 0, 3 do T.ok(maxdiff(all:select(1, l + 1), hidden[l + 2]:select(1, 3)) <= 1e-6, "layer " .. l) end
  T.ok(last_layer_ok(model, all:select(1, 5), logits, 3))
  local some = EX.extract_layers(model, nil, ids, { 4, 0 })
  T.ok(last_layer_ok(model, some:select(1, 1), logits, #ids))
  T.ok(maxdiff(some:select(1, 2), hidden[2]:select(1, #ids)) <= 1e-6)
  -- layers that are neither a number nor a list (a string reached ipairs; tests/lua/test_fuzz_api.lua)
  T.raises(function() EX.extract_layers(model, nil, ids, "2") end, "extract_layers: layers must be a 0-based layer number or a list of them, got string", true)
end)

T.test("extract_activation matches hidden states on every parity architecture", function()
  for _, name in ipairs(parity_models()) do
    local m = seer.model.load(parity_root .. "/" .. name)
    local ids = { 1, 5, 9, 20, 33, 7, 2 }
    local logits, hidden = m:forward(ids, { hidden_states = true })
    local nl = m.config.num_hidden_layers
    for l = 0, nl - 1 do
      local got = EX.extract_activation(m, nil, ids, l, 4)
      if l < nl - 1 then T.ok(maxdiff(got, hidden[l + 2]:select(1, 5)) <= 1e-5, name .. " layer " .. l)
      else T.ok(last_layer_ok(m, got, logits, 5, 1e-4), name .. " layer " .. l) end
    end
  end
end)

-- ---- generation ----------------------------------------------------------------------------

T.test("generate_response: a string without a chat template is raw text; seeded; new text only", function()
  local a = G.generate_response(model, tok, "Once upon a time", 30, 0.8, { seed = 7 })
  local want = model:generate(tok:encode("Once upon a time", { add_special_tokens = true }),
    { max_new_tokens = 30, temperature = 0.8, seed = 7 })
  T.eq(a, want.text)
  T.eq(G.generate_response(model, tok, "Once upon a time", 30, 0.8, { seed = 7 }), a, "reproducible")
  T.ne(G.generate_response(model, tok, "Once upon a time", 30, 0.8, { seed = 8 }), a, "seed matters")
  -- defaults: 256 tokens at 0.7, seed 0
  local d, ids = G.generate_response(model, nil, "Once upon a time")
  local wd = model:generate("Once upon a time", { max_new_tokens = 256, temperature = 0.7 })
  T.eq(d, wd.text)
  T.eq(ids, wd.ids)
  -- greedy
  local golden = seer.json.decode(seer.read_file(root .. "/golden/golden.json"))
  local _, gids = G.generate_response(model, nil, golden.prompt_ids_with_bos, golden.greedy_n, 0)
  T.eq(gids, golden.greedy_new_ids)
  T.raises(function() G.generate_response(model, nil, "x", 5, 0, { chat = true }) end, "no chat template")
  T.raises(function() G.generate_response(model, nil, "x", 5, 0, { sed = 1 }) end, "unknown option 'sed'")
end)

T.test("generate_response: a string is a user message when the tokenizer has a chat template", function()
  local text = G.generate_response(model, chat_tok, "Hi there", 20, 0.7, { seed = 3 })
  local ids = chat_tok:apply_chat_template({ { role = "user", content = "Hi there" } }, { add_generation_prompt = true, tokenize = true })
  T.eq(text, model:generate(ids, { max_new_tokens = 20, temperature = 0.7, seed = 3 }).text)
  local raw = G.generate_response(model, chat_tok, "Hi there", 20, 0.7, { seed = 3, chat = false })
  T.eq(raw, model:generate(tok:encode("Hi there", { add_special_tokens = true }), { max_new_tokens = 20, temperature = 0.7, seed = 3 }).text)
end)

T.test("generate_response: a tokenizer without a chat template takes opts.chat_template, as its error advises", function()
  local chat = { { role = "user", content = "Hi there" } }
  -- the advice names an option generate_response accepts
  local msg = T.raises(function() G.generate_response(model, tok, chat, 5, 0) end, "pass opts.chat_template to generate_response")
  T.ok(not msg:find("unknown option", 1, true), msg)
  local tmpl = chat_tok.chat_template
  local text, ids = G.generate_response(model, tok, chat, 20, 0.7, { seed = 3, chat_template = tmpl })
  local want = model:generate(tok:apply_chat_template(chat, { add_generation_prompt = true, tokenize = true, chat_template = tmpl }),
    { max_new_tokens = 20, temperature = 0.7, seed = 3 })
  T.eq(text, want.text)
  T.eq(ids, want.ids)
  -- the same as a tokenizer that has the template; a string becomes a user message with it
  T.eq(text, G.generate_response(model, chat_tok, chat, 20, 0.7, { seed = 3 }))
  T.eq(G.generate_response(model, tok, "Hi there", 20, 0.7, { seed = 3, chat_template = tmpl }), text)
  T.eq(G.generate_response(model, tok, "Hi there", 20, 0.7, { seed = 3, chat_template = tmpl, chat = false }),
    G.generate_response(model, tok, "Hi there", 20, 0.7, { seed = 3 }), "chat = false still sends raw text")
  T.raises(function() G.generate_response(model, tok, chat, 5, 0, { chat_template = 5 }) end, "option 'chat_template' must be a string")
  -- batch_generate takes it too: answer 1 is generate_response's with the same seed
  local answers = BG.batch_generate(model, tok, { chat, "Hi there" }, 20, 0.7, 0.9, { chat_template = tmpl, seed = 3 })
  T.eq(answers[1], (G.generate_response(model, tok, chat, 20, 0.7, { seed = 3, top_p = 0.9, chat_template = tmpl })))
  T.eq(answers[2], (G.generate_response(model, tok, "Hi there", 20, 0.7, { seed = 4, top_p = 0.9, chat_template = tmpl })),
       "a string is a user message with the given template (conversation i: seed + i - 1)")
  T.raises(function() BG.batch_generate(model, tok, { chat }, 5, 0, 0.9) end, "pass opts.chat_template to batch_generate")
end)

local function conversations()
  return {
    "Once upon a time",
    { { role = "user", content = "Tell me a story about a cat." } },
    { { role = "user", content = "Tell me a story." }, { role = "assistant", content = "Once upon a time, there was a" } },
    "Once upon a time",
    { 1, 403, 407, 261, 378, 1178 % 512 },
    "Lily and Tom went to the park. They saw a big tree and",
  }
end

T.test("batch_generate: answer i is exactly generating conversation i alone (varied lengths, prefill, seeds)", function()
  local convs = conversations()
  local texts, ids = BG.batch_generate(model, chat_tok, convs, 25, 0.9, 0.9, { seed = 11 })
  T.eq(#texts, #convs)
  for i, conv in ipairs(convs) do
    local want, want_ids = G.generate_response(model, chat_tok, conv, 25, 0.9, { top_p = 0.9, seed = 11 + i - 1 })
    T.eq(texts[i], want, "answer " .. i)
    T.eq(ids[i], want_ids, "ids " .. i)
    -- and straight from the model, the prompt built by hand
    local prompt
    if type(conv) == "string" then
      prompt = chat_tok:apply_chat_template({ { role = "user", content = conv } }, { add_generation_prompt = true, tokenize = true })
    elseif type(conv[1]) == "table" then
      local prefill = conv[#conv].role == "assistant"
      prompt = chat_tok:apply_chat_template(conv, { add_generation_prompt = not prefill, continue_final_message = prefill, tokenize = true })
    else
      prompt = conv
    end
    local out = model:generate(prompt, { max_new_tokens = 25, temperature = 0.9, top_p = 0.9, seed = 11 + i - 1 })
    T.eq(ids[i], out.ids, "model:generate " .. i)
    T.eq(texts[i], out.text, "model:generate text " .. i)
  end
  -- the same conversation twice gets two different samples (different seeds)
  T.ne(texts[1], texts[4])
  -- reproducible
  T.eq(BG.batch_generate(model, chat_tok, convs, 25, 0.9, 0.9, { seed = 11 }), texts)
  -- the prefill is continued, not closed: the prompt ends with the prefill's tokens
  local pre = G.prompt_ids(model, chat_tok, convs[3])
  local pre_text = chat_tok:decode(pre)
  T.ok(pre_text:sub(-#"model\nOnce upon a time, there was a") == "model\nOnce upon a time, there was a",
    "prompt ends with the open prefill: " .. pre_text)
  T.raises(function() BG.batch_generate(model, nil, { { role = "user", content = "x" } }) end, "expected a list of conversations")
  T.raises(function() BG.batch_generate(model, nil, { "a", { { role = "user", content = "x" } } }, 5) end, "conversation 2: .*no chat template")
  T.raises(function() BG.batch_generate(model, nil, { [1] = "a", [3] = "b" }, 5) end,
    "conversation 2 is missing (the list has a hole before conversation 3)", true)
  T.raises(function() BG.batch_generate(model, nil, { "a", "b" }, 5, 0 / 0) end, "prompt 1: temperature must be a finite number", true)
end)

T.test("batch_generate: defaults are 100 tokens, temperature 0.7, top_p 0.9, seed 0", function()
  local texts = BG.batch_generate(model, nil, { "Once upon a time", "The dog" })
  T.eq(texts[1], G.generate_response(model, nil, "Once upon a time", 100, 0.7, { top_p = 0.9, seed = 0 }))
  T.eq(texts[2], G.generate_response(model, nil, "The dog", 100, 0.7, { top_p = 0.9, seed = 1 }))
end)

-- ---- contrast vectors ----------------------------------------------------------------------

local DOG = {
  "Once upon a time, there was a dog", "Tom had a big brown dog", "Lily played with her dog",
  "The little girl saw a dog", "One day, a happy dog", "He loved his dog",
}
local CAT = {
  "Once upon a time, there was a cat", "Tom had a big brown cat", "Lily played with her cat",
  "The little girl saw a cat", "One day, a happy cat", "He loved his cat",
}

T.test("mean_difference: the difference of the set means; identical sets give ~0", function()
  local v = C.mean_difference(model, nil, DOG, CAT, 2)
  T.eq(v:size(), { 64 })
  local a = EX.extract_activations(model, nil, DOG, 2)
  local b = EX.extract_activations(model, nil, CAT, 2)
  T.ok(maxdiff(v, a:mean(1) - b:mean(1)) <= 1e-5)
  T.ok(v:norm() > 0.5, "dog vs cat differ: " .. v:norm())
  T.ok(C.mean_difference(model, nil, DOG, DOG, 2):norm() <= 1e-5)
  -- sets of different sizes are fine
  T.eq(C.mean_difference(model, nil, { DOG[1] }, CAT, 2, 0):size(), { 64 })
end)

T.test("principal_component finds a planted direction, unit norm, sign along the mean", function()
  local d, n = 64, 40
  local u = tensor.randn({ d }, { seed = 3 })
  u = u / u:norm()
  local noise = tensor.randn({ n, d }, { seed = 4 }) * 0.05
  local coef = tensor.randn({ n, 1 }, { seed = 5 }) * 2 + 1 -- spread along u, mean along +u
  local diffs = coef * u:view(1, d) + noise
  local pc, explained = C.principal_component(diffs)
  T.near(pc:norm(), 1, 1e-4)
  T.ok(pc:dot(u) > 0.99, "aligned with the planted direction: " .. pc:dot(u))
  T.ok(explained > 0.9 and explained <= 1, "explained " .. explained)
  -- flipping every difference flips the sign
  local npc = C.principal_component(-diffs)
  T.ok(npc:dot(u) < -0.99)
  -- uncentered on a constant offset also finds it
  local off = u:view(1, d) * 3 + noise
  T.ok(C.principal_component(off, { center = false }):dot(u) > 0.99)
  -- no variance: the zero vector
  local z, ez = C.principal_component(tensor.zeros(5, d))
  T.eq(z:norm(), 0)
  T.eq(ez, 0)
  -- NaN or infinity is an error, not "no variance"; options checked
  local bad = tensor.zeros(5, d)
  bad[2][3] = 0 / 0
  T.raises(function() C.principal_component(bad) end, "diffs hold NaN or infinite values")
  T.raises(function() C.principal_component(diffs, { iterations = 0 }) end, "iterations must be a whole number from 1, got 0")
  T.raises(function() C.principal_component(diffs, { tolerance = -1 }) end, "tolerance must be a finite number >= 0")
end)

T.test("first_principal_component on the model: unit norm, along the mean difference; ~0 for identical sets", function()
  local pc, explained = C.first_principal_component(model, nil, DOG, CAT, 2)
  T.eq(pc:size(), { 64 })
  T.near(pc:norm(), 1, 1e-4)
  local md = C.mean_difference(model, nil, DOG, CAT, 2)
  T.ok(pc:dot(md) >= 0)
  T.ok(explained > 0 and explained <= 1)
  -- identical sets: every paired difference is 0
  T.ok(C.first_principal_component(model, nil, DOG, DOG, 2):norm() <= 1e-6)
  T.raises(function() C.first_principal_component(model, nil, DOG, { CAT[1] }, 2) end, "same length")
end)

-- ---- steering ------------------------------------------------------------------------------

local PROMPT = tok:encode("Once upon a time", { add_special_tokens = true })

T.test("steering_hook: scoped, returns fn's results, removed after fn and after an error", function()
  need_hooks()
  local vec = C.mean_difference(model, nil, DOG, CAT, 2)
  local plain = model:generate(PROMPT, { max_new_tokens = 30 }).ids
  local steered, extra = ST.steering_hook(model, 2, vec, 8.0, 0, function()
    return model:generate(PROMPT, { max_new_tokens = 30 }).ids, "second"
  end)
  T.eq(extra, "second")
  T.ne(steered, plain, "steering changes greedy generation")
  T.eq(model:generate(PROMPT, { max_new_tokens = 30 }).ids, plain, "removed after fn")
  local ok, err = pcall(ST.steering_hook, model, 2, vec, 8.0, 0, function() error("boom") end)
  T.ok(not ok and tostring(err):find("boom"))
  T.eq(model:generate(PROMPT, { max_new_tokens = 30 }).ids, plain, "removed after an error")
  -- short forms: (vec, fn) and (vec, strength, fn)
  T.eq(ST.steering_hook(model, 2, vec, 8.0, function() return model:generate(PROMPT, { max_new_tokens = 30 }).ids end), steered)
  T.raises(function() ST.steering_hook(model, 2, tensor.zeros(3), 1, 0, function() end) end, "vector must have shape %[64%]")
  T.raises(function() ST.steering_hook(model, 2, vec, 1, 0) end, "last argument must be the function")
end)

T.test("steering_sweep: prompts x strengths x samples in one batch, each text exactly steering_hook + generate_response alone", function()
  need_hooks()
  local vec = C.mean_difference(model, nil, DOG, CAT, 2)
  local prompts = { "Once upon a time", { 1, 403, 407 }, "The dog", "Once upon a time" }
  local strengths = { 0, 6.0, -3.5 }
  for _, case in ipairs({
    { start_pos = 0, temperature = 0.9, samples = 2, max_new_tokens = 12, seed = 4, top_p = 0.95 },
    { start_pos = 6, temperature = 0, max_new_tokens = 12, max_batch = 3, shared = true }, -- past every prompt: prompts shared
    { start_pos = -1, temperature = 0.7, max_new_tokens = 9, stop = "." },
  }) do
    local shared = case.shared
    case.shared = nil
    local taken0 = require("seer.core.model").shared_prefills()
    local texts, ids = ST.steering_sweep(model, nil, prompts, 2, vec, strengths, case)
    local taken = require("seer.core.model").shared_prefills() - taken0
    -- every prompt's tokens precede start_pos: each one is computed at most once for the sweep
    if shared then T.ok(taken >= #strengths * #prompts - 3, ("prompts taken from another sequence: %d of %d"):format(taken, #strengths * #prompts)) end
    T.eq(#texts, #strengths)
    local differ = false
    for s, strength in ipairs(strengths) do
      T.eq(#texts[s], #prompts)
      for p, prompt in ipairs(prompts) do
        for k = 1, case.samples or 1 do
          local gen = { seed = (case.seed or 0) + k - 1, top_p = case.top_p, stop = case.stop }
          local want, want_ids = ST.steering_hook(model, 2, vec, strength, case.start_pos, function()
            return G.generate_response(model, nil, prompt, case.max_new_tokens, case.temperature, gen)
          end)
          local got, got_ids = texts[s][p], ids[s][p]
          if case.samples then got, got_ids = got[k], got_ids[k] end
          T.eq(got_ids, want_ids, ("strength %g, prompt %d, sample %d: the same tokens as alone"):format(strength, p, k))
          T.eq(got, want)
          if s > 1 and got ~= (case.samples and texts[1][p][k] or texts[1][p]) then differ = true end
        end
      end
    end
    T.ok(differ, "some strength changes some text")
    T.eq(texts[1][1], texts[1][4], "the same prompt, strength and seed: the same text")
  end
  T.raises(function() ST.steering_sweep(model, nil, "Once", 2, vec, { 1 }) end, "steering_sweep: prompts must be a list")
  T.raises(function() ST.steering_sweep(model, nil, { "Once" }, 2, vec, { 1, "x" }) end, "steering_sweep: strength 2 is a string")
  T.raises(function() ST.steering_sweep(model, nil, { "Once" }, 2, vec, { 1, 0 / 0 }) end, "strength must be a finite number")
  T.raises(function() ST.steering_sweep(model, nil, { "Once" }, 2, vec, {}) end, "strengths is empty")
  T.raises(function() ST.steering_sweep(model, nil, { "Once", 7 }, 2, vec, { 1 }) end, "steering_sweep: prompt 2: expected a string")
  T.raises(function() ST.steering_sweep(model, nil, { "Once" }, 2, vec, { 1 }, { samples = 0 }) end, "samples")
  T.raises(function() ST.steering_sweep(model, nil, { "Once" }, 2, vec, { 1 }, { strength = 2 }) end, "unknown option 'strength'")
  T.raises(function() ST.steering_sweep(model, nil, { "Once" }, 9, vec, { 1 }) end, "layer 9 does not exist")
  -- a start_pos no generation reaches: the error says which strength and prompt
  T.raises(function() ST.steering_sweep(model, nil, { "Once upon a time", "The" }, 2, vec, { 1, 2 }, { start_pos = 40, max_new_tokens = 5 }) end,
    "steering_sweep: strength 1 %(1%), prompt 1: generate_batch: the add at blocks.2.hook_resid_post")
end)

T.test("steering_hook: strength * vector is added at positions >= start_pos only", function()
  need_hooks()
  local vec = tensor.randn({ 64 }, { seed = 9 })
  local ids = PROMPT
  local _, h0 = model:forward(ids, { hidden_states = true })
  local base = h0[4] -- after layer 2
  local got = ST.steering_hook(model, 2, vec, 0.5, 2, function() return EX.extract_layers(model, nil, ids, { 2 }, 3) end)
  T.ok(maxdiff(got:select(1, 1), base:select(1, 4) + vec * 0.5) <= 1e-5, "position 3 steered by 0.5 * vec")
  local early = ST.steering_hook(model, 2, vec, 0.5, 2, function() return EX.extract_activation(model, nil, ids, 2, 1) end)
  T.ok(maxdiff(early, base:select(1, 2)) <= 1e-6, "position 1 untouched")
end)

T.test("steering_hook with start_pos >= 1 steers generated tokens (the reference's defect)", function()
  need_hooks()
  local vec = C.mean_difference(model, nil, DOG, CAT, 2)
  local n = #PROMPT
  local plain = model:generate(PROMPT, { max_new_tokens = 30 }).ids
  -- steering only positions >= n: the prompt is untouched, so the first new token (predicted at
  -- position n - 1) is the same; every later one is read from a steered position
  local gen_only = ST.steering_hook(model, 2, vec, 8.0, n, function() return model:generate(PROMPT, { max_new_tokens = 30 }).ids end)
  T.eq(gen_only[1], plain[1])
  T.ne(gen_only, plain, "generated tokens are steered")
  -- also through batch_generate: per-sequence absolute positions, same as alone
  local convs = { PROMPT, tok:encode("The dog", { add_special_tokens = true }) }
  local batch = ST.steering_hook(model, 2, vec, 8.0, 5, function() return BG.batch_generate(model, nil, convs, 20, 0) end)
  for i, c in ipairs(convs) do
    local alone = ST.steering_hook(model, 2, vec, 8.0, 5, function() return G.generate_response(model, nil, c, 20, 0) end)
    T.eq(batch[i], alone, "conversation " .. i)
  end
  -- a start position past everything generated selects no position: an error naming the hook
  -- (it was a silent no-op that returned the unsteered text)
  T.raises(function()
    ST.steering_hook(model, 2, vec, 8.0, n + 100, function() return model:generate(PROMPT, { max_new_tokens = 30 }).ids end)
  end, "generate: the add at blocks.2.hook_resid_post selected no position during the generation", true)
end)

T.test("add_steering_hook is persistent until handle:remove()", function()
  need_hooks()
  local vec = C.mean_difference(model, nil, DOG, CAT, 2)
  local plain = model:generate(PROMPT, { max_new_tokens = 30 }).ids
  local scoped = ST.steering_hook(model, 2, vec, 8.0, 0, function() return model:generate(PROMPT, { max_new_tokens = 30 }).ids end)
  local h = ST.add_steering_hook(model, 2, vec, 8.0, 0)
  local ok, err = pcall(function()
    T.eq(model:generate(PROMPT, { max_new_tokens = 30 }).ids, scoped)
    T.eq(model:generate(PROMPT, { max_new_tokens = 30 }).ids, scoped, "still there")
  end)
  h:remove()
  assert(ok, err)
  T.eq(model:generate(PROMPT, { max_new_tokens = 30 }).ids, plain)
end)

-- The issue's steering test. A dog-minus-cat contrast vector at layer 2 of 5 (the middle):
-- mean over six prompt pairs that end in the word, read at position -2, the word's first token
-- ("▁do" vs "▁c"; "dog" is "▁do" + "g"). It is added from position 1 on (everything after BOS,
-- generated tokens included) while N stories are sampled from "Once upon a time" with seeds
-- 1..N (temperature 0.8); the unsteered control uses the same seeds. Measured over eight seed
-- ranges of 80 samples: control 3-7 stories mention a dog, steered 34-49 (strength 0.45 adds
-- about 3.3 to a residual of norm ~7; much stronger pushes break the text). The threshold,
-- control + 20 and 4x the control, sits well inside that gap.
local STEER_N, STEER_TOKENS, STEER_T, STEER_STRENGTH, STEER_LAYER = 80, 48, 0.8, 0.45, 2
local function count_word(texts, word)
  local c = 0
  for _, t in ipairs(texts) do
    if t:lower():find(word, 1, true) then c = c + 1 end
  end
  return c
end

T.test("steering with a dog-vs-cat contrast vector raises the frequency of 'dog' far above the control", function()
  need_hooks()
  local vec = C.mean_difference(model, nil, DOG, CAT, STEER_LAYER, -2)
  local convs = {}
  for i = 1, STEER_N do convs[i] = PROMPT end
  local control = BG.batch_generate(model, nil, convs, STEER_TOKENS, STEER_T, 1.0, { seed = 1 })
  local steered = ST.steering_hook(model, STEER_LAYER, vec, STEER_STRENGTH, 1, function()
    return BG.batch_generate(model, nil, convs, STEER_TOKENS, STEER_T, 1.0, { seed = 1 })
  end)
  local c, s = count_word(control, "dog"), count_word(steered, "dog")
  io.write(("    steering: %d/%d stories mention a dog unsteered, %d/%d steered (layer %d, strength %g; 'cat': %d vs %d)\n")
    :format(c, STEER_N, s, STEER_N, STEER_LAYER, STEER_STRENGTH, count_word(control, "cat"), count_word(steered, "cat")))
  T.ok(s >= c + 20 and s >= 4 * c, ("steered %d vs control %d: needs >= control + 20 and >= 4x control"):format(s, c))
end)

-- ---- ablation ------------------------------------------------------------------------------

T.test("refusal_direction is the difference of means; ablate_everywhere leaves no component along it", function()
  need_hooks()
  local r = R.refusal_direction(model, nil, DOG, CAT, 2)
  T.ok(maxdiff(r, C.mean_difference(model, nil, DOG, CAT, 2)) <= 1e-6)
  T.near(R.refusal_direction(model, nil, DOG, CAT, 2, -1, { unit = true }):norm(), 1, 1e-5)
  local rhat = r / r:norm()
  local ids = tok:encode("Once upon a time, there was a dog named Max.", { add_special_tokens = true })
  local last = "blocks.4.hook_resid_post"
  local _, clean = model:run_with_cache(ids, { names = { last } })
  local function worst(cache)
    local w = 0
    local a = cache[last]
    for i = 1, a:size(1) do w = math.max(w, math.abs(a:select(1, i):dot(rhat)) / a:select(1, i):norm()) end
    return w
  end
  T.ok(worst(clean) > 0.05, "the unablated residual has a component along r: " .. worst(clean))
  local _, abl = R.ablate_everywhere(model, r, function() return model:run_with_cache(ids, { names = { last } }) end)
  T.ok(worst(abl) <= 1e-5, "ablated: " .. worst(abl))
  -- only hook_resid_pre is not enough: the last block writes the direction back
  local _, pre = R.ablate_everywhere(model, r, function() return model:run_with_cache(ids, { names = { last } }) end,
    { points = { "hook_resid_pre" } })
  T.ok(worst(pre) > 1e-3, "resid_pre alone leaves " .. worst(pre))
  -- generation under ablation is deterministic and the hooks are gone afterwards
  local plain = model:generate(ids, { max_new_tokens = 20 }).ids
  R.ablate_everywhere(model, r, function() model:generate(ids, { max_new_tokens = 20 }) end)
  T.eq(model:generate(ids, { max_new_tokens = 20 }).ids, plain)
end)

T.test("ablate_everywhere removes the direction from the final residual on every parity architecture", function()
  need_hooks()
  for _, name in ipairs(parity_models()) do
    local m = seer.model.load(parity_root .. "/" .. name)
    local L = m.config.num_hidden_layers
    local ids = { 1, 5, 9, 20, 33, 7, 2 }
    local r = tensor.randn({ m.config.hidden_size }, { seed = 2 })
    r = r / r:norm()
    local last = ("blocks.%d.hook_resid_post"):format(L - 1)
    local _, cache = R.ablate_everywhere(m, r, function() return m:run_with_cache(ids, { names = { last } }) end)
    local a = cache[last]
    for i = 1, a:size(1) do
      T.ok(math.abs(a:select(1, i):dot(r)) <= 1e-4 * a:select(1, i):norm(), name .. " position " .. (i - 1))
    end
  end
end)

-- ---- patching ------------------------------------------------------------------------------

local CLEAN = tok:encode("Once upon a time, there was a dog", { add_special_tokens = true })
local CORRUPT = tok:encode("Once upon a time, there was a cat", { add_special_tokens = true })

T.test("patch: the clean final residual at every position reproduces the clean logits", function()
  need_hooks()
  T.eq(#CLEAN, #CORRUPT)
  local clean_logits = model:forward(CLEAN)
  local corrupt_logits = model:forward(CORRUPT)
  local metric = function(l) return (l - clean_logits):abs():max() end
  T.ok(metric(corrupt_logits) > 0.1)
  for _, name in ipairs({ "blocks.4.hook_resid_post", "blocks.0.hook_resid_pre", "blocks.2.hook_resid_mid" }) do
    local v, logits = AP.patch(model, CLEAN, CORRUPT, name, nil, metric)
    T.ok(v <= 1e-4, name .. ": " .. v)
    T.eq(logits:size(), clean_logits:size())
  end
  -- patching only the first positions (where the inputs agree) changes nothing
  local same = {}
  for p = 0, #CLEAN - 3 do same[#same + 1] = p end
  local v = AP.patch(model, CLEAN, CORRUPT, "blocks.0.hook_resid_pre", same, function(l) return (l - corrupt_logits):abs():max() end)
  T.ok(v <= 1e-5, "patching identical positions: " .. v)
  T.raises(function() AP.patch(model, CLEAN, CORRUPT, "blocks.0.hook_resid_pre", nil, "x") end, "metric must be a function")
end)

T.test("patch_sweep: layers x positions of metric values with the clean and corrupt baselines", function()
  need_hooks()
  local metric = AP.logit_difference(tok:encode("The dog", { add_special_tokens = false })[2], tok:encode("The cat", { add_special_tokens = false })[2])
  local grid, info = AP.patch_sweep(model, CLEAN, CORRUPT, metric)
  local n = #CLEAN
  T.eq(grid:size(), { 5, n })
  T.eq(info.layers, { 0, 1, 2, 3, 4 })
  T.eq(#info.positions, n)
  T.near(info.clean, metric(model:forward(CLEAN)), 1e-5)
  T.near(info.corrupt, metric(model:forward(CORRUPT)), 1e-5)
  -- positions before the differing tokens hold the same activations in both runs
  for l = 1, 5 do
    for j = 1, n - 2 do T.near(grid[{ l, j }], info.corrupt, 1e-4, ("layer %d pos %d"):format(l - 1, j - 1)) end
  end
  -- the last position at the last layer's input carries most of the effect in a 5-layer model
  T.ok(math.abs(grid[{ 5, n }] - info.corrupt) > 1e-3)
  local sub = AP.patch_sweep(model, CLEAN, CORRUPT, metric, { layers = { 3 }, positions = { -1, 0 }, point = "hook_resid_post" })
  T.eq(sub:size(), { 1, 2 })
  -- the last layer's output at the last position decides the last position's logits entirely
  local full = AP.patch_sweep(model, CLEAN, CORRUPT, metric, { layers = { 4 }, positions = { n - 1 }, point = "hook_resid_post" })
  T.near(full[{ 1, 1 }], info.clean, 1e-4)
end)

T.test("patch: prompts of different lengths: -1 is each prompt's last token, pairs map explicitly, errors name patch", function()
  need_hooks()
  local clean = tok:encode("Once upon a time there was a dog", { add_special_tokens = true })
  local corrupt = tok:encode("Once upon a time there was a big red cat", { add_special_tokens = true })
  T.ok(#clean < #corrupt, #clean .. " vs " .. #corrupt)
  local metric = AP.logit_difference(clean[#clean], corrupt[#corrupt])
  local clean_v, corrupt_v = metric(model:forward(clean)), metric(model:forward(corrupt))
  T.ok(math.abs(clean_v - corrupt_v) > 1e-3)
  -- the last layer's output at the last position decides the last logits: the clean metric
  local last = "blocks.4.hook_resid_post"
  local v = AP.patch(model, clean, corrupt, last, { -1 }, metric)
  T.near(v, clean_v, 1e-4, "-1: clean's last token onto corrupt's last")
  T.near(AP.patch(model, clean, corrupt, last, { { -1, -1 } }, metric), clean_v, 1e-4)
  T.near(AP.patch(model, clean, corrupt, last, { { #clean - 1, #corrupt - 1 } }, metric), clean_v, 1e-4)
  -- a position both prompts share (the BOS) patched onto itself at the last layer changes nothing at the end
  T.near(AP.patch(model, clean, corrupt, last, { 0 }, metric), corrupt_v, 1e-5)
  -- a position the clean prompt lacks: the error names patch, the prompt and its length, not replace
  local ok, err = pcall(AP.patch, model, clean, corrupt, "blocks.2.hook_resid_post", { #corrupt - 1 }, metric)
  T.ok(not ok)
  T.contains(err, ("patch: position %d is outside the clean prompt of %d tokens"):format(#corrupt - 1, #clean))
  T.contains(err, "{clean_pos, corrupt_pos} pair")
  T.ok(not err:find("replace", 1, true), err)
  T.raises(function() AP.patch(model, clean, corrupt, last, { { 0, 99 } }, metric) end, "outside the corrupt prompt", true)
  T.raises(function() AP.patch(model, clean, corrupt, last, { { 0, 1 }, { 2, 1 } }, metric) end, "corrupt position 1 is patched from two clean positions", true)
  T.raises(function() AP.patch(model, clean, corrupt, "blocks.1.attn.hook_pattern", { -1 }, metric) end, "cannot move to other positions", true)
  -- the sweep resolves its positions the same way
  local grid, info = AP.patch_sweep(model, clean, corrupt, metric, { layers = { 4 }, positions = { -1, 0 }, point = "hook_resid_post", progress = false })
  T.near(grid[{ 1, 1 }], clean_v, 1e-4)
  T.near(grid[{ 1, 2 }], corrupt_v, 1e-5)
  T.near(info.clean, clean_v, 1e-5)
  T.raises(function() AP.patch_sweep(model, clean, corrupt, metric, { positions = { #corrupt - 1 }, progress = false }) end,
    "patch_sweep: position " .. (#corrupt - 1) .. " is outside the clean prompt", true)
end)

-- ---- logit lens ----------------------------------------------------------------------------

T.test("logit_lens at the last layer is the model's own top-k; per layer rows in order", function()
  need_hooks()
  local ids = tok:encode("Once upon a time, there was a little", { add_special_tokens = true })
  local logits = model:forward(ids)
  local p, top = logits:select(1, -1):softmax():topk(5)
  local rows = LL.logit_lens(model, nil, ids, { k = 5 })
  T.eq(#rows, 5)
  for i, r in ipairs(rows) do T.eq(r.layer, i - 1) end
  local last = rows[5]
  T.eq(last.ids, top:totable())
  for j = 1, 5 do
    T.near(last.probs[j], p[j], 1e-5)
    T.eq(last.tokens[j], tok:decode({ last.ids[j] }))
  end
  local two = LL.logit_lens(model, nil, ids, { layers = { 4, 1 }, position = 2, k = 3 })
  T.eq(#two, 2)
  T.eq(two[1].layer, 4)
  T.eq(#two[2].ids, 3)
  local _, t2 = logits:select(1, 3):softmax():topk(3)
  T.eq(two[1].ids, t2:totable())
  T.ne(rows[1].ids, rows[5].ids, "early layers predict something else")
  T.raises(function() LL.logit_lens(model, nil, ids, { k = 0 }) end, "logit_lens: k must be a whole number from 1")
  T.raises(function() LL.logit_lens(model, nil, ids, { k = 2.5 }) end, "got 2.5")
  T.raises(function() LL.logit_lens(model, nil, ids, { layers = {} }) end, "layers must be a non%-empty list")
end)

T.test("logit_lens at the last layer is the model's own top-k on every parity architecture", function()
  need_hooks()
  for _, name in ipairs(parity_models()) do
    local m = seer.model.load(parity_root .. "/" .. name)
    local ids = { 1, 5, 9, 20, 33, 7, 2 }
    local logits = m:forward(ids)
    local rows = LL.logit_lens(m, nil, ids, { k = 4, layers = { -1 } })
    local _, top = logits:select(1, -1):topk(4)
    T.eq(rows[1].ids, top:totable(), name)
    T.ok(maxdiff(rows[1].logits, logits:select(1, -1)) <= 1e-4, name .. " logits")
  end
end)

T.test("toolkit errors about arguments name the caller's line, even when the check is deep inside seer", function()
  local file = debug.getinfo(1, "S").short_src
  local cases = {
    { function() local r = C.mean_difference(model, nil, { "a" }, { "b" }, 12) return r end, "layer 12 does not exist" },
    { function() local r = R.refusal_direction(model, nil, { "a" }, { "b" }, 0, -1, { units = true }) return r end, "unknown option 'units'" },
    { function() local r = R.ablation_hooks(model, tensor.zeros(64)) return r end, "the direction is the zero vector" },
    { function() local r = LL.logit_lens(model, nil, "Once", { top_k = 3 }) return r end, "unknown option 'top_k'" },
    { function() local r = BG.batch_generate(model, nil, { "Once" }, -1) return r end, "max_new_tokens must be a whole number" },
    { function() local r = G.generate_response(model, nil, "Once", 5, -1) return r end, "temperature must be a finite number" },
    { function() local r = AP.patch(model, "Once upon", "Once upon a", "blocks.0.hook_resid_post", nil, AP.logit_difference(1, 2)) return r end,
      "patch: clean (3 tokens) and corrupt (4 tokens) differ in length; pass positions" },
    { function() local r = AP.patch(model, "Once", "Once", "blocks.9.hook_resid_post", nil, AP.logit_difference(1, 2)) return r end,
      "'blocks.9.hook_resid_post' is not a hook name of this model" },
    { function() local r = C.principal_component(tensor.ones(3, 2), { iters = 3 }) return r end, "unknown option 'iters'" },
    -- a position outside one prompt of a list names the function called and the prompt (it said
    -- "extract_activation: position ..." for all of them)
    { function() local r = EX.extract_activations(model, nil, { "Once upon a time", "Hi" }, 2, 4) return r end,
      'extract_activations: input 2 ("Hi"): position 4 is outside the sequence of' },
    { function() local r = R.refusal_direction(model, nil, { "Once upon a time there was a little girl" }, { "Once", "Hi" }, 2, -6) return r end,
      'refusal_direction: harmless prompt 1 ("Once"): position -6 is outside the sequence of' },
    { function() local r = R.refusal_direction(model, nil, { "a" }, { "b" }, 9) return r end, "refusal_direction: layer 9 does not exist" },
    { function() local r = C.mean_difference(model, nil, { "Once upon a time" }, { "Hi" }, 2, 4) return r end,
      'mean_difference: neg_prompts[1] ("Hi"): position 4 is outside' },
  }
  for i, c in ipairs(cases) do
    local ok, err = pcall(c[1])
    T.ok(not ok, "case " .. i .. " raised")
    T.eq(tostring(err):match("^([^%s:]+):%d+: "), file, ("case %d: %s"):format(i, tostring(err)))
    T.ok(tostring(err):find(c[2], 1, true), ("case %d: %s"):format(i, tostring(err)))
  end
  -- an error of the caller's own code (a metric) keeps its own position
  local ok, err = pcall(function()
    local r = AP.patch(model, "Once", "Once", "blocks.0.hook_resid_post", nil, function() error("my metric broke") end)
    return r
  end)
  T.ok(not ok)
  T.ok(tostring(err):find(file .. ":%d+: my metric broke"), tostring(err))
end)
