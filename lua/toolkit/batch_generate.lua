--- toolkit.batch_generate: answers to many conversations, as a list of texts.
--- Each conversation is a message list (rendered with the chat template and the generation
--- prompt), a string, or token ids, with the same rules as toolkit.generate_response. A trailing
--- assistant message is a prefill: the template is rendered with that turn left open
--- (transformers' `continue_final_message`) and the answer is the continuation only, without
--- the prefill text.
---
--- All conversations run together (model:generate_batch: one batched forward pass per step,
--- each sequence with its own positions and KV cache, no padding inside the model), and answer i
--- is exactly what generating conversation i alone gives, bit for bit: the same tokens, the same
--- absolute positions for hooks (a steering `start_pos` means the same thing in a batch; the
--- reference's unpadded batch corrupted answers). Sampling is seeded: conversation i uses seed `opts.seed + i - 1`
--- (`opts.seed` defaults to 0), so results are reproducible and identical conversations still
--- get different samples; `generate_response(model, tok, conversations[i], n, t,
--- {top_p = p, seed = seed + i - 1})` reproduces answer i.
---
--- ```lua
--- local bg = require "toolkit.batch_generate"
--- local answers = bg.batch_generate(model, tokenizer, {
---   { { role = "user", content = "Name a colour." } },
---   { { role = "user", content = "Name a colour." }, { role = "assistant", content = "My favourite is" } },
--- }, 40, 0.7, 0.9, { seed = 1 })
--- ```
local G = require "toolkit.generate_response"
local P = require "toolkit.prompts"

local M = {}

---Generates one answer per conversation.
---@param model seer.Model
---@param tokenizer? seer.Tokenizer nil: model.tokenizer
---@param conversations toolkit.Input[] message lists (a trailing assistant message is a prefill), strings or id lists
---@param max_new_tokens? integer|table default 100; or the options table, as the reference's keywords: `{max_new_tokens = 40, temperature = 0, top_p = 0.9, seed = 1}`
---@param temperature? number|table default 0.7 (0 = greedy); or the options table
---@param top_p? number|table default 0.9; or the options table
---@param opts? toolkit.GenerateOpts|{max_new_tokens?: integer, temperature?: number, top_p?: number} seed is the first conversation's seed (default 0); stream is not accepted
---@return string[] texts answer i for conversation i (new text only)
---@return integer[][] ids the new token ids of each answer
function M.batch_generate(model, tokenizer, conversations, max_new_tokens, temperature, top_p, opts)
  local where = "batch_generate"
  if type(conversations) ~= "table" or P.is_messages(conversations) or type(conversations[1]) == "number" then
    error(where .. ": expected a list of conversations (each a message list, a string or token ids)", 2)
  end
  local v, rest = P.keywords(where, { "max_new_tokens", "temperature", "top_p" }, { max_new_tokens, temperature, top_p }, opts,
    { types = { max_new_tokens = "number", temperature = "number", top_p = "number" }, other = G.valid_opts(G.RESPONSE_OPTS) })
  max_new_tokens, temperature, top_p = v[1], v[2], v[3]
  local gen, own = G.split_opts(rest, where, G.RESPONSE_OPTS)
  if gen.stream then error(where .. ": stream is not supported; use generate_response per conversation", 2) end
  local seed = gen.seed or 0
  if type(seed) ~= "number" or seed ~= math.floor(seed) or seed < 0 then
    error(where .. ": seed must be a non-negative integer", 2)
  end
  P.check_list(where, conversations, "conversation")
  local prompts = {}
  for i, conv in ipairs(conversations) do
    local ok, ids = pcall(G.prompt_ids, model, tokenizer, conv, own.chat, own.chat_template, where)
    if not ok then -- prompt_ids's errors begin with where already
      error(("%s: conversation %d: %s"):format(where, i, (tostring(ids):gsub("^" .. where .. ": ", ""))), 2)
    end
    prompts[i] = ids
  end
  local o, per = {}, {}
  for k, v in pairs(gen) do o[k] = v end
  o.max_new_tokens = max_new_tokens or 100
  o.temperature = temperature or 0.7
  o.top_p = top_p or 0.9
  for i = 1, #prompts do per[i] = { seed = seed + i - 1 } end
  o.per_sequence = per
  -- One batched forward pass per step for every unfinished conversation (model:generate_batch).
  local outs = model:generate_batch(prompts, o)
  local texts, all_ids = {}, {}
  for i, out in ipairs(outs) do
    texts[i] = G.decode(model, tokenizer, out.ids, o.stop)
    all_ids[i] = out.ids
  end
  return texts, all_ids
end

-- argument errors raised inside seer name the caller's line (toolkit.prompts.guard)
for _, k in ipairs({ "batch_generate" }) do M[k] = P.guard(M[k]) end

return M
