--- toolkit.generate_response: one sampled answer to a prompt, as text.
--- A message list goes through the chat template with the generation prompt (a trailing
--- assistant message is a prefill that the model continues). A plain string is sent as a user
--- message when the tokenizer has a chat template (instruction-tuned models answer prompts in
--- their chat format), and as raw text with BOS when it has none (base models such as
--- stories260K); `opts.chat = false` forces raw text, `opts.chat = true` the template.
--- `opts.chat_template` (Jinja text, or the name of one in tokenizer.chat_templates) is the
--- template to use instead of the tokenizer's own (a tokenizer without one needs it for chats).
--- Token ids are used as they are. Returns only the new text (not the prompt, not the prefill),
--- special tokens skipped. Sampling is seeded (`opts.seed`, default 0, as model:generate), so a
--- call is reproducible; temperature 0 is greedy. Active hooks (steering) apply.
---
--- The reference's keyword arguments are one table in the last argument:
--- `generate_response(model, tok, prompt, {max_tokens = 40, temperature = 0.8, seed = 1})`.
---
--- ```lua
--- local gen = require "toolkit.generate_response"
--- print(gen.generate_response(model, tokenizer, "Once upon a time", 40, 0.8, { seed = 1 }))
--- print(gen.generate_response(model, nil, { { role = "user", content = "Hi!" } }))
--- ```
local P = require "toolkit.prompts"

local M = {}

-- Options forwarded to model:generate.
local GEN_OPTS = {
  min_new_tokens = true, top_k = true, top_p = true, min_p = true, repetition_penalty = true,
  seed = true, stop = true, stream = true,
}
local OWN_OPTS = { chat = true }
-- Own options only generate_response takes (batch_generate does not pass them on).
local RESPONSE_OPTS = { chat_template = true }
M.RESPONSE_OPTS = RESPONSE_OPTS -- batch_generate takes them too

