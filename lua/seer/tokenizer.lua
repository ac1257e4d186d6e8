--- seer.tokenizer: Hugging Face tokenizers for the models seer runs. The encoder and decoder
--- are C (engine/tokenizer/, the module seer.core.tokenizer) and follow the `tokenizers`
--- library's semantics: added and special tokens are recognised inside text, then normalizer,
--- pre-tokenizer, BPE model and post-processor run as tokenizer.json describes them.
--- This file reads the configuration around tokenizer.json (special tokens, chat template,
--- generation_config.json) and renders chat templates through seer.chat_template.
---
--- Ids are 0-based, exactly the numbers Hugging Face uses; they are stored in 1-based Lua
--- arrays (`ids[1]` is the first token).
local core = require "seer.core.tokenizer"
local json = require "seer.json"

local M = {}

---@class seer.Tokenizer
---@field path string the directory or file it was loaded from
---@field vocab_size integer one more than the largest id (vocabulary and added tokens)
---@field bos_token string|nil
---@field eos_token string|nil
---@field unk_token string|nil
---@field pad_token string|nil
---@field sep_token string|nil
---@field cls_token string|nil
---@field mask_token string|nil
---@field bos_token_id integer|nil
---@field eos_token_id integer|nil
---@field unk_token_id integer|nil
---@field pad_token_id integer|nil
---@field eos_token_ids integer[] eos_token_id plus generation_config.json's eos_token_id(s): where generation stops
---@field chat_template string|nil the default chat template (Jinja text)
---@field chat_templates table<string,string>|nil named templates when tokenizer_config.json lists several
---@field clean_up_tokenization_spaces boolean decode's default, from tokenizer_config.json
---@field config table tokenizer_config.json as decoded ({} when absent)
local Tokenizer = {}
Tokenizer.__index = Tokenizer

local SPECIAL_NAMES = { "bos", "eos", "unk", "pad", "sep", "cls", "mask" }

-- "file", "dir", "other" or nil, from stat: nothing is opened, so a FIFO planted in a model
-- folder is "other", not waited on.
local function kind(p) return core.kind(p) end
local function file_exists(p) return kind(p) == "file" end
-- present in a model folder: a FIFO or device there is read (and refused with its reason), not
-- taken for an absent file
local function present(p)
  local k = kind(p)
  return k == "file" or k == "other"
end
local function is_dir(p) return kind(p) == "dir" end

-- The files of a model folder are not trusted (docs/security.md): read as the model loader
-- reads its own (a regular file, a link only when it stays in the folder, a FIFO refused, not
-- waited on) and at most MAX_SIDE_FILE bytes. nil when absent; an error when refused.
local MAX_SIDE_FILE = 64 * 1024 * 1024
local function read_model_file(path)
  local text, why, code = core.read_model_file(path, MAX_SIDE_FILE)
  if text then return text end
  if code == "missing" then return nil end
  error("seer.tokenizer: " .. tostring(why), 0)
end

local function read_json(path)
  local text = read_model_file(path)
  if not text then return nil end
  -- the values are counted before anything is built: a model folder's files may be hostile
  local ok, v = pcall(json.decode, text, { max_values = json.MODEL_MAX_VALUES.config })
  if not ok then error("seer.tokenizer: " .. path .. ": " .. tostring(v), 0) end
  return v
end

-- A special token as tokenizer_config.json or special_tokens_map.json write it: a string or
-- {"content": ...}; null and anything else is no token.
local function token_string(v)
  if type(v) == "string" then return v end
  if type(v) == "table" and type(v.content) == "string" then return v.content end
  return nil
end

