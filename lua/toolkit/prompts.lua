--- toolkit.prompts: how the toolkit turns what a researcher passes (text, a chat, token ids)
--- into the token ids the model sees. Every toolkit function that takes a prompt uses these
--- rules, so an activation and a generation of the same input see the same tokens.
---
--- | input | tokens |
--- |---|---|
--- | a string | `tokenizer:encode(text, {add_special_tokens = true})` (BOS added, as `tokenizer(text)` in Python) |
--- | a message list `{{role = "user", content = "..."}, ...}` | the chat template, with the generation prompt; when the last message is the assistant's, its text is a prefill: the turn is left open (`continue_final_message`) so the model continues it; encoded without adding special tokens (the template writes BOS) |
--- | token ids (a table of integers or a tensor) | used as they are |
---
--- `tokenizer` may be nil everywhere: the model's own (`model.tokenizer`) is used.
---
--- ```lua
--- local P = require "toolkit.prompts"
--- local ids = P.encode(model, nil, { { role = "user", content = "Hi" } })  -- template + generation prompt
--- local text = P.render(tokenizer, { { role = "user", content = "Hi" }, { role = "assistant", content = "Hello, I" } })
--- ```
local M = {}

---@alias toolkit.Message {role: string, content: string|table}
---@alias toolkit.Input string|toolkit.Message[]|integer[]|seer.Tensor

---True when v is a chat (a list of {role = ..., content = ...} tables).
---@param v any
---@return boolean
function M.is_messages(v)
  return type(v) == "table" and type(v[1]) == "table" and getmetatable(v[1]) == nil and v[1].role ~= nil
end

---The tokenizer to use: the one given, else the model's.
---@param model seer.Model
---@param tokenizer? seer.Tokenizer
---@param where? string the caller's name for the error message
---@return seer.Tokenizer
function M.tokenizer(model, tokenizer, where)
  local tok = tokenizer or (model and model.tokenizer)
  if not tok then
    error((where or "toolkit") .. ": text input needs a tokenizer and the model has none; pass one or pass token ids", 3)
  end
  return tok
end