---@class toolkit.GenerateOpts
---@field chat? boolean a string prompt goes through the chat template as a user message (default: when the tokenizer has a template, or chat_template is given)
---@field chat_template? string generate_response and batch_generate: the chat template's Jinja text, or the name of one in tokenizer.chat_templates (instead of the tokenizer's default)
---@field seed? integer sampling seed (default 0)
---@field top_k? integer
---@field top_p? number
---@field min_p? number
---@field min_new_tokens? integer
---@field repetition_penalty? number
---@field stop? string|integer|(string|integer)[] stop strings or token ids (besides the model's end-of-sequence ids)
---@field stream? fun(piece: string?, id: integer) called as tokens arrive

---Checks opts and splits them into model:generate's options and the toolkit's own.
---@param opts? table
---@param where string
---@param extra? table<string, true> more own options this caller takes (generate_response: chat_template)
---@return table gen_opts, table own_opts
function M.split_opts(opts, where, extra)
  local gen, own = {}, {}
  for k, v in pairs(opts or {}) do
    if GEN_OPTS[k] then gen[k] = v
    elseif OWN_OPTS[k] or (extra and extra[k]) then own[k] = v
    else
      local names = {}
      for n in pairs(GEN_OPTS) do names[#names + 1] = n end
      for n in pairs(OWN_OPTS) do names[#names + 1] = n end
      for n in pairs(extra or {}) do names[#names + 1] = n end
      table.sort(names)
      error(("%s: unknown option '%s'; valid options: %s"):format(where, tostring(k), table.concat(names, ", ")), 3)
    end
  end
  return gen, own
end

---Every option name split_opts takes (with `extra`), each as "any" (model:generate and
---prompt_ids check the values), for toolkit.prompts.keywords.
---@param extra? table<string, true>
---@return table<string, string>
function M.valid_opts(extra)
  local t = {}
  for _, set in ipairs({ GEN_OPTS, OWN_OPTS, extra or {} }) do
    for k in pairs(set) do t[k] = "any" end
  end
  return t
end

-- A chat needs a template: the tokenizer's own or chat_template. Without one, say what works
-- for this caller (generate_response takes opts.chat_template; others do not).
local function need_template(tok, chat_template, where)
  if chat_template ~= nil or tok.chat_template ~= nil then return end
  local names = {}
  for k in pairs(tok.chat_templates or {}) do names[#names + 1] = k end
  table.sort(names)
  local has = #names > 0 and (" (it has named ones: " .. table.concat(names, ", ") .. ", none named 'default')")
    or " (its tokenizer_config.json has no chat_template)"
  local fix = where and ("pass opts.chat_template to %s (Jinja text, or the name of one of the tokenizer's chat_templates)"):format(where)
    or "use toolkit.generate_response with opts.chat_template (Jinja text)"
  error(("%s: the tokenizer has no chat template%s to render a chat; %s, or give the prompt as a plain string "
    .. "(raw text with BOS) or as token ids"):format(where or "toolkit", has, fix), 0)
end

---The token ids generate_response feeds the model for a prompt (the rules above).
---@param model seer.Model
---@param tokenizer? seer.Tokenizer
---@param prompt toolkit.Input
---@param chat? boolean see toolkit.GenerateOpts.chat
---@param chat_template? string see toolkit.GenerateOpts.chat_template
---@param where? string the caller that takes opts.chat_template, for the error without a template
---@return integer[] ids
function M.prompt_ids(model, tokenizer, prompt, chat, chat_template, where)
  if chat_template ~= nil and type(chat_template) ~= "string" then
    error(("%s: option 'chat_template' must be a string (Jinja text or a template's name), got %s"):format(where or "toolkit", type(chat_template)), 0)
  end
  local enc = chat_template and { chat_template = chat_template } or {}
  if type(prompt) == "string" then
    local tok = P.tokenizer(model, tokenizer, where or "generate_response")
    if chat == nil then chat = tok.chat_template ~= nil or chat_template ~= nil end
    if chat then need_template(tok, chat_template, where) end
    enc.chat = chat
    return P.encode(model, tok, prompt, enc, where or "generate_response")
  end
  if P.is_messages(prompt) then
    need_template(P.tokenizer(model, tokenizer, where or "generate_response"), chat_template, where)
  end
  return P.encode(model, tokenizer, prompt, enc, where or "generate_response")
end

---Decodes generated ids (special tokens skipped) and cuts the text at the first stop string.
---@param model seer.Model
---@param tokenizer? seer.Tokenizer
---@param ids integer[]
---@param stop? string|integer|(string|integer)[]
---@return string text
function M.decode(model, tokenizer, ids, stop)
  local tok = P.tokenizer(model, tokenizer, "generate_response")
  local text = tok:decode(ids, { skip_special_tokens = true })
  if type(stop) ~= "table" then stop = { stop } end
  for _, s in ipairs(stop) do
    if type(s) == "string" then
      local at = text:find(s, 1, true)
      if at then text = text:sub(1, at - 1) end
    end
  end
  return text
end

---Generates an answer and returns its text.
---@param model seer.Model
---@param tokenizer? seer.Tokenizer nil: model.tokenizer
---@param prompt toolkit.Input a string, a message list or token ids
---@param max_tokens? integer|table new tokens at most (default 256); or the options table, as the reference's keywords: `{max_tokens = 20, temperature = 0, seed = 1}` (toolkit.prompts.keywords)
---@param temperature? number|table default 0.7 (0 = greedy); or the options table
---@param opts? toolkit.GenerateOpts|{max_tokens?: integer, temperature?: number}
---@return string text the new text only
---@return integer[] ids the new token ids (an end-of-sequence token included when generation stopped on one)
function M.generate_response(model, tokenizer, prompt, max_tokens, temperature, opts)
  local where = "generate_response"
  local v, rest = P.keywords(where, { "max_tokens", "temperature" }, { max_tokens, temperature }, opts,
    { types = { max_tokens = "number", temperature = "number" }, other = M.valid_opts(RESPONSE_OPTS) })
  max_tokens, temperature = v[1], v[2]
  require("seer.checks").whole(where, "max_tokens", max_tokens, 0, 2 ^ 31 - 1, 1, true)
  local gen, own = M.split_opts(rest, where, RESPONSE_OPTS)
  local ids = M.prompt_ids(model, tokenizer, prompt, own.chat, own.chat_template, where)
  gen.max_new_tokens = max_tokens or 256
  gen.temperature = temperature or 0.7
  local out = model:generate(ids, gen)
  return M.decode(model, tokenizer, out.ids, gen.stop), out.ids
end

-- argument errors raised inside seer name the caller's line (toolkit.prompts.guard)
for _, k in ipairs({ "generate_response" }) do M[k] = P.guard(M[k]) end

return M
