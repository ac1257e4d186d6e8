-- The reference's keyword arguments translated to a table in the last argument
-- (`generate_response(model, tok, prompt, max_tokens=20, temperature=0)` ->
-- `generate_response(model, tok, prompt, {max_tokens = 20, temperature = 0})`): every toolkit
-- function that has them takes the table, gives the same numbers as the positional form, and
-- refuses an unknown name by listing the valid ones (the probe's translation was refused with
-- "option 'max_new_tokens' must be a number", an option the caller never passed).
local T = require "testing"
local tensor = seer.tensor

local here = seer.script_dir()
local model = seer.model.load(here .. "/../fixtures/models/stories260K")
local tok = model.tokenizer

local EX = require "toolkit.extract_activations"
local G = require "toolkit.generate_response"
local BG = require "toolkit.batch_generate"
local C = require "toolkit.contrastive"
local ST = require "toolkit.steering_hook"
local R = require "toolkit.refusal_direction"

local TEXT = "The dog ran to the park."
local PROMPT = "Once upon a time"
local DOG = { "Tom had a big brown dog", "Lily saw a little dog" }
local CAT = { "Tom had a big brown cat", "Lily saw a little cat" }
local file = debug.getinfo(1, "S").short_src

local function refused(fn, want) return T.refused_at(file, fn, want) end

T.test("generate_response: max_tokens and temperature as the reference's keywords, in one table with the options", function()
  local want = G.generate_response(model, tok, PROMPT, 20, 0)
  T.eq(G.generate_response(model, tok, PROMPT, { max_tokens = 20, temperature = 0 }), want)
  T.eq(G.generate_response(model, tok, PROMPT, 20, { temperature = 0 }), want)
  T.eq(G.generate_response(model, tok, PROMPT, nil, nil, { max_tokens = 20, temperature = 0 }), want)
  -- sampled: the table also holds the seed and sampling options, as the positional form's opts
  local sampled = G.generate_response(model, tok, PROMPT, 20, 0.8, { seed = 3, top_k = 10 })
  T.eq(G.generate_response(model, tok, PROMPT, { max_tokens = 20, temperature = 0.8, seed = 3, top_k = 10 }), sampled)
  -- defaults unchanged: 256 tokens at 0.7, seed 0
  T.eq(G.generate_response(model, tok, PROMPT, { seed = 0 }), G.generate_response(model, tok, PROMPT))
  refused(function() local r = G.generate_response(model, tok, PROMPT, { max_new_tokens = 20, temperature = 0 }); return r end,
    "generate_response: unknown option 'max_new_tokens'; valid options: chat, chat_template, max_tokens, min_new_tokens, min_p, "
    .. "repetition_penalty, seed, stop, stream, temperature, top_k, top_p")
  refused(function() local r = G.generate_response(model, tok, PROMPT, { max_tokens = "20" }); return r end,
    "generate_response: max_tokens must be a number, got string")
  refused(function() local r = G.generate_response(model, tok, PROMPT, 2.5); return r end,
    "generate_response: max_tokens must be a whole number from 0")
  refused(function() local r = G.generate_response(model, tok, PROMPT, 20, { max_tokens = 10 }); return r end,
    "generate_response: max_tokens is given twice")
  refused(function() local r = G.generate_response(model, tok, PROMPT, { max_tokens = 10 }, 0.5); return r end,
    "generate_response: the options table must be the last argument")
  refused(function() local r = G.generate_response(model, tok, PROMPT, { max_tokens = 10 }, nil, { seed = 1 }); return r end,
    "generate_response: options are given in two tables")
end)

T.test("batch_generate: max_new_tokens, temperature and top_p as the reference's keywords", function()
  local convs = { PROMPT, "The cat" }
  local want = BG.batch_generate(model, tok, convs, 12, 0.8, 0.9, { seed = 2 })
  T.eq(BG.batch_generate(model, tok, convs, { max_new_tokens = 12, temperature = 0.8, top_p = 0.9, seed = 2 }), want)
  T.eq(BG.batch_generate(model, tok, convs, 12, { temperature = 0.8, seed = 2 }), want)
  -- top_p named in the options table is used (it was overridden by the default 0.9)
  T.eq(BG.batch_generate(model, tok, convs, 12, 0.8, nil, { top_p = 0.5, seed = 2 }),
       BG.batch_generate(model, tok, convs, 12, 0.8, 0.5, { seed = 2 }))
  refused(function() local r = BG.batch_generate(model, tok, convs, { max_tokens = 12 }); return r end,
    "batch_generate: unknown option 'max_tokens'; valid options: chat, chat_template, max_new_tokens,")
  refused(function() local r = BG.batch_generate(model, tok, convs, 12, 0.8, 0.9, { top_p = 0.5 }); return r end,
    "batch_generate: top_p is given twice")
end)