---Renders a chat with the tokenizer's chat template. The generation prompt is added unless the
---last message is the assistant's; then that message is a prefill and the text ends right after
---its content (the turn stays open). `opts.add_generation_prompt = false` renders a closed
---conversation instead. Other opts fields are passed to the template as variables (e.g.
---date_string, tools).
---@param tokenizer seer.Tokenizer
---@param messages toolkit.Message[]
---@param opts? {add_generation_prompt?: boolean, chat_template?: string, [string]: any}
---@return string text
function M.render(tokenizer, messages, opts)
  opts = opts or {}
  local last = messages[#messages]
  local t_opts = {}
  for k, v in pairs(opts) do
    if k ~= "add_generation_prompt" and k ~= "chat" and k ~= "continue_final_message" and k ~= "tokenize" then t_opts[k] = v end
  end
  if last and last.role == "assistant" and opts.add_generation_prompt ~= true then
    t_opts.continue_final_message = opts.add_generation_prompt ~= false
  else
    t_opts.add_generation_prompt = opts.add_generation_prompt ~= false
  end
  return tokenizer:apply_chat_template(messages, t_opts)
end

---Token ids for one input (see the table at the top of this module).
---@param model seer.Model
---@param tokenizer? seer.Tokenizer
---@param input toolkit.Input
---@param opts? {chat?: boolean, add_generation_prompt?: boolean} chat = true: a string is sent as a user message through the chat template
---@param where? string what errors name: the function the user called and which input ("extract_activations: input 3")
---@return integer[] ids
function M.encode(model, tokenizer, input, opts, where)
  opts = opts or {}
  where = where or "toolkit.prompts.encode"
  if type(input) == "string" then
    local tok = M.tokenizer(model, tokenizer, where)
    if opts.chat then
      return M.encode(model, tok, { { role = "user", content = input } }, opts, where)
    end
    return tok:encode(input, { add_special_tokens = true })
  end
  if M.is_messages(input) then
    local tok = M.tokenizer(model, tokenizer, where)
    local text = M.render(tok, input, opts)
    return tok:encode(text, { add_special_tokens = false })
  end
  if type(input) == "table" then
    for i, v in ipairs(input) do
      if type(v) ~= "number" then
        error(("%s: entry %d of the input is a %s; expected a string, a message list or token ids")
          :format(where, i, type(v)), 2)
      end
    end
    if #input == 0 then
      if next(input) ~= nil then
        error(where .. ": expected a string, a message list or token ids, got a table that is none of them", 2)
      end
      error(where .. ": the input has no tokens", 2)
    end
    return input
  end
  if type(input) == "userdata" and type(input.totable) == "function" then
    local ids = input:totable()
    if type(ids) ~= "table" or type(ids[1]) ~= "number" then
      error(where .. ": a tensor of ids must be 1-d", 2)
    end
    return ids
  end
  error(where .. ": expected a string, a message list or token ids, got " .. type(input), 2)
end

---Row (1-based, for tensor indexing) of a 0-based position in a sequence of n tokens; negative
---positions count from the end (-1 = the last token). Raises when it is outside the sequence.
---@param position integer
---@param n integer
---@param where? string
---@return integer row
function M.row(position, n, where)
  if type(position) ~= "number" or position ~= math.floor(position) then
    error((where or "toolkit") .. ": position must be an integer (0 = first token, -1 = last), got " .. tostring(position), 3)
  end
  local r = position >= 0 and position + 1 or n + position + 1
  if r < 1 or r > n then
    error(("%s: position %d is outside the sequence of %d tokens (valid: 0..%d or -%d..-1)")
      :format(where or "toolkit", position, n, n - 1, n), 3)
  end
  return r
end

---A 0-based layer number, negative ones counting from the end (-1 = the last layer), checked
---against the model.
---@param model seer.Model
---@param layer integer
---@param where? string
---@return integer layer 0-based, non-negative
function M.layer(model, layer, where)
  local L = model.config.num_hidden_layers
  if type(layer) ~= "number" or layer ~= math.floor(layer) then
    error((where or "toolkit") .. ": layer must be an integer (0-based), got " .. tostring(layer), 3)
  end
  local l = layer >= 0 and layer or L + layer
  if l < 0 or l >= L then
    error(("%s: layer %d does not exist; the model has %d layers (0..%d)"):format(where or "toolkit", layer, L, L - 1), 3)
  end
  return l
end

---Raises a clear error when the model lacks one of seer's hook-API methods.
---@param model seer.Model
---@param method string e.g. "with_hooks"
---@param where string the caller's name
function M.need(model, method, where)
  if type(model) ~= "table" or type(model[method]) ~= "function" then
    error(("%s: needs model:%s (seer's hook API, docs/hooks.md), which this model object lacks"):format(where, method), 3)
  end
end

---Wraps a public toolkit function so that errors about its arguments raised deeper inside seer
---name the caller's line (seer.checks.guard).
M.guard = require("seer.checks").guard

-- Does t have a key that is a string (an options table, not a list of numbers)?
local function has_name_key(t)
  for k in pairs(t) do if type(k) == "string" then return true end end
  return false
end

---The reference's keyword arguments in Lua: one table as the last argument. Python's
---`generate_response(model, tok, prompt, max_tokens=20, temperature=0)` is
---`generate_response(model, tok, prompt, {max_tokens = 20, temperature = 0})`, and
---`generate_response(model, tok, prompt, 20, {temperature = 0})` gives the first positionally.
---`names` are the parameters that may be named, in positional order, and `values` what the call
---gave in their places (holes allowed). The first of them holding a table is the options table
---(for a parameter in `spec.lists`, which takes a list of numbers itself, only a table with a
---string key); nothing may follow it, nor may the function's own trailing options table `opts`
---be given as well. Without such a slot, `opts` is the options table. A named parameter takes
---its value from the table (an error when it is given both ways). The table's other keys must be
---in `spec.other` (option -> Lua type name or "any"); anything else is an error naming every
---valid option. `spec.types` checks the named parameters' types (positional or named).
---Errors carry no position (a toolkit.prompts.guard around the public function puts the
---caller's line on them).
---@param where string the function's name, for errors
---@param names string[]
---@param values table
---@param opts any the function's trailing options argument (nil: none)
---@param spec? {lists?: table<string, true>, types?: table<string, string>, other?: table<string, string>}
---@return table values the parameters, by position
---@return table|nil rest the other options (nil when no options table was given)
function M.keywords(where, names, values, opts, spec)
  spec = spec or {}
  local lists, types, other = spec.lists or {}, spec.types or {}, spec.other or {}
  local index = {}
  for i, name in ipairs(names) do index[name] = i end
  local at
  for i, name in ipairs(names) do
    local v = values[i]
    if type(v) == "table" and (not lists[name] or has_name_key(v)) then at = i break end
  end
  if at then
    for j = at + 1, #names do
      if values[j] ~= nil then
        error(("%s: the options table must be the last argument (it is in the place of %s, and %s follows it)")
          :format(where, names[at], names[j]), 0)
      end
    end
    if opts ~= nil then
      error(("%s: options are given in two tables (in the place of %s and after it); give them in one"):format(where, names[at]), 0)
    end
    opts, values[at] = values[at], nil
  end
  local rest
  if opts ~= nil then
    if type(opts) ~= "table" then error(("%s: options must be a table, got %s"):format(where, type(opts)), 0) end
    rest = {}
    for k, v in pairs(opts) do
      local i = index[k]
      if i then
        if values[i] ~= nil then
          error(("%s: %s is given twice, as an argument and in the options table"):format(where, k), 0)
        end
        values[i] = v
      elseif other[k] ~= nil then
        if other[k] ~= "any" and type(v) ~= other[k] then
          error(("%s: option '%s' must be a %s, got %s"):format(where, k, other[k], type(v)), 0)
        end
        rest[k] = v
      else
        local valid = {}
        for _, n in ipairs(names) do valid[#valid + 1] = n end
        for n in pairs(other) do if not index[n] then valid[#valid + 1] = n end end
        table.sort(valid)
        error(("%s: unknown option '%s'; valid options: %s"):format(where, tostring(k), table.concat(valid, ", ")), 0)
      end
    end
  end
  for i, name in ipairs(names) do
    local want, v = types[name], values[i]
    if want and v ~= nil and type(v) ~= want then
      error(("%s: %s must be a %s, got %s"):format(where, name, want, type(v)), 0)
    end
  end
  return values, rest
end

---Checks that `list` is a list without holes (seer.checks.list), raising at the caller's caller.
---@param where string
---@param list table
---@param what string what one entry is called ("conversation", "input")
---@return integer n the list's length
function M.check_list(where, list, what)
  local n = require("seer.checks").list(where, list, what, 3) -- not a tail call: the level counts this frame
  return n
end

return M
