--- seer.chat_template: render Hugging Face chat templates exactly as transformers'
--- `apply_chat_template(messages, tokenize=False)` does. The interpreter is C
--- (engine/tokenizer/jinja.c, module seer.core.chat_template): the Jinja2 subset that chat
--- templates use, with transformers' settings (sandbox, trim_blocks, lstrip_blocks,
--- loopcontrols, `raise_exception`, `strftime_now`, `tojson` keeping non-ASCII text).
--- See docs/chat_template.md for the supported subset, the errors and the limits.
---@class seerchat_template
local M = {}

local core = require "seer.core.chat_template"
local json = require "seer.json"

---@class seerchat_template.message
---@field role string "system", "user", "assistant", "tool", ...
---@field content? string|table string, or a list of parts such as {type = "text", text = "..."}
---@field tool_calls? table[]

---@class seerchat_template.vars
---@field messages seerchat_template.message[]
---@field add_generation_prompt? boolean
---@field tools? table[] json.null or absent when none
---@field documents? table[]
---@field bos_token? string
---@field eos_token? string
---@field [string] any any extra variable the template reads (e.g. date_string)

---Render a chat template.
---
---vars becomes the template's variables: Lua tables with keys 1..n are lists, tables with
---string keys are dicts (an empty table is an empty list unless marked with json.object),
---json.null is None, numbers with an integral value are ints, others floats. Variables that
---are absent are undefined in the template (`is defined` is false), which is what
---transformers does for keyword arguments that were not passed.
---
---Errors are Lua errors starting with "chat_template: ": "syntax error at line L, column C:
---...", "raise_exception: <the template's message>", "undefined: ...", "type error: ...",
---"limit: ..." (output over 64 MiB, more than a million loop iterations, deep nesting, or
---"limit: the render exceeded its work budget (N units)..." when the template does too much
---work for its input).
---
---Every render has a work budget (docs/chat_template.md, "Limits"): opts.max_work, else
---M.limits.max_work, else the engine's default (250,000,000 units, plus 32 per byte of vars), which
---real templates never come near. Raise it only for a template you trust.
---@param template string the Jinja source (tokenizer_config.json's "chat_template")
---@param vars seerchat_template.vars
---@param opts? {max_work?: integer} the fixed part of the work budget, in units
---@return string text
---@return integer work the work units the render spent
function M.render(template, vars, opts)
  assert(type(template) == "string", "chat_template.render: template must be a string")
  assert(vars == nil or type(vars) == "table", "chat_template.render: vars must be a table")
  assert(opts == nil or type(opts) == "table", "chat_template.render: opts must be a table")
  local max_work = opts and opts.max_work or M.limits.max_work
  assert(max_work == nil or (type(max_work) == "number" and max_work >= 0 and max_work % 1 == 0),
    "chat_template.render: max_work must be a whole number of work units")
  return core.render(template, vars or {}, max_work)
end

---Limits every render uses unless render's opts say otherwise. max_work = nil keeps the
---engine's default work budget.
---@type {max_work?: integer}
M.limits = { max_work = nil }

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

local function is_dir(path)
  -- a directory opens for reading on Linux but fails to read
  local f = io.open(path, "rb")
  if not f then return false end
  local ok, _, code = f:read(1)
  f:close()
  return ok == nil and code == 21
end

local TOKEN_KEYS = { "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token" }

---@class seerchat_template.tokens
---@field bos_token? string
---@field eos_token? string
---@field unk_token? string
---@field sep_token? string
---@field pad_token? string
---@field cls_token? string
---@field mask_token? string

---Load a model's chat template and special tokens.
---
---path is a model directory or the path of its tokenizer_config.json. A chat_template.jinja
---file in the directory wins over the config's "chat_template" (as in transformers); the
---config's value may be a string or a list of {name = ..., template = ...}, of which the one
---named "default" is taken (the first one when none is). Special tokens come from the config,
---stored either as strings or as {content = ...}; null ones are left out.
---@param path string
---@return string template
---@return seerchat_template.tokens tokens
function M.load_template(path)
  assert(type(path) == "string", "chat_template.load_template: path must be a string")
  local dir, cfg_path
  if is_dir(path) then
    dir = path
    cfg_path = path .. "/tokenizer_config.json"
  else
    cfg_path = path
    dir = path:match("^(.*)/[^/]*$") or "."
  end
  local cfg = {}
  if file_exists(cfg_path) then
    local text = require("seer").read_file(cfg_path)
    local ok, decoded = pcall(json.decode, text, { max_values = json.MODEL_MAX_VALUES.config })
    if not ok then error("chat_template.load_template: " .. cfg_path .. ": " .. tostring(decoded), 2) end
    cfg = decoded
  elseif not is_dir(path) then
    error("chat_template.load_template: cannot read " .. cfg_path, 2)
  end
  local template
  local jinja = dir .. "/chat_template.jinja"
  if file_exists(jinja) then
    template = require("seer").read_file(jinja)
  else
    local ct = cfg.chat_template
    if type(ct) == "string" then
      template = ct
    elseif type(ct) == "table" then
      for _, e in ipairs(ct) do
        if type(e) == "table" and e.name == "default" then template = e.template end
      end
      if not template and type(ct[1]) == "table" then template = ct[1].template end
    end
  end
  if type(template) ~= "string" then
    error("chat_template.load_template: no chat template in " .. path, 2)
  end
  local tokens = {}
  for _, k in ipairs(TOKEN_KEYS) do
    local v = cfg[k]
    if type(v) == "table" and v ~= json.null then v = v.content end
    if type(v) == "string" then tokens[k] = v end
  end
  return template, tokens
end

---Render messages with a model's template the way apply_chat_template does: special tokens,
---tools = none and documents = none unless given, then extra variables.
---@param template string
---@param tokens? seerchat_template.tokens
---@param messages seerchat_template.message[]
---@param opts? {add_generation_prompt?: boolean, tools?: table[], documents?: table[], [string]: any}
---@return string
function M.apply(template, tokens, messages, opts)
  local vars = {}
  for k, v in pairs(tokens or {}) do vars[k] = v end
  vars.tools = json.null
  vars.documents = json.null
  for k, v in pairs(opts or {}) do vars[k] = v end
  vars.messages = messages
  vars.add_generation_prompt = vars.add_generation_prompt and true or false
  return M.render(template, vars)
end

return M