T.test("extract_activation, extract_activations, extract_layers: layer_idx and position as keywords", function()
  local want = EX.extract_activation(model, tok, TEXT, 2):totable()
  T.eq(EX.extract_activation(model, tok, TEXT, { layer_idx = 2 }):totable(), want)
  T.eq(EX.extract_activation(model, tok, TEXT, { layer_idx = 2, position = -1 }):totable(), want)
  local at2 = EX.extract_activation(model, tok, TEXT, 2, -2):totable()
  T.eq(EX.extract_activation(model, tok, TEXT, 2, { position = -2 }):totable(), at2)
  T.eq(EX.extract_activation(model, tok, TEXT, { position = -2, layer_idx = 2 }):totable(), at2)
  T.ne(at2, want)
  refused(function() local r = EX.extract_activation(model, tok, TEXT, { layer = 2 }); return r end,
    "extract_activation: unknown option 'layer'; valid options: layer_idx, position")
  refused(function() local r = EX.extract_activation(model, tok, TEXT, { position = -1 }); return r end,
    "extract_activation: layer must be an integer (0-based), got nil")
  local batch = EX.extract_activations(model, tok, { TEXT, "a cat" }, 1, -2):totable()
  T.eq(EX.extract_activations(model, tok, { TEXT, "a cat" }, { layer_idx = 1, position = -2 }):totable(), batch)
  -- extract_layers: a list of layers stays a positional argument; a table with names is the options
  local layers = EX.extract_layers(model, tok, TEXT, { 1, 3 }, 2):totable()
  T.eq(EX.extract_layers(model, tok, TEXT, { layers = { 1, 3 }, position = 2 }):totable(), layers)
  T.eq(EX.extract_layers(model, tok, TEXT, { 1, 3 }, { position = 2 }):totable(), layers)
end)

T.test("get_layer_activations: {layer = n} (the reference's keyword); other names are refused", function()
  local want = EX.get_layer_activations(model, tok, TEXT, 2):totable()
  T.eq(EX.get_layer_activations(model, tok, TEXT, { layer = 2 }):totable(), want)
  refused(function() local r = EX.get_layer_activations(model, tok, TEXT, { layer_idx = 2 }); return r end,
    "get_layer_activations: unknown option 'layer_idx'; valid options: layer")
end)

T.test("steering_hook, create_steering_hook, add_steering_hook: layer_idx, vector, strength, start_pos as keywords", function()
  local vec = C.mean_difference(model, tok, DOG, CAT, 2)
  local function gen() return model:generate(PROMPT, { max_new_tokens = 20 }).ids end
  local want = ST.steering_hook(model, 2, vec, 8.0, 1, gen)
  T.ne(want, gen())
  T.eq(ST.create_steering_hook(model, { layer_idx = 2, vector = vec, strength = 8.0, start_pos = 1 }, gen), want)
  T.eq(ST.steering_hook(model, 2, vec, { strength = 8.0, start_pos = 1 }, gen), want)
  T.eq(ST.steering_hook(model, 2, { vector = vec, strength = 8.0, start_pos = 1 }, gen), want)
  -- the vector as a list of numbers is still the positional vector
  T.eq(ST.steering_hook(model, 2, vec:totable(), 8.0, 1, gen), want)
  T.eq(ST.steering_hook(model, 2, vec:totable(), { strength = 8.0, start_pos = 1 }, gen), want)
  local h = ST.add_steering_hook(model, { layer_idx = 2, vector = vec, strength = 8.0, start_pos = 1 })
  local ok, err = pcall(function() T.eq(gen(), want) end)
  h:remove()
  assert(ok, err)
  T.ne(gen(), want, "removed")
  refused(function() local r = ST.steering_hook(model, { layer_idx = 2, vector = vec, scale = 2 }, gen); return r end,
    "steering_hook: unknown option 'scale'; valid options: layer_idx, start_pos, strength, vector")
  refused(function() local r = ST.steering_hook(model, { layer_idx = 2, vector = vec, strength = "2" }, gen); return r end,
    "steering_hook: strength must be a number, got string")
  refused(function() local r = ST.steering_hook(model, { layer_idx = 2, vector = vec }); return r end,
    "steering_hook: the last argument must be the function to run while steering")
  refused(function() local r = ST.add_steering_hook(model, 2, vec, 1, 0, 5); return r end, "add_steering_hook: too many arguments")
  T.eq(gen(), model:generate(PROMPT, { max_new_tokens = 20 }).ids, "no hook left behind by the refused calls")
end)

T.test("mean_difference, first_principal_component, refusal_direction: layer_idx and position as keywords", function()
  local md = C.mean_difference(model, tok, DOG, CAT, 2, -2):totable()
  T.eq(C.mean_difference(model, tok, DOG, CAT, { layer_idx = 2, position = -2 }):totable(), md)
  local pc, ex = C.first_principal_component(model, tok, DOG, CAT, 2, -1, { center = false })
  local pc2, ex2 = C.first_principal_component(model, tok, DOG, CAT, { layer_idx = 2, center = false })
  T.eq(pc2:totable(), pc:totable())
  T.eq(ex2, ex)
  local pc3 = C.first_principal_component(model, tok, DOG, CAT, 2, { center = false })
  T.eq(pc3:totable(), pc:totable())
  local r = R.refusal_direction(model, tok, DOG, CAT, 2, -1, { unit = true }):totable()
  T.eq(R.refusal_direction(model, tok, DOG, CAT, { layer_idx = 2, unit = true }):totable(), r)
  T.eq(R.refusal_direction(model, tok, DOG, CAT, 2, { unit = true }):totable(), r)
  refused(function() local r = R.refusal_direction(model, tok, DOG, CAT, { layer = 2 }); return r end,
    "refusal_direction: unknown option 'layer'; valid options: layer_idx, position, unit")
  refused(function() local r = C.mean_difference(model, tok, DOG, CAT, { layer_idx = 2, centre = true }); return r end,
    "mean_difference: unknown option 'centre'; valid options: layer_idx, position")
end)

return T