---Loads a tokenizer: a directory holding tokenizer.json (plus the optional
---tokenizer_config.json, special_tokens_map.json, generation_config.json, chat_template.jinja),
---a tokenizer.json file, or a directory with GPT-2's vocab.json + merges.txt.
---@param path string
---@return seer.Tokenizer
function M.load(path)
  assert(type(path) == "string", "seer.tokenizer.load(path): path must be a string")
  path = path:gsub("/+$", "")
  if path == "" then path = "/" end
  local dir, handle
  if is_dir(path) then
    dir = path
    if present(dir .. "/tokenizer.json") then
      handle = core.load_file(dir .. "/tokenizer.json")
    elseif present(dir .. "/vocab.json") and present(dir .. "/merges.txt") then
      handle = core.load_gpt2(dir .. "/vocab.json", dir .. "/merges.txt")
    else
      error("seer.tokenizer: " .. dir .. " has neither tokenizer.json nor vocab.json + merges.txt", 2)
    end
  elseif file_exists(path) then
    dir = path:match("^(.*)/[^/]*$") or "."
    handle = core.load_file(path)
  else
    error("seer.tokenizer: no such file or directory: " .. path, 2)
  end

  local self = setmetatable({ _h = handle, path = path }, Tokenizer)
  self.vocab_size = handle:vocab_size()

  local cfg = read_json(dir .. "/tokenizer_config.json") or {}
  local map = read_json(dir .. "/special_tokens_map.json") or {}
  self.config = cfg
  for _, name in ipairs(SPECIAL_NAMES) do
    local key = name .. "_token"
    local s = token_string(cfg[key])
    if s == nil and cfg[key] == nil then s = token_string(map[key]) end
    self[key] = s
    if s then self[key .. "_id"] = handle:token_to_id(s) end
  end

  local ct = cfg.chat_template
  if type(ct) == "string" then
    self.chat_template = ct
  elseif type(ct) == "table" then
    self.chat_templates = {}
    for _, entry in ipairs(ct) do
      if type(entry) == "table" and type(entry.name) == "string" and type(entry.template) == "string" then
        self.chat_templates[entry.name] = entry.template
      end
    end
    self.chat_template = self.chat_templates.default
  end
  if not self.chat_template then
    self.chat_template = read_model_file(dir .. "/chat_template.jinja")
  end

  self.clean_up_tokenization_spaces = cfg.clean_up_tokenization_spaces == true

  local ids, seen = {}, {}
  local function add(id)
    if type(id) == "number" and not seen[id] then
      seen[id] = true
      ids[#ids + 1] = id
    end
  end
  add(self.eos_token_id)
  local gen = read_json(dir .. "/generation_config.json")
  if type(gen) == "table" then
    if type(gen.eos_token_id) == "table" then
      for _, id in ipairs(gen.eos_token_id) do add(id) end
    else
      add(gen.eos_token_id)
    end
  end
  self.eos_token_ids = ids
  return self
end

---@class seer.Tokenizer.encode_opts
---@field add_special_tokens? boolean run the post-processor (e.g. add BOS); default true

---Text to token ids (0-based ids in a Lua array).
---@param text string UTF-8 text
---@param opts? seer.Tokenizer.encode_opts
---@return integer[]
function Tokenizer:encode(text, opts)
  -- checked by name: a misspelt add_special_token left the default it meant to change
  opts = require("seer.checks").options("encode", opts, { add_special_tokens = "boolean" }, 2)
  if type(text) ~= "string" then error("encode: text must be a string, got " .. type(text), 2) end
  local add = true
  if opts.add_special_tokens ~= nil then add = opts.add_special_tokens end
  return self._h:encode(text, add)
end

---The token strings of text (no special tokens added), e.g. {"Hello", "Ġworld"}.
---@param text string
---@return string[]
function Tokenizer:tokenize(text)
  local ids = self._h:encode(text, false)
  local out = {}
  for i, id in ipairs(ids) do out[i] = self._h:id_to_token(id) end
  return out
end

-- transformers' clean_up_tokenization
local CLEANUPS = {
  { " .", "." }, { " ?", "?" }, { " !", "!" }, { " ,", "," }, { " ' ", "'" }, { " n't", "n't" },
  { " 'm", "'m" }, { " 's", "'s" }, { " 've", "'ve" }, { " 're", "'re" },
}
local function plain_replace(s, from, to)
  local out, i = {}, 1
  while true do
    local a, b = s:find(from, i, true)
    if not a then break end
    out[#out + 1] = s:sub(i, a - 1)
    out[#out + 1] = to
    i = b + 1
  end
  out[#out + 1] = s:sub(i)
  return table.concat(out)
end

---@class seer.Tokenizer.decode_opts
---@field skip_special_tokens? boolean leave out special added tokens (BOS, EOS, ...); default false
---@field clean_up_tokenization_spaces? boolean transformers' " ." -> "." clean-up; default from tokenizer_config.json

---Token ids (an array, or one id) to text. An id outside the vocabulary is an error.
---@param ids integer[]|integer
---@param opts? seer.Tokenizer.decode_opts
---@return string
function Tokenizer:decode(ids, opts)
  opts = require("seer.checks").options("decode", opts, { skip_special_tokens = "boolean", clean_up_tokenization_spaces = "boolean" }, 2)
  -- a list with a hole decoded what came before the hole only
  if type(ids) == "table" then require("seer.checks").list("decode", ids, "id", 2) end
  local ok, text = pcall(self._h.decode, self._h, ids, opts.skip_special_tokens and true or false)
  if not ok then error((tostring(text):gsub("^[^\n:]*%.lua:%d+: ", "")), 2) end -- at the caller's line
  local clean = opts.clean_up_tokenization_spaces
  if clean == nil then clean = self.clean_up_tokenization_spaces end
  if clean then
    for _, r in ipairs(CLEANUPS) do text = plain_replace(text, r[1], r[2]) end
  end
  return text
end

---The id of a token string (added tokens first), or nil.
---@param token string
---@return integer|nil
function Tokenizer:token_to_id(token)
  return self._h:token_to_id(token)
end

---The token string of an id, or nil.
---@param id integer
---@return string|nil
function Tokenizer:id_to_token(id)
  return self._h:id_to_token(id)
end

---True if id is an added token marked special (skipped by skip_special_tokens).
---@param id integer
---@return boolean
function Tokenizer:is_special(id)
  return self._h:is_special(id)
end

-- Options of apply_chat_template that are not template variables.
local NOT_VARS = {
  tokenize = true, chat_template = true, continue_final_message = true, add_generation_prompt = true,
  messages = true, add_special_tokens = true,
}

-- A template variable passed to a template that never names it has no effect; when its name is
-- not an option either, it is most likely a misspelt option (add_generation = true leaves the
-- generation prompt out, silently). Said once per name on stderr, with the nearest option.
local unused_noted = {}
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end
local function note_unused(template, name)
  if type(name) ~= "string" or unused_noted[name] then return end
  if template:find("%f[%w_]" .. name:gsub("%p", "%%%0") .. "%f[^%w_]") then return end
  unused_noted[name] = true
  local best, bd
  for k in pairs(NOT_VARS) do
    local d = distance(name, k)
    if (not bd or d < bd) and k ~= "messages" then best, bd = k, d end
  end
  local hint = (bd and (bd <= 3 or best:find(name, 1, true))) and ("; did you mean %s?"):format(best) or ""
  io.stderr:write(("seer.tokenizer: apply_chat_template: '%s' is not an option and this chat template has no variable of that name, so it changes nothing%s\n")
    :format(require("seer.terminal").safe(name), hint))
end

local function rfind_plain(s, needle)
  local last, i = nil, 1
  while true do
    local a = s:find(needle, i, true)
    if not a then return last end
    last, i = a, a + 1
  end
end

---@class seer.Tokenizer.chat_opts
---@field add_generation_prompt? boolean end with the assistant header (default false)
---@field continue_final_message? boolean cut the text right after the final message's content, so generation continues it
---@field tokenize? boolean return ids (encoded with add_special_tokens = false, as transformers does) instead of text
---@field chat_template? string a template's text, or the name of one in chat_templates
---@field tools? table passed to the template as `tools`
---@field documents? table passed to the template as `documents`
---Any other field (e.g. date_string) is passed to the template as a variable (one the template
---never names changes nothing and is said once on stderr, with the option it resembles).

---Renders a conversation with the chat template (seer.chat_template's Jinja engine), with
---the variables transformers passes: messages, add_generation_prompt, the special token strings
---(bos_token, eos_token, ...) and any extra options.
---@param messages table[] {{role = "user", content = "..."}, ...}
---@param opts? seer.Tokenizer.chat_opts
---@return string|integer[]
function Tokenizer:apply_chat_template(messages, opts)
  opts = opts or {}
  assert(type(messages) == "table", "apply_chat_template(messages, opts): messages must be a table")
  local template = opts.chat_template
  if template and self.chat_templates and self.chat_templates[template] then
    template = self.chat_templates[template]
  end
  template = template or self.chat_template
  if not template then
    local names = {}
    for k in pairs(self.chat_templates or {}) do names[#names + 1] = k end
    table.sort(names)
    error("seer.tokenizer: this tokenizer has no chat template" ..
      (#names > 0 and (" named 'default' (it has: " .. table.concat(names, ", ") .. "; pass opts.chat_template)") or
        " (tokenizer_config.json has no chat_template; pass opts.chat_template)"), 2)
  end
  if opts.continue_final_message and opts.add_generation_prompt then
    error("seer.tokenizer: continue_final_message and add_generation_prompt cannot both be set", 2)
  end
  local ok, CT = pcall(require, "seer.chat_template")
  if not ok then
    error("seer.tokenizer: apply_chat_template needs the module seer.chat_template, which could not be loaded: " ..
      tostring(CT), 2)
  end
  local vars = {}
  for k, v in pairs(opts) do
    if not NOT_VARS[k] then
      vars[k] = v
      if k ~= "tools" and k ~= "documents" then note_unused(template, k) end
    end
  end
  for _, name in ipairs(SPECIAL_NAMES) do
    local key = name .. "_token"
    if vars[key] == nil and self[key] ~= nil then vars[key] = self[key] end
  end
  vars.messages = messages
  vars.add_generation_prompt = opts.add_generation_prompt and true or false
  local text = CT.render(template, vars)
  if opts.continue_final_message then
    local last = messages[#messages]
    local content = last and last.content
    if type(content) == "table" then
      local part = content[#content]
      content = type(part) == "table" and part.text or nil
    end
    if type(content) ~= "string" then
      error("seer.tokenizer: continue_final_message needs a final message with string content", 2)
    end
    local at = rfind_plain(text, content)
    if not at then
      content = content:match("^%s*(.-)%s*$")
      at = rfind_plain(text, content)
    end
    if not at then
      error("seer.tokenizer: continue_final_message: the final message's content is not in the rendered text", 2)
    end
    text = text:sub(1, at + #content - 1)
  end
  if opts.tokenize then return self:encode(text, { add_special_tokens = false }) end
  return text
end

function Tokenizer:__tostring()
  return string.format("seer.Tokenizer(%s, vocab_size=%d)", self.path, self.vocab_size)
end

return M
