--- seer.harness: run an agent (Claude, or any OpenAI-compatible model) with the tools of MCP
--- servers, and write everything it does to a transcript.
---
---   local h = require "seer.harness"
---   for msg in h.run_agent{ prompt = task, mcp_config = session.mcp_config } do
---     if msg.type == "text_delta" then io.write(msg.text) end
---   end
---
--- The provider streams, their reassembly, the retry policy and the transcript writer are C
--- (engine/harness/, seer.core.harness); this file runs the loop: it asks the model, runs the
--- tools it calls (all tools of all servers in mcp_config, through seer.mcp.client), sends the
--- results back and stops at end_turn or at a limit. Every agent of a process shares one curl
--- multi pool, so several agents stream at once (run_agents) and a stream can be cancelled
--- (ESC in run_agent_interactive). See docs/harness.md.
---
--- Messages (what the iterator gives, what the transcript holds, one JSON object per line):
---   run_start, user, request, text_delta, thinking_delta, tool_use_start, retry, assistant,
---   usage, tool_call, tool_result, interrupted, error, result (always last).
--- Each has type, agent and (after run_start) turn; the transcript adds seq and time.
---@class seerharness
local M = {}

local core = require "seer.core.harness"
local host = require "seer.core.host"
local json = require "seer.json"
-- What a provider sends is its own: cJSON does not check that its strings are UTF-8, so each
-- event of a stream has the bytes that are not made U+FFFD before it is decoded (one bad byte
-- in a model's name or text failed the whole run, and the text streamed so far was lost).
local utf8_fix = require("seer.core.net").utf8_fix

M.prices = require "seer.harness.prices"

---------------------------------------------------------------------------------------------
-- providers

local PROVIDERS = {
  claude = { kind = "anthropic", base = "https://api.anthropic.com", base_env = "ANTHROPIC_BASE_URL",
             path = "/v1/messages", key_env = { "ANTHROPIC_API_KEY" }, model = "claude-sonnet-4-5" },
  openai = { kind = "openai", base = "https://api.openai.com/v1", base_env = "OPENAI_BASE_URL",
             path = "/chat/completions", key_env = { "OPENAI_API_KEY" }, model = "gpt-4.1",
             max_tokens_field = "max_completion_tokens" },
  openrouter = { kind = "openai", base = "https://openrouter.ai/api/v1", path = "/chat/completions",
                 key_env = { "OPENROUTER_API_KEY" } },
  gemini = { kind = "openai", base = "https://generativelanguage.googleapis.com/v1beta/openai",
             path = "/chat/completions", key_env = { "GEMINI_API_KEY", "GOOGLE_API_KEY" }, model = "gemini-2.5-flash" },
  replay = { kind = "replay" },
}
PROVIDERS.anthropic = PROVIDERS.claude
M.PROVIDERS = PROVIDERS

---The default cap on one model response (the option max_response_bytes): 64 MiB of text,
---thinking, tool arguments and other content, 4 times that of event stream on the wire, and
---64 MiB of delta lines in the transcript. Real responses are a few MB at most.
M.MAX_RESPONSE_BYTES = 64 * 1024 * 1024

---The default cap on one tool result (the option max_tool_result_bytes): 4 MiB of text and
---images (base64) for the model and the transcript, the structured result the transcript records
---counted in. Real results are far smaller (a notebook cell's text is cut at 20,000 characters;
---4 MiB of text is about a million tokens, more than any context), and an image of up to about
---3 MB fits. A server that sent 30 MiB results took a 6-turn run to 936 MB and a 157 MB transcript.
M.MAX_TOOL_RESULT_BYTES = 4 * 1024 * 1024

---The most the MCP client holds of one tool call's response (its max_result_bytes) for a
---max_tool_result_bytes of max: twice that (room for a structuredContent that repeats the
---text, and for JSON escapes) and 1 MiB. A response past it is cut as it streams in, so the host
---never holds more: a 30 MiB result costs what a 9 MiB one does, and the model still gets the
---first max_tool_result_bytes with the note.
---@param max integer
---@return integer
function M.result_message_bound(max)
  return math.min(math.floor(2 * max) + 1024 * 1024, 1e15)
end

-- Environment variables whose values never reach a transcript, whatever `secrets` says.
local KNOWN_SECRETS = { "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY",
                        "GOOGLE_API_KEY", "HF_TOKEN", "SEER_MCP_TOKEN" }

---------------------------------------------------------------------------------------------
-- .env files

---Reads a .env file: KEY=VALUE lines, `export ` allowed, '#' comments, single or double quotes
---(double quotes understand \n, \t, \" and \\). Returns nil when the file does not exist.
---@param path string
---@return table<string, string>|nil
function M.read_dotenv(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local vars = {}
  for line in f:lines() do
    line = line:gsub("\r$", "")
    local k, v = line:match("^%s*export%s+([%w_%.]+)%s*=%s*(.-)%s*$")
    if not k then k, v = line:match("^%s*([%w_%.]+)%s*=%s*(.-)%s*$") end
    if k then
      local q = v:sub(1, 1)
      if (q == '"' or q == "'") and #v >= 2 then
        local close = v:find(q, 2, true)
        if q == '"' then
          -- find the closing quote that is not escaped
          local i = 2
          close = nil
          while i <= #v do
            local c = v:sub(i, i)
            if c == "\\" then i = i + 2
            elseif c == '"' then close = i; break
            else i = i + 1 end
          end
        end
        v = close and v:sub(2, close - 1) or v:sub(2)
        if q == '"' then
          v = v:gsub("\\(.)", { n = "\n", t = "\t", ['"'] = '"', ["\\"] = "\\" })
        end
      else
        v = v:gsub("%s+#.*$", "")
      end
      vars[k] = v
    end
  end
  f:close()
  return vars
end

local function experiment_dir()
  local script = rawget(_G, "arg") and arg[0]
  if type(script) == "string" and script ~= "-" and script ~= "" then
    local dir = script:match("^(.*)/[^/]*$") or "."
    return host.realpath(dir) or dir
  end
  return nil
end

-- The value of a variable: the environment, then .env in the experiment's directory, then .env
-- in the working directory.
local function lookup_var(name, cache)
  local v = os.getenv(name)
  if v and v ~= "" then return v, "the environment" end
  if not cache.loaded then
    cache.loaded = true
    cache.files = {}
    local seen = {}
    for _, dir in ipairs({ experiment_dir() or false, host.cwd() }) do
      if dir and not seen[dir] then
        seen[dir] = true
        local vars = M.read_dotenv(dir .. "/.env")
        if vars then cache.files[#cache.files + 1] = { path = dir .. "/.env", vars = vars } end
      end
    end
  end
  for _, f in ipairs(cache.files) do
    local fv = f.vars[name]
    if fv and fv ~= "" then return fv, f.path end
  end
  return nil
end

---------------------------------------------------------------------------------------------
-- options

local VALID = {
  "prompt", "mcp_config", "user_message", "provider", "model", "max_turns", "max_tokens", "time_limit",
  "token_limit", "on_message", "name", "output_dir", "transcript", "api_key", "base_url", "secrets", "mcp_instructions",
  "tools", "tool_timeout", "connect_timeout", "max_retries", "retry_base", "retry_max", "idle_timeout",
  "replay", "prices", "cache", "params", "headers", "thinking", "temperature", "mcp_options", "sync",
  "max_response_bytes", "response_timeout", "max_tool_result_bytes",
}
local VALID_SET = {}
for _, k in ipairs(VALID) do VALID_SET[k] = true end

local function check_opts(opts, fname)
  if type(opts) ~= "table" then
    error(("harness.%s: takes one table of options, e.g. %s{prompt = ..., mcp_config = ...}"):format(fname, fname), 4)
  end
  for k in pairs(opts) do
    if not VALID_SET[k] then
      local names = {}
      for _, n in ipairs(VALID) do names[#names + 1] = n end
      table.sort(names)
      error(("harness.%s: unknown option '%s' (valid: %s)"):format(fname, tostring(k), table.concat(names, ", ")), 4)
    end
  end
  local function typed(k, ty)
    if opts[k] ~= nil and type(opts[k]) ~= ty then
      error(("harness.%s: option '%s' must be a %s (got %s)"):format(fname, k, ty, type(opts[k])), 5)
    end
  end
  for _, k in ipairs({ "prompt", "user_message", "provider", "model", "name", "output_dir", "transcript", "api_key",
                       "base_url" }) do typed(k, "string") end
  for _, k in ipairs({ "max_turns", "max_tokens", "time_limit", "token_limit", "tool_timeout", "connect_timeout",
                       "max_retries", "retry_base", "retry_max", "idle_timeout", "temperature", "sync",
                       "max_response_bytes", "response_timeout", "max_tool_result_bytes" }) do
    typed(k, "number")
  end
  for _, k in ipairs({ "mcp_config", "secrets", "tools", "prices", "params", "headers", "thinking", "mcp_options" }) do
    typed(k, "table")
  end
  typed("on_message", "function")
  typed("cache", "boolean")
  for _, k in ipairs({ "max_turns", "max_tokens", "time_limit", "token_limit", "tool_timeout", "max_response_bytes",
                       "response_timeout", "max_tool_result_bytes" }) do
    if opts[k] ~= nil and not (opts[k] > 0) then
      error(("harness.%s: option '%s' must be more than 0 (got %s)"):format(fname, k, tostring(opts[k])), 4)
    end
  end
  -- counts are whole numbers: a fractional max_tokens reached the provider as 2.5 tokens (a 400
  -- there, after the agent had started), a fractional max_turns was a limit nobody wrote
  for _, k in ipairs({ "max_turns", "max_tokens", "token_limit", "max_retries", "max_response_bytes",
                       "max_tool_result_bytes" }) do
    require("seer.checks").whole("harness." .. fname, ("option '%s'"):format(k), opts[k], 0, 2 ^ 53, 4)
  end
  if opts.replay ~= nil and type(opts.replay) ~= "string" and type(opts.replay) ~= "table" then
    error(("harness.%s: option 'replay' must be a transcript path or a list of events"):format(fname), 4)
  end
end

---------------------------------------------------------------------------------------------
-- the shared pool (one curl multi per Lua state: all agents stream through it)

local pool
local function get_pool()
  if not pool then pool = core.pool() end
  return pool
end
M._pool = get_pool

---------------------------------------------------------------------------------------------
-- replay

-- The events of a transcript (a JSONL path, or a list of event tables). A last line cut short
-- by a crash is skipped.
local function read_events(src)
  if type(src) == "table" then return src end
  local f, why = io.open(src, "r")
  if not f then error(("harness: cannot read the replay transcript %s (%s)"):format(src, why), 0) end
  local events, n = {}, 0
  for line in f:lines() do
    n = n + 1
    if line:match("%S") then
      local ok, ev = pcall(json.decode, line)
      if ok and type(ev) == "table" then events[#events + 1] = ev end
    end
  end
  f:close()
  return events
end

local function load_replay(src)
  local turns, results, sessions, model = {}, {}, nil, nil
  for _, ev in ipairs(read_events(src)) do
    if ev.type == "assistant" and type(ev.message) == "table" then
      turns[#turns + 1] = ev
    elseif ev.type == "tool_result" and ev.id then
      results[ev.id] = ev
    elseif ev.type == "run_start" then
      if type(ev.mcp_sessions) == "table" then sessions = ev.mcp_sessions end
      if type(ev.model) == "string" then model = ev.model end
    end
  end
  if #turns == 0 then
    error(("harness: the replay transcript %s holds no assistant turns"):format(type(src) == "string" and src or "(table)"), 0)
  end
  return { turns = turns, results = results, sessions = sessions, model = model, map = {}, next = 1 }
end

-- Ids a live tool returns differently from the recording (a new session id, say): strings at the
-- same place in the recorded and the live structured result are mapped, and the recorded tool
-- inputs of later turns use the live values.
local function learn_ids(map, recorded, live)
  if type(recorded) == "string" and type(live) == "string" then
    if recorded ~= live and #recorded <= 200 and not recorded:find("%s") then map[recorded] = live end
  elseif type(recorded) == "table" and type(live) == "table" then
    for k, v in pairs(recorded) do learn_ids(map, v, live[k]) end
  end
end

local function remap(v, map)
  if type(v) == "string" then return map[v] or v end
  if type(v) ~= "table" then return v end
  local out = setmetatable({}, getmetatable(v))
  for k, x in pairs(v) do out[k] = remap(x, map) end
  return out
end

---------------------------------------------------------------------------------------------
-- tools

local function mcp_content(r)
  local out = {}
  for _, c in ipairs(r.content or {}) do
    if c.type == "text" then
      -- the Messages API refuses empty text blocks
      if c.text and c.text ~= "" then out[#out + 1] = { type = "text", text = c.text } end
    elseif c.type == "image" and c.data then
      out[#out + 1] = { type = "image", source = { type = "base64", media_type = c.mimeType or "image/png", data = c.data } }
    elseif c.type == "resource" and type(c.resource) == "table" and c.resource.text then
      out[#out + 1] = { type = "text", text = c.resource.text }
    elseif c.type == "resource_link" then
      out[#out + 1] = { type = "text", text = ("resource: %s %s"):format(c.uri or "?", c.name or "") }
    else
      out[#out + 1] = { type = "text", text = json.encode(c) }
    end
  end
  if #out == 0 then
    if r.structuredContent ~= nil then
      out[1] = { type = "text", text = json.encode(r.structuredContent) }
    else
      out[1] = { type = "text", text = "(no output)" }
    end
  end
  return out
end

local function short(s, n)
  s = tostring(s)
  if #s <= n then return s end
  return s:sub(1, n) .. "..."
end

-- The first n bytes of s at most, not ending inside a UTF-8 sequence.
local function cut_utf8(s, n)
  if #s <= n then return s end
  local i = n
  for _ = 1, 3 do
    local b = s:byte(i + 1)
    if i == 0 or b < 0x80 or b >= 0xC0 then break end
    i = i - 1
  end
  return s:sub(1, i)
end

-- The bytes of one content block: its text or image data (anything else, as JSON).
local function block_bytes(b)
  if b.type == "text" then return #b.text end
  if b.type == "image" then return #tostring(b.source and b.source.data or "") end
  local ok, t = pcall(json.encode, b)
  return ok and #t or 0
end
-- What each block costs on top against the cap: the JSON around it (so that a million one-byte
-- blocks are not free).
local BLOCK_OVERHEAD = 32

-- A tool's result as the model and the transcript get it: at most max bytes of content (text
-- is cut at a character, an image that does not fit is left out, and a note at the end says
-- what was cut), and the structured result only when it fits in what is left (it is counted
-- in: a server's structuredContent usually repeats the text). Returns the content, the
-- structured result or nil, the bytes cut from the content (nil when none) and the bytes of a
-- structured result left out (nil when none). wire is the MCP client's seer_cut when it cut
-- the response as it streamed in (past max_result_bytes).
local function bound_result(content, structured, max, wire)
  local out, used, total, kept, images_out = {}, 0, 0, 0, 0
  -- The MCP client's note on a response it cut is its last block: it goes last, unless the
  -- note below (which says the same) replaces it.
  local client_note
  if wire and #content > 0 and content[#content].type == "text" then
    client_note = content[#content]
    local rest = {}
    for i = 1, #content - 1 do rest[i] = content[i] end
    content = rest
  end
  for _, b in ipairs(content) do
    local size = block_bytes(b)
    total = total + size
    if used + size + BLOCK_OVERHEAD <= max then
      out[#out + 1] = b
      used = used + size + BLOCK_OVERHEAD
      kept = kept + size
    elseif b.type == "text" and max - used > BLOCK_OVERHEAD then
      local keep = cut_utf8(b.text, max - used - BLOCK_OVERHEAD)
      out[#out + 1] = { type = "text", text = keep }
      used = max
      kept = kept + #keep
    else
      used = math.min(max, used + BLOCK_OVERHEAD)
      if b.type == "image" then images_out = images_out + 1 end
    end
  end
  -- A response the MCP client cut as it streamed in (wire = its seer_cut): the total is the
  -- whole response's, and the note says the rest was not read.
  local unread = ""
  if wire then
    total = math.max(total, tonumber(wire.content_bytes) or 0)
    unread = ("; the server's response was %d bytes, of which only the first %d were read"):format(
      tonumber(wire.message_bytes) or 0, tonumber(wire.read_bytes) or 0)
  end
  local cut
  if total > kept then
    cut = total - kept
    out[#out + 1] = { type = "text", text = ("\n[cut: this tool result is %d bytes; the first %d are shown and %d were cut%s"
      .. " (max_tool_result_bytes = %d%s)]"):format(total, kept, cut,
        images_out > 0 and (", %d image(s) left out"):format(images_out) or "", max, unread) }
  elseif client_note then
    out[#out + 1] = client_note
  end
  local omitted
  if structured ~= nil then
    local ok, t = pcall(json.encode, structured)
    local n = ok and #t or math.huge
    if used + n > max then
      omitted = ok and n or -1
      structured = nil
    end
  end
  return out, structured, cut, omitted
end
M._bound_result = bound_result

---------------------------------------------------------------------------------------------
-- the agent

local Agent = {}
Agent.__index = Agent

local WAIT = {}       -- yielded by the loop while its stream has nothing new
local NEED_INPUT = {} -- yielded by the interactive loop at the end of a response

local function now() return host.now() end

local function transcript_path(dir, name)
  require("seer.process").mkdir_p(dir)
  local base = dir .. "/" .. os.date("%Y-%m-%d-%H-%M-%S") .. "_" .. name:gsub("[^%w%-_%.]", "_")
  local function exists(p)
    local f = io.open(p, "r")
    if f then f:close() end
    return f ~= nil
  end
  local path, n = base .. ".jsonl", 1
  while exists(path) do
    n = n + 1
    path = ("%s_%d.jsonl"):format(base, n)
  end
  return path
end

local function price_for(model, prices)
  if prices and prices[model] then return prices[model] end
  local best, best_len
  for _, tbl in ipairs({ prices or {}, M.prices }) do
    for k, p in pairs(tbl) do
      if model:sub(1, #k) == k and (not best_len or #k > best_len) then best, best_len = p, #k end
    end
    if best then return best end
  end
  return nil
end

-- The cost of a turn's (checked) usage; nil without a price, or when the price table's numbers
-- give no finite cost.
local function cost_of(usage, price)
  if not price then return nil end
  local inp = price.input or 0
  local cw, cr = price.cache_write or inp * 1.25, price.cache_read or inp * 0.1
  local c = ((usage.input_tokens or 0) * inp + (usage.output_tokens or 0) * (price.output or 0)
             + (usage.cache_creation_input_tokens or 0) * cw + (usage.cache_read_input_tokens or 0) * cr) / 1e6
  if type(c) ~= "number" or c ~= c or c == math.huge or c == -math.huge then return nil end
  return c
end

-- The four counts of a turn's usage. A provider's count is a whole number from 0 to 2^53;
-- anything else (negative, fractional, huge, a string) is not a count, and the turn's usage is
-- then unknown: a provider that said -5e9 input tokens made a run cost -$10,800 and switched
-- token_limit off.
local USAGE_FIELDS = { "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens" }
local function is_count(v)
  return type(v) == "number" and v >= 0 and v < 2 ^ 53 and v == math.floor(v)
end
M._is_count = is_count

-- A provider's value, shown in a note: short, and printable whatever it is.
local function describe(v)
  if type(v) == "number" then
    for p = 15, 17 do
      local t = ("%." .. p .. "g"):format(v)
      if tonumber(t) == v or p == 17 then return t end
    end
  end
  if type(v) == "string" then
    local ok, e = pcall(json.encode, #v > 40 and (v:sub(1, 40) .. "...") or v)
    return ok and e or ("a string of %d bytes"):format(#v)
  end
  if v == json.null then return "null" end
  return "a " .. (json.is_array(v) and "list" or type(v) == "table" and "JSON object" or type(v))
end

local ABANDONED = "the run was abandoned: its messages stopped being read before it ended (the loop over them"
  .. " was left)"

-- The agents of this process whose runs have started, weakly (a dropped agent's own finalizer
-- writes its result): os.exit skips finalizers, so at os.exit each unfinished one gets its
-- result here (seer.exit).
local live_agents = setmetatable({}, { __mode = "k" })
require("seer.exit").on_exit(function(how)
  local why = how.error or how.exit_code ~= nil
    and ("the script called os.exit(%s) before the run ended"):format(tostring(how.exit_code)) or ABANDONED
  for a in pairs(live_agents) do pcall(a._end_unfinished, a, why) end
end)

local function new_agent(opts, fname, interactive)
  check_opts(opts, fname)
  local self = setmetatable({}, Agent)
  self.opts = opts
  self.interactive = interactive
  self.name = opts.name or "agent"
  local provider_name = opts.provider or (opts.replay and "replay") or "claude"
  local pv = PROVIDERS[provider_name]
  if not pv and opts.base_url then pv = { kind = "openai", path = "/chat/completions" } end
  if not pv then
    local names = {}
    for k in pairs(PROVIDERS) do names[#names + 1] = k end
    table.sort(names)
    error(("harness.%s: unknown provider '%s' (known: %s; or give base_url for any OpenAI-compatible server)")
      :format(fname, provider_name, table.concat(names, ", ")), 4)
  end
  self.provider = provider_name
  self.kind = pv.kind
  local env_cache = {}
  self.secrets = {}
  local seen_secret = {}
  local function add_secret(v)
    if type(v) == "string" and #v >= 4 and not seen_secret[v] then
      seen_secret[v] = true
      self.secrets[#self.secrets + 1] = v
    end
  end
  for _, name in ipairs(KNOWN_SECRETS) do add_secret((lookup_var(name, env_cache))) end
  -- Credentials inside a base URL (user:password@, ?key= / ?token= / ?api_key=) would
  -- otherwise reach the transcript through an error message quoting the URL.
  if type(opts.base_url) == "string" then
    local userinfo = opts.base_url:match("^%a[%w+.-]*://([^/@]+)@")
    if userinfo then
      add_secret(userinfo)
      add_secret((userinfo:match(":(.*)$")))
    end
    for k, v in opts.base_url:gmatch("[?&]([%w_%-]+)=([^&#]+)") do
      local lk = k:lower()
      if lk:find("key") or lk:find("token") or lk:find("secret") or lk:find("sig") then add_secret(v) end
    end
  end
  for i, name in ipairs(opts.secrets or {}) do
    if type(name) ~= "string" then error(("harness.%s: secrets[%d] must be a variable name"):format(fname, i), 4) end
    local v = lookup_var(name, env_cache)
    if v and #v < 4 then
      error(("harness.%s: the secret %s is shorter than 4 characters; it cannot be redacted safely"):format(fname, name), 4)
    end
    add_secret(v)
  end
  for _, server in pairs(opts.mcp_config or {}) do
    if type(server) == "table" then
      for k, v in pairs(type(server.env) == "table" and server.env or {}) do
        if type(k) == "string" and type(v) == "string" then
          local up = k:upper()
          if up:find("TOKEN") or up:find("KEY") or up:find("SECRET") or up:find("PASSWORD") then add_secret(v) end
          for tok in v:gmatch("[?&]token=([^&#]+)") do add_secret(tok) end
        end
      end
      for _, v in pairs(type(server.headers) == "table" and server.headers or {}) do
        if type(v) == "string" then add_secret((v:match("^[Bb]earer%s+(.+)$"))) end
      end
    end
  end
  if self.kind == "replay" then
    if not opts.replay then
      error(("harness.%s: provider 'replay' needs replay = <a transcript path or a list of its events>"):format(fname), 4)
    end
    self.replay = load_replay(opts.replay)
    self.model = opts.model or self.replay.model or "replay" -- the recorded model prices the recorded usage
  else
    if opts.replay then error(("harness.%s: replay is only for provider = 'replay'"):format(fname), 4) end
    local base = opts.base_url or (pv.base_env and os.getenv(pv.base_env)) or pv.base
    if pv.base_env and not opts.base_url then
      local b = lookup_var(pv.base_env, env_cache)
      if b then base = b end
    end
    if not base then
      error(("harness.%s: provider '%s' needs base_url"):format(fname, provider_name), 4)
    end
    self.url = base:gsub("/+$", "") .. pv.path
    self.model = opts.model or pv.model
    if not self.model then
      error(("harness.%s: provider '%s' needs model = \"<the model's name on that server>\""):format(fname, provider_name), 4)
    end
    local key = opts.api_key
    if not key then
      for _, name in ipairs(pv.key_env or {}) do
        key = lookup_var(name, env_cache)
        if key then break end
      end
    end
    local local_server = opts.base_url ~= nil and (provider_name ~= "openrouter" and provider_name ~= "gemini")
    if not key and not local_server then
      local dirs = {}
      if experiment_dir() then dirs[#dirs + 1] = experiment_dir() end
      dirs[#dirs + 1] = host.cwd()
      error(("harness.%s: no API key for provider '%s': set %s in the environment or in a .env file (looked in %s), or pass api_key")
        :format(fname, provider_name, table.concat(pv.key_env or { "API_KEY" }, " or "), table.concat(dirs, ", ")), 4)
    end
    self.api_key = key
    add_secret(key)
    self.max_tokens_field = pv.max_tokens_field
    if opts.base_url and provider_name == "openai" then self.max_tokens_field = nil end
  end
  self.secrets = M.secret_forms(self.secrets)
  self.held = {}
  self.prompt = opts.prompt or ""
  self.max_tokens = opts.max_tokens or 8192
  self.max_response_bytes = opts.max_response_bytes or M.MAX_RESPONSE_BYTES
  self.max_tool_result_bytes = opts.max_tool_result_bytes or M.MAX_TOOL_RESULT_BYTES
  self.tool_timeout = opts.tool_timeout or 300
  self.local_tools = {}
  for i, t in ipairs(opts.tools or {}) do
    if type(t) ~= "table" or type(t.name) ~= "string" or type(t.fn) ~= "function" then
      error(("harness.%s: tools[%d] must be {name = string, description = string, input_schema = table, fn = function(input)}")
        :format(fname, i), 4)
    end
    self.local_tools[t.name] = t
  end
  local dir = opts.output_dir or (host.cwd() .. "/outputs")
  self.transcript_path = opts.transcript or transcript_path(dir, self.name)
  if opts.transcript then require("seer.process").mkdir_p(self.transcript_path:match("^(.*)/[^/]*$") or ".") end
  self.transcript = core.transcript(self.transcript_path, self.secrets, opts.sync or 1)
  self.messages = {}
  self.turn = 0
  self.usage = { input_tokens = 0, output_tokens = 0, cache_creation_input_tokens = 0, cache_read_input_tokens = 0 }
  self.cost = 0
  self.cost_known = true
  self.price = price_for(self.model, opts.prices)
  self.co = coroutine.create(function() return self:_body() end)
  self.queue = {}
  -- An unfinished agent that is dropped (its loop left by an error or Ctrl-C raised in the code
  -- that reads its messages, or by a break) still ends its transcript with a result: the error
  -- the script ended with when the process is closing (host.script_error: "interrupted" for
  -- Ctrl-C), else that its messages stopped being read. Then its MCP servers and transcript close.
  local guard = newproxy(true)
  getmetatable(guard).__gc = function() self:_end_unfinished(host.script_error() or ABANDONED) end
  self._guard = guard
  return self
end

-- A run that ends without the harness seeing it end (see new_agent's guard and seer.exit):
-- a started, unfinished run gets its result with why; then its servers and transcript close.
function Agent:_end_unfinished(why)
  if not self.done and self.t0 then -- started: never-started agents wrote nothing
    self.done = true
    pcall(self._write_abnormal, self, why)
  end
  self:_cleanup()
end

function Agent:_cleanup()
  if self.mcp then pcall(self.mcp.close, self.mcp); self.mcp = nil end
  if self.stream then pcall(self.stream.cancel, self.stream); pcall(self.stream.close, self.stream); self.stream = nil end
  if self.tty then pcall(self.tty.restore, self.tty); self.tty = nil end
  if self.transcript then pcall(self.transcript.close, self.transcript); self.transcript = nil end
end

-- Writes an event to the transcript, hands it to on_message and to whoever iterates.
-- A copy of v with every secret replaced in every string, keys included; tables keep their
-- metatables (json.object/array marks). Redacting the decoded values (not the JSON text)
-- catches a secret the JSON encoding would escape.
local function redact_value(v, secrets, depth)
  local t = type(v)
  if t == "string" then return core.redact(v, secrets) end
  if t ~= "table" or v == json.null or depth > 64 then return v end
  local out = {}
  for k, x in pairs(v) do
    out[type(k) == "string" and core.redact(k, secrets) or k] = redact_value(x, secrets, depth + 1)
  end
  return setmetatable(out, getmetatable(v))
end

-- A copy of v that JSON can hold: numbers that are not finite become null, strings and keys that
-- are not UTF-8 get U+FFFD for their bad bytes, a table that is neither a list nor an object gets
-- string keys, and what JSON has no form for (and nesting past 64) becomes a description. Only
-- for an event that fails to encode: its line is still written, and a result line always is.
local function encodable(v, depth)
  local t = type(v)
  if t == "number" then return (v == v and v ~= math.huge and v ~= -math.huge) and v or json.null end
  if t == "string" then return utf8_fix(v) end
  if t == "boolean" or t == "nil" or v == json.null then return v end
  if t ~= "table" then return "[" .. t .. "]" end
  if depth > 64 then return "[nested too deep]" end
  local n, keys, list = #v, 0, true
  for k in pairs(v) do
    keys = keys + 1
    if type(k) ~= "number" or k < 1 or k > n or k ~= math.floor(k) then list = false end
  end
  list = list and keys == n
  local out = {}
  for k, x in pairs(v) do
    local key = k
    if not list then key = utf8_fix(type(k) == "string" and k or tostring(k)) end
    out[key] = encodable(x, depth + 1)
  end
  local mt = getmetatable(v)
  if list then return n == 0 and setmetatable(out, mt) or out end
  return keys == 0 and setmetatable(out, mt) or json.object(out)
end
M._encodable = encodable

function Agent:emit(ev)
  ev.agent = self.name
  if ev.turn == nil and self.turn > 0 then ev.turn = self.turn end
  if #self.secrets > 0 then ev = redact_value(ev, self.secrets, 0) end
  local ok, text = pcall(json.encode, ev)
  if not ok then
    ev = encodable(ev, 0)
    text = json.encode(ev)
  end
  if self.transcript then
    if ev.type == "text_delta" or ev.type == "thinking_delta" then
      -- The deltas of one response go to the transcript up to max_response_bytes of lines (the
      -- assembled message follows in the assistant event whatever happens): a provider that
      -- sends tiny deltas could otherwise make the lines many times what it sent. The line
      -- that crosses the budget is the last one written.
      if (self.delta_bytes or 0) >= self.max_response_bytes then
        self.deltas_omitted = (self.deltas_omitted or 0) + 1
      else
        self.delta_bytes = (self.delta_bytes or 0) + self.transcript:write(text) -- which redacts again, in C
      end
    else
      self.transcript:write(text)
      if ev.type == "result" then self.result_written = true end
    end
    self.last_written = ev.type
  end
  if self.opts.on_message then self.opts.on_message(ev) end
  coroutine.yield(ev)
end

function Agent:redact(text)
  return core.redact(tostring(text), self.secrets)
end

-- Streamed text reaches the transcript one delta at a time, so a secret split across two
-- deltas would be in no single one of them. Each stream (kind, block index) keeps back the
-- end of what it has seen that could still be the start of a secret; what it emits is the
-- redacted text before that. The held text goes out at the end of the response
-- (Agent:_flush_deltas), so the deltas still add up to the message's (redacted) text.
function Agent:_redact_delta(kind, index, text)
  if #self.secrets == 0 then return text end
  local key = kind .. ":" .. tostring(index)
  local buf = core.redact((self.held[key] or "") .. text, self.secrets)
  local hold = 0
  for _, s in ipairs(self.secrets) do
    for k = math.min(#s - 1, #buf), hold + 1, -1 do
      if buf:sub(-k) == s:sub(1, k) then hold = k break end
    end
  end
  self.held[key] = hold > 0 and buf:sub(-hold) or nil
  return buf:sub(1, #buf - hold)
end

function Agent:_flush_deltas()
  local keys = {}
  for key in pairs(self.held) do keys[#keys + 1] = key end
  table.sort(keys)
  for _, key in ipairs(keys) do
    local kind, index = key:match("^([^:]+):(.*)$")
    local text = self.held[key]
    self.held[key] = nil
    self:emit{ type = kind, index = tonumber(index) or index, text = text }
  end
end

---Values of this process's environment (and of a .env in the working directory) that look
---like secrets: the variables harness transcripts always redact, and any whose name holds
---TOKEN, KEY, SECRET or PASSWORD, 8 bytes or longer. `seer transcript view` redacts these, so a
---transcript written without them declared still does not show them.
---@return string[]
function M.environment_secrets()
  local ffi = require "ffi"
  require "seer.process" -- declares environ
  local out, seen = {}, {}
  local function consider(name, v)
    if type(v) ~= "string" or #v < 8 or seen[v] then return end
    local up = name:upper()
    local known = false
    for _, k in ipairs(KNOWN_SECRETS) do if k == up then known = true end end
    if known or up:find("TOKEN") or up:find("KEY") or up:find("SECRET") or up:find("PASSWORD") then
      seen[v] = true
      out[#out + 1] = v
    end
  end
  local i = 0
  while ffi.C.environ[i] ~= nil do
    local kv = ffi.string(ffi.C.environ[i])
    local k, v = kv:match("^([^=]*)=(.*)$")
    if k then consider(k, v) end
    i = i + 1
  end
  for k, v in pairs(M.read_dotenv(host.cwd() .. "/.env") or {}) do consider(k, v) end
  return M.secret_forms(out)
end

---The forms a secret can take in what a provider, a tool or an error message writes: as is,
---JSON-escaped (a secret inside JSON text: tool arguments, a JSON tool result), with "/"
---escaped too, and percent-encoded (a secret in a URL). Forms shorter than 4 bytes are dropped.
---@param secrets string[]
---@return string[]
function M.secret_forms(secrets)
  local out, seen = {}, {}
  local function add(s)
    if type(s) == "string" and #s >= 4 and not seen[s] then seen[s] = true; out[#out + 1] = s end
  end
  for _, s in ipairs(secrets) do
    add(s)
    local esc = json.encode(s):sub(2, -2)
    add(esc)
    add((esc:gsub("/", "\\/")))
    -- percent-encoded as RFC 3986 says (unreserved characters kept) and as eager encoders
    -- do (everything but letters and digits), in upper- and lower-case hex
    for _, keep in ipairs{ "[^%w%-_.~]", "[^%w]" } do
      add((s:gsub(keep, function(ch) return ("%%%02X"):format(ch:byte()) end)))
      add((s:gsub(keep, function(ch) return ("%%%02x"):format(ch:byte()) end)))
    end
  end
  -- Longest first: a secret that contains another is replaced whole.
  table.sort(out, function(a, b) return #a > #b end)
  return out
end

local function text_of(message)
  local parts = {}
  for _, b in ipairs(type(message.content) == "table" and message.content or {}) do
    if b.type == "text" then parts[#parts + 1] = b.text end
  end
  if type(message.content) == "string" then return message.content end
  return table.concat(parts)
end

-- Adds user content; consecutive user content goes into one message (the API alternates roles).
function Agent:_push_user(blocks)
  local last = self.messages[#self.messages]
  if last and last.role == "user" then
    if type(last.content) == "string" then last.content = json.array({ { type = "text", text = last.content } }) end
    for _, b in ipairs(blocks) do last.content[#last.content + 1] = b end
  else
    self.messages[#self.messages + 1] = { role = "user", content = json.array(blocks) }
  end
end

function Agent:_tools_for_model()
  local tools = {}
  for _, t in ipairs(self.tool_list or {}) do
    tools[#tools + 1] = { name = t.name, description = t.description or "", input_schema = t.input_schema }
  end
  return tools
end

-- LLM keys that tools never need: stdio servers (and the kernels they start) get them blanked,
-- so a cell that prints the environment cannot show them.
local LLM_KEYS = { "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY" }

local function without_llm_keys(cfg)
  local out = {}
  for name, server in pairs(cfg) do
    if type(server) == "table" and (server.command or server.type == "stdio") and name ~= "mcpServers" then
      local copy = {}
      for k, v in pairs(server) do copy[k] = v end
      local env = {}
      for k, v in pairs(type(server.env) == "table" and server.env or {}) do env[k] = v end
      for _, k in ipairs(LLM_KEYS) do
        if env[k] == nil and os.getenv(k) then env[k] = "" end
      end
      if next(env) ~= nil then copy.env = env end
      out[name] = copy
    else
      out[name] = server
    end
  end
  return out
end

function Agent:_connect()
  local cfg = self.opts.mcp_config
  if cfg and cfg.mcpServers and type(cfg.mcpServers) == "table" then cfg = cfg.mcpServers end
  if cfg then cfg = without_llm_keys(cfg) end
  self.tool_list = {}
  self.tool_server = {}
  if cfg and next(cfg) ~= nil then
    local mcp = require "seer.mcp.client"
    local mopts = { timeout = self.tool_timeout, connect_timeout = self.opts.connect_timeout or 60,
                    max_result_bytes = M.result_message_bound(self.max_tool_result_bytes) }
    for k, v in pairs(self.opts.mcp_options or {}) do mopts[k] = v end
    self.mcp = mcp.connect(cfg, mopts)
    -- Each server's instructions go into the system prompt, as Claude Code does, so the agent
    -- knows how to use the tools (and, for a session's server, which session is its). A server
    -- is not trusted with the prompt's size: at most 8 KiB each.
    if self.opts.mcp_instructions ~= false then
      local parts = {}
      for _, sv in ipairs(self.mcp:servers()) do
        if type(sv.instructions) == "string" and sv.instructions:match("%S") then
          local text = sv.instructions
          if #text > 8192 then text = text:sub(1, 8192) .. "\n[cut: the server's instructions are longer than 8 KiB]" end
          parts[#parts + 1] = ("# Instructions from the MCP server %q\n%s"):format(tostring(sv.name), text)
        end
      end
      if #parts > 0 then
        self.prompt = (self.prompt ~= "" and (self.prompt .. "\n\n") or "") .. table.concat(parts, "\n\n")
      end
    end
    for _, t in ipairs(self.mcp:tools()) do
      self.tool_list[#self.tool_list + 1] = { name = t.qualified_name, description = t.description,
                                              input_schema = t.input_schema, server = t.server }
    end
  end
  for _, t in ipairs(self.opts.tools or {}) do
    if self.mcp then
      for _, m in ipairs(self.tool_list) do
        if m.name == t.name then
          error(("harness: the Lua tool '%s' has the name of a tool of MCP server '%s'"):format(t.name, m.server), 0)
        end
      end
    end
    self.tool_list[#self.tool_list + 1] = { name = t.name, description = t.description,
                                            input_schema = t.input_schema or { type = "object" }, server = "lua" }
  end
end

function Agent:_run_tool(block)
  if block.seer_invalid_input then
    return {
      { type = "text", text = ("Error: the arguments of this call are not a valid JSON object (%s). They were: %s\n"
        .. "Call %s again with arguments that are one JSON object matching its input schema.")
        :format(block.seer_input_error or "invalid", short(block.seer_invalid_input, 2000), block.name) },
    }, true
  end
  local lt = self.local_tools[block.name]
  if lt then
    local ok, r = pcall(lt.fn, block.input, self)
    if not ok then
      if tostring(r):match("interrupted$") then error(r, 0) end
      return { { type = "text", text = "Error: " .. tostring(r) } }, true
    end
    if type(r) == "string" then return { { type = "text", text = r ~= "" and r or "(no output)" } }, false end
    if type(r) == "table" and r.content then return mcp_content(r), r.isError == true end
    return { { type = "text", text = r == nil and "(no output)" or json.encode(r) } }, false
  end
  if not self.mcp then
    return { { type = "text", text = ("Error: there is no tool named '%s'"):format(tostring(block.name)) } }, true
  end
  local timeout = self.tool_timeout
  if self.opts.time_limit then
    local left = self.opts.time_limit - (now() - self.t0)
    if left < timeout then timeout = math.max(left, 0.5) end
  end
  local ok, r = pcall(self.mcp.call, self.mcp, block.name, block.input, { timeout = timeout })
  if not ok then
    local msg = tostring(r)
    if msg:match("interrupted$") then error(r, 0) end
    return { { type = "text", text = "Error: " .. msg } }, true, nil
  end
  return mcp_content(r), r.isError == true, r.structuredContent, type(r.seer_cut) == "table" and r.seer_cut or nil
end

-- Waits for the next event of the stream, yielding WAIT while there is none.
function Agent:_next_event(stream)
  while true do
    local t = stream:next()
    if t then return json.decode(utf8_fix(t)) end
    if self.interrupt_requested then return { type = "seer_interrupt" } end
    if self.opts.time_limit and now() - self.t0 > self.opts.time_limit then return { type = "seer_time_limit" } end
    local st = stream:state()
    if st ~= "running" and st ~= "waiting" then return nil end
    coroutine.yield(WAIT)
  end
end

function Agent:_request()
  if self.kind == "replay" then
    local rp = self.replay
    local turn = rp.turns[rp.next]
    if not turn then return nil end
    rp.next = rp.next + 1
    local msg = remap(turn.message, rp.map)
    return { provider = "replay", message = msg, stop_reason = turn.stop_reason or "end_turn",
             usage = turn.usage or {}, model = turn.model or "replay" }
  end
  local params = {}
  for k, v in pairs(self.opts.params or {}) do params[k] = v end
  if self.opts.temperature then params.temperature = self.opts.temperature end
  if self.opts.thinking then params.thinking = self.opts.thinking end
  return {
    provider = self.kind, url = self.url, api_key = self.api_key, model = self.model, max_tokens = self.max_tokens,
    max_tokens_field = self.max_tokens_field, system = self.prompt, messages = json.array(self.messages),
    tools = json.array(self:_tools_for_model()), cache = self.opts.cache ~= false, params = json.object(params),
    headers = json.object(self.opts.headers or {}), max_retries = self.opts.max_retries,
    retry_base = self.opts.retry_base, retry_max = self.opts.retry_max, idle_timeout = self.opts.idle_timeout,
    max_response_bytes = self.max_response_bytes, response_timeout = self.opts.response_timeout,
  }
end

-- The result event of a run that ended by an error or Ctrl-C (the loop never reached _finish):
-- what it used and cost so far, how long it ran, and the error (secrets redacted; an interrupt
-- is "interrupted", not the internal line where it landed).
function Agent:_abnormal_result(msg)
  local interrupted = msg:match("interrupted$") ~= nil
  return { type = "result", agent = self.name, reason = interrupted and "interrupted" or "error",
           replayed = self.kind == "replay" or nil,
           error = interrupted and "interrupted" or self:redact(msg), turns = self.turn, usage = self.usage,
           cost_usd = self:_total_cost(), usage_unknown_turns = self.usage_unknown_turns,
           estimated_tokens = self.estimated_tokens,
           duration_s = self.t0 and (now() - self.t0) or json.null, transcript = self.transcript_path }
end

-- The transcript's last lines for a run that ended by an error raised inside it (or Ctrl-C,
-- while the loop or its driver ran): the error (not for an interrupt) and the result. Whatever
-- they hold, they are written: made encodable first, and a result that still cannot be encoded
-- is written with its reason and error alone. Nothing when the result was written already.
function Agent:_write_abnormal(msg)
  -- the transcript's own record: an interrupt can land between a result's write and the flag
  if not self.transcript or self.result_written or self.transcript:ended() then return end
  local r = self:_abnormal_result(msg)
  local function write(ev)
    return pcall(function() self.transcript:write(json.encode(encodable(ev, 0))) end)
  end
  if r.reason == "error" and self.last_written ~= "error" then
    write{ type = "error", agent = self.name, turn = self.turn > 0 and self.turn or nil, message = r.error }
  end
  if not write(r) then
    write{ type = "result", agent = self.name, reason = r.reason, error = tostring(r.error), turns = self.turn,
           cost_usd = json.null, transcript = self.transcript_path }
  end
  self.result_written = true
end

function Agent:_finish(reason, extra)
  -- replayed: the usage and cost are the recording's, priced at its model; no model was called
  -- (seer.experiment's ledger counts such a run as $0, the recording's price kept beside it)
  local ev = { type = "result", reason = reason, turns = self.turn, text = self.last_text or "",
               replayed = self.kind == "replay" or nil,
               usage = self.usage, cost_usd = self:_total_cost(), usage_unknown_turns = self.usage_unknown_turns,
               estimated_tokens = self.estimated_tokens,
               duration_s = now() - self.t0, transcript = self.transcript_path }
  for k, v in pairs(extra or {}) do ev[k] = v end
  self.result = ev
  self:emit(ev)
  return ev
end

-- One model response: streams it, emitting deltas. Returns the final "message" event, or nil
-- and a reason ("interrupted", "time_limit", "error", "replay_exhausted") with a message.
function Agent:_one_response()
  local req = self:_request()
  if not req then
    return nil, "replay_exhausted", ("the replay transcript has no assistant turn %d (it holds %d)")
      :format(self.replay.next, #self.replay.turns)
  end
  self:emit{ type = "request", turn = self.turn, model = self.model, messages = #self.messages }
  self.delta_bytes, self.deltas_omitted = 0, nil
  local body = json.encode(req)
  self.request_bytes = #body -- what token_limit counts for the input of a turn whose usage is unknown
  local stream = get_pool():stream(body)
  self.stream = stream
  local final, why, msg
  while true do
    local ev = self:_next_event(stream)
    if ev == nil then
      why, msg = "error", "the stream ended without a message (state " .. stream:state() .. ")"
      break
    end
    local t = ev.type
    if t == "text_delta" or t == "thinking_delta" then
      local text = self:_redact_delta(t, ev.index, ev.text or "")
      if text ~= "" then self:emit{ type = t, index = ev.index, text = text } end
    elseif t == "tool_use_start" then
      self:emit{ type = t, index = ev.index, id = ev.id, name = ev.name }
    elseif t == "retry" then
      self.held = {} -- the retried stream starts over; what was held back was never shown
      -- (the failed attempt's delta lines stay counted: the transcript holds them)
      self:emit{ type = "retry", attempt = ev.attempt, status = ev.status, wait_s = ev.wait_s, reason = ev.reason,
                 error = ev.error }
    elseif t == "message" then
      final = ev
      break
    elseif t == "error" then
      self:emit{ type = "error", status = ev.status, message = ev.message, error = ev.error, attempts = ev.attempts,
                 deltas_omitted = self.deltas_omitted }
      why, msg = "error", ev.message
      break
    elseif t == "seer_interrupt" or t == "seer_time_limit" then
      stream:cancel()
      local partial = json.decode(utf8_fix(stream:partial()))
      self.partial = partial
      why = t == "seer_interrupt" and "interrupted" or "time_limit"
      msg = why == "time_limit" and ("the time limit of %g s was reached"):format(self.opts.time_limit) or nil
      break
    end
    -- "block" events carry nothing the assistant message will not
  end
  stream:close()
  self.stream = nil
  self:_flush_deltas()
  return final, why, msg
end

-- Counts a turn's usage. It is known when the server sent input_tokens and output_tokens and
-- every count it sent is a count (is_count; a missing or null cache count is 0). An unknown
-- turn (a server that sends no usage, as some local ones do, or values that are not counts)
-- adds nothing to the totals or the cost, makes the run's cost unknown (cost_usd null), and is
-- said so (usage_known = false, a note, usage_unknown_turns). token_limit then counts an upper
-- estimate of the turn instead of nothing, so that no answer of a server makes it count less
-- than was used: the request's bytes for the input (a token is at least a byte of text) plus
-- max_tokens or the response's bytes, whichever is more, for the output.
-- Returns the turn's usage (zeros when unknown), its cost (or nil), whether it is known, and
-- for an unknown turn the estimate and the note.
function Agent:_account(final)
  local u = type(final.usage) == "table" and final.usage or {}
  local bad, missing = {}, {}
  for _, k in ipairs(USAGE_FIELDS) do
    local v = u[k]
    if v == nil or v == json.null then
      if k == "input_tokens" or k == "output_tokens" then missing[#missing + 1] = k end
    elseif not is_count(v) then
      bad[#bad + 1] = ("%s = %s"):format(k, describe(v))
    end
  end
  if u.seer_usage_error ~= nil then bad[#bad + 1] = short(u.seer_usage_error, 200) end -- from the C assembler
  local turn_usage = { input_tokens = 0, output_tokens = 0, cache_creation_input_tokens = 0, cache_read_input_tokens = 0 }
  if #bad == 0 and #missing == 0 then
    for _, k in ipairs(USAGE_FIELDS) do
      if is_count(u[k]) then turn_usage[k] = u[k] end
    end
    for k, v in pairs(turn_usage) do self.usage[k] = self.usage[k] + v end
    local c = cost_of(turn_usage, self.price)
    if c then self.cost = self.cost + c else self.cost_known = false end
    return turn_usage, c, true
  end
  self.usage_unknown_turns = (self.usage_unknown_turns or 0) + 1
  local ok, content = pcall(json.encode, type(final.message) == "table" and final.message.content or {})
  local estimate = (self.request_bytes or 0) + math.max(self.max_tokens, ok and #content or 0)
  self.estimated_tokens = (self.estimated_tokens or 0) + estimate
  local why
  if #bad > 0 then
    why = ("the server's usage for this turn is not a count of tokens (%s)"):format(table.concat(bad, "; "))
  elseif next(u) == nil then
    why = "the server sent no usage for this turn"
  else
    why = ("the server's usage for this turn has no %s"):format(table.concat(missing, " and no "))
  end
  local note = why .. ": its tokens and cost are unknown and left out of the totals (the run's cost_usd is null)"
  if self.opts.token_limit then
    note = note .. ("; token_limit counts an upper estimate of %d tokens for it (the request's %d bytes plus max_tokens"
      .. " or the response's bytes)"):format(estimate, self.request_bytes or 0)
  end
  return turn_usage, nil, false, estimate, note
end

-- What token_limit counts: the tokens servers reported, plus the estimates of the turns whose
-- usage is unknown.
function Agent:_tokens_used()
  local u = self.usage
  return u.input_tokens + u.output_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
    + (self.estimated_tokens or 0)
end

-- The run's cost so far, or json.null when a price or a turn's usage is unknown.
function Agent:_total_cost()
  if self.cost_known and (self.usage_unknown_turns or 0) == 0 then return self.cost end
  return json.null
end

-- The notebook session each stdio server of mcp_config is attached to (SEER_SESSION_ID), so a
-- replay can use the live session where the recording used its own.
local function mcp_sessions(cfg)
  local out
  for name, server in pairs(cfg or {}) do
    local id = type(server) == "table" and type(server.env) == "table" and server.env.SEER_SESSION_ID
    if type(id) == "string" and id ~= "" then
      out = out or {}
      out[name] = id
    end
  end
  return out
end

function Agent:_body()
  self.t0 = now()
  live_agents[self] = true
  self:_connect()
  local sessions = mcp_sessions(self.opts.mcp_config)
  if self.replay and self.replay.sessions and sessions then
    for name, rec in pairs(self.replay.sessions) do
      if sessions[name] and sessions[name] ~= rec then self.replay.map[rec] = sessions[name] end
    end
  end
  self:emit{
    type = "run_start", provider = self.provider, model = self.model, url = self.url, system = self.prompt,
    tools = json.array(self:_tools_for_model()), seer_version = require("seer").version,
    limits = { max_turns = self.opts.max_turns, max_tokens = self.max_tokens, time_limit = self.opts.time_limit,
               token_limit = self.opts.token_limit, tool_timeout = self.tool_timeout,
               max_response_bytes = self.kind ~= "replay" and self.max_response_bytes or nil,
               max_tool_result_bytes = self.max_tool_result_bytes,
               response_timeout = self.opts.response_timeout },
    replay = type(self.opts.replay) == "string" and self.opts.replay or nil, interactive = self.interactive or nil,
    mcp_sessions = sessions,
  }
  local pending = self.opts.user_message
  if pending == nil and not self.interactive then pending = "Begin." end
  while true do
    if pending == nil and self.interactive then
      pending = coroutine.yield(NEED_INPUT)
      if pending == nil then return self:_finish("user_exit") end
    end
    if pending then
      self:emit{ type = "user", text = pending }
      local blocks = self.carry or {}
      self.carry = nil
      blocks[#blocks + 1] = { type = "text", text = pending }
      self:_push_user(blocks)
      pending = nil
    end
    -- the turns of one response to the user
    local outcome
    while true do
      if self.opts.max_turns and self.turn >= self.opts.max_turns then outcome = "max_turns" break end
      if self.opts.token_limit and self:_tokens_used() >= self.opts.token_limit then outcome = "token_limit" break end
      if self.opts.time_limit and now() - self.t0 > self.opts.time_limit then outcome = "time_limit" break end
      self.turn = self.turn + 1
      local final, why, msg = self:_one_response()
      if not final then
        if why == "interrupted" then
          local content = {}
          for _, b in ipairs(self.partial and self.partial.message.content or {}) do
            if b.type == "text" and b.text ~= "" then content[#content + 1] = b end
          end
          if #content > 0 then
            self.messages[#self.messages + 1] = { role = "assistant", content = json.array(content) }
            self.last_text = text_of({ content = content })
          end
          self:emit{ type = "interrupted", during = "response", partial = json.array(content) }
          self.carry = { { type = "text", text = "[The user interrupted the response.]" } }
          outcome = "interrupted"
          break
        end
        if why == "time_limit" then return self:_finish("time_limit", { message = msg }) end
        return self:_finish(why, { error = msg })
      end
      local message = { role = "assistant", content = final.message.content }
      self.messages[#self.messages + 1] = message
      local t = text_of(message)
      if t ~= "" then self.last_text = t end
      local turn_usage, c, known, estimate, note = self:_account(final)
      self:emit{ type = "assistant", message = message, stop_reason = final.stop_reason, usage = final.usage,
                 model = final.model, id = final.id, attempts = final.attempts, deltas_omitted = self.deltas_omitted }
      self:emit{ type = "usage", usage = turn_usage, cost_usd = c or json.null, total = self.usage,
                 total_cost_usd = self:_total_cost(), price_known = self.price ~= nil, usage_known = known,
                 estimated_tokens = estimate, note = note, replayed = self.kind == "replay" or nil }
      local calls = {}
      for _, b in ipairs(message.content) do
        if b.type == "tool_use" then calls[#calls + 1] = b end
      end
      local stop = final.stop_reason
      if stop == "pause_turn" then
        -- the assistant content goes back as it is and the model continues
      elseif #calls > 0 and (stop == "tool_use" or stop == nil or stop == json.null or stop == "end_turn") then
        local results = {}
        local cancelled = false
        for _, b in ipairs(calls) do
          if self.interrupt_requested then cancelled = true end
          if cancelled then
            results[#results + 1] = { type = "tool_result", tool_use_id = b.id, is_error = true,
                                      content = json.array({ { type = "text", text = "Cancelled: the user interrupted." } }) }
            self:emit{ type = "tool_result", id = b.id, name = b.name, is_error = true, cancelled = true,
                       content = results[#results].content }
          else
            self:emit{ type = "tool_call", id = b.id, name = b.name, input = b.input,
                       invalid_input = b.seer_invalid_input, input_error = b.seer_input_error }
            local t0 = now()
            local content, is_error, structured, wire = self:_run_tool(b)
            if self.replay and self.replay.results[b.id] then
              learn_ids(self.replay.map, self.replay.results[b.id].structured, structured)
            end
            local recorded, cut, omitted
            content, recorded, cut, omitted = bound_result(content, structured, self.max_tool_result_bytes, wire)
            results[#results + 1] = { type = "tool_result", tool_use_id = b.id, content = json.array(content),
                                      is_error = is_error or nil }
            self:emit{ type = "tool_result", id = b.id, name = b.name, is_error = is_error, content = json.array(content),
                       structured = recorded, duration_s = now() - t0, cut_bytes = cut, structured_omitted_bytes = omitted }
          end
        end
        if cancelled then
          self.carry = results
          self.carry[#self.carry + 1] = { type = "text", text = "[The user interrupted the tool calls.]" }
          self:emit{ type = "interrupted", during = "tools" }
          outcome = "interrupted"
          break
        end
        self:_push_user(results)
      else
        outcome = stop or "end_turn"
        break
      end
    end
    self.interrupt_requested = false
    if not self.interactive or outcome == "max_turns" or outcome == "token_limit" or outcome == "time_limit" then
      return self:_finish(outcome)
    end
  end
end

-- Resumes the loop once: returns an event, WAIT, NEED_INPUT, or nil when the run is over.
function Agent:_step(input)
  if self.done then return nil end
  local ok, v = coroutine.resume(self.co, input)
  if not ok then
    self.done = true
    local msg = tostring(v)
    self:_write_abnormal(msg)
    self:_cleanup()
    if msg:match("interrupted$") then error("interrupted", 0) end
    error(("harness: agent '%s': %s (transcript: %s)"):format(self.name, self:redact(msg), self.transcript_path), 0)
  end
  if coroutine.status(self.co) == "dead" then
    self.done = true
    self:_cleanup()
    local r = self.result
    if r and r.error and not self.interactive then
      error(("harness: agent '%s' failed: %s (transcript: %s)"):format(self.name, self:redact(r.error), self.transcript_path), 0)
    end
    return nil
  end
  return v
end

-- Ctrl-C (or another error) while the driver waits outside the loop's coroutine: the transcript
-- still ends with a result, and the servers are shut down.
function Agent:_abort(err)
  if not self.done then
    self.done = true
    self:_write_abnormal(tostring(err))
    self:_cleanup()
  end
  error(err, 0)
end

local function wait_pool(agents, timeout, fd)
  local ok, r = pcall(get_pool().run, get_pool(), timeout, fd)
  if not ok then
    for _, a in ipairs(agents) do if not a.done then pcall(a._abort, a, r) end end
    error(r, 0)
  end
  return r
end

---The next message of the run (blocking while the model streams), or nil at the end.
---@return table|nil
function Agent:next()
  while true do
    local v = self:_step()
    if v == nil then return nil end
    if v == WAIT then
      wait_pool({ self }, 0.25)
    elseif v == NEED_INPUT then
      error("harness: this agent is interactive; use run_agent_interactive", 2)
    else
      return v
    end
  end
end

---Runs the agent to the end (on_message still sees every message) and returns the result message.
---@return table
function Agent:run()
  while self:next() do end
  return self.result
end

Agent.__call = function(self) return self:next() end

---@class seerharness.opts
---@field prompt? string the system prompt
---@field mcp_config? table MCP servers whose tools the agent gets ({name = {type, command, args, env} | {type = "http", url}})
---@field user_message? string the first user message (default "Begin.")
---@field provider? string "claude" (default), "openai", "openrouter", "gemini", "replay", or any name with base_url
---@field model? string default: claude-sonnet-4-5 (claude), gpt-4.1 (openai), gemini-2.5-flash (gemini)
---@field base_url? string an OpenAI-compatible server (vLLM, Ollama, llama.cpp: "http://127.0.0.1:8000/v1"), or another Anthropic endpoint
---@field api_key? string default: the provider's variable from the environment or a .env file
---@field max_turns? integer model responses at most
---@field max_tokens? integer per response (default 8192)
---@field time_limit? number seconds for the whole run
---@field token_limit? integer input + output + cache tokens for the whole run
---@field tool_timeout? number seconds a tool call may take (default 300)
---@field on_message? fun(msg: table) every message, as it happens
---@field name? string the agent's name (transcript file name, "agent" field)
---@field output_dir? string where the transcript goes (default ./outputs)
---@field transcript? string the transcript's exact path instead
---@field secrets? string[] names of variables whose values must never appear in transcripts
---@field tools? table[] Lua tools {name, description, input_schema, fn(input, agent) -> string|table}
---@field replay? string|table a transcript (path or its events) whose assistant turns provider "replay" plays
---@field prices? table<string, seerharness.price> per-model prices for this run
---@field cache? boolean prompt caching on tools, system and the last message (default true; Anthropic)
---@field thinking? table Anthropic extended thinking, e.g. {type = "enabled", budget_tokens = 4000}
---@field temperature? number
---@field params? table extra fields for the request body
---@field headers? table<string, string> extra HTTP headers
---@field max_retries? integer retries per request (default 2, the SDKs' policy)
---@field retry_base? number first backoff in seconds (default 0.5)
---@field retry_max? number longest backoff in seconds (default 8)
---@field idle_timeout? number seconds without a byte before a stream counts as dropped (default 600)
---@field max_response_bytes? integer cap on one response (default 64 MiB): its text, thinking, tool arguments and other content (4 times that on the wire), and its deltas in the transcript. A response past it fails the run with an error naming the option; it is not retried
---@field max_tool_result_bytes? integer cap on one tool result (default 4 MiB): its text and images for the model and the transcript, and the structured result the transcript records. Past it the text is cut (an image left out) with a note saying how much. The MCP client holds at most 2 x this + 1 MiB of a server's response (result_message_bound); past that the rest is not read
---@field response_timeout? number seconds one response (one attempt) may take (default: none; time_limit bounds the run). Past it the response fails, not retried
---@field connect_timeout? number seconds for the MCP servers to start (default 60)
---@field mcp_options? table more options for seer.mcp.client.connect
---@field mcp_instructions? boolean put each MCP server's instructions into the system prompt (default true; at most 8 KiB each)
---@field sync? integer 0: never fsync the transcript, 1: every event but deltas (default), 2: every event

---Runs an agent. Returns an iterator over its messages (use it in a for loop, or call :run()).
---Nothing starts until the first message is asked for. A provider failure that the retry policy
---gives up on is raised as an error after the transcript records it.
---@param opts seerharness.opts
---@return fun(): table|nil
function M.run_agent(opts)
  local agent = new_agent(opts, "run_agent", false) -- not a tail call: error levels count this frame
  return agent
end

---Runs several agents at once in this process; each has its own tools and transcript. Their
---responses stream concurrently (tool calls run one at a time). on_message of each agent sees
---its messages. Returns the result message of each agent, by name and in order.
---@param list seerharness.opts[]
---@return table<string|integer, table>
function M.run_agents(list)
  if type(list) ~= "table" or #list == 0 then error("harness.run_agents: takes a list of run_agent option tables", 2) end
  local agents, names = {}, {}
  for i, o in ipairs(list) do
    if type(o) ~= "table" then error(("harness.run_agents: entry %d must be a table of options"):format(i), 2) end
    local a = new_agent(o, "run_agents", false)
    if a.name == "agent" then a.name = "agent" .. i end
    if names[a.name] then error(("harness.run_agents: two agents are named '%s'"):format(a.name), 2) end
    names[a.name] = true
    agents[i] = a
  end
  local results = {}
  local live = #agents
  local first_error
  while live > 0 do
    local progressed = false
    for i, a in ipairs(agents) do
      if not a.done then
        local ok, v = pcall(a._step, a)
        if not ok then
          first_error = first_error or v
          if tostring(v):match("interrupted$") then
            for _, b in ipairs(agents) do
              if not b.done then b.done = true; b:_write_abnormal(tostring(v)); b:_cleanup() end
            end
            error(v, 0)
          end
          live = live - 1
          results[i] = a.result
        elseif v == nil then
          live = live - 1
          results[i] = a.result
          progressed = true
        elseif v ~= WAIT then
          progressed = true
        end
      end
    end
    if not progressed and live > 0 then wait_pool(agents, 0.25) end
  end
  for i, a in ipairs(agents) do results[a.name] = results[i] end
  if first_error then error(first_error, 0) end
  return results
end

---------------------------------------------------------------------------------------------
-- interactive

local function show_call(b)
  local ok, args = pcall(json.encode, b.input or {})
  return ("%s(%s)"):format(b.name, short(ok and args or "?", 200))
end

---A chat in the terminal: the model's answers stream as they come; ESC interrupts the current
---response (its stream and pending tool calls are cancelled) and the conversation goes on;
---`exit`, `quit` or Ctrl-D ends it. Takes run_agent's options; user_message (if any) is sent
---first. Returns the result message.
---@param opts seerharness.opts
---@return table
function M.run_agent_interactive(opts)
  local a = new_agent(opts, "run_agent_interactive", true) -- error levels count this frame
  -- what the model writes and what tools return (a sandbox's output) reach the terminal without
  -- their escape sequences (seer.terminal)
  local safe = require("seer.terminal").safe
  local out = { write = function(self, ...)
    for i = 1, select("#", ...) do io.stdout:write(safe((select(i, ...)))) end
    return self
  end, flush = function() io.stdout:flush() end }
  local tty_in = core.isatty(0)
  local input
  local function prompt()
    out:write("\n> ")
    out:flush()
    local line = io.read("*l")
    if line == nil then out:write("\n") return nil end
    local trimmed = line:match("^%s*(.-)%s*$")
    if trimmed == "exit" or trimmed == "quit" then return nil end
    if trimmed == "" then return prompt() end
    return line
  end
  local function raw_on()
    if tty_in and not a.tty then a.tty = core.tty_raw(0) end
  end
  local function raw_off()
    if a.tty then a.tty:restore(); a.tty = nil end
  end
  local function check_esc()
    if not a.tty then return end
    local bytes = core.read_available(0)
    if bytes and bytes:find("\27", 1, true) then a.interrupt_requested = true end
  end
  local ok, err = pcall(function()
    raw_on()
    while true do
      local v = a:_step(input)
      input = nil
      if v == nil then break end
      if v == WAIT then
        local r = wait_pool({ a }, 0.25, a.tty and 0 or nil)
        if r == "fd" then check_esc() end
      elseif v == NEED_INPUT then
        raw_off()
        input = prompt()
        if input == nil then
          local last = a:_step(nil) -- lets the loop write its result
          while last ~= nil do last = a:_step() end
          break
        end
        raw_on()
      else
        check_esc()
        local t = v.type
        if t == "text_delta" then out:write(v.text) out:flush()
        elseif t == "tool_call" then out:write("\n[tool] ", show_call(v), "\n") out:flush()
        elseif t == "tool_result" then
          local txt = {}
          for _, c in ipairs(v.content or {}) do if c.type == "text" then txt[#txt + 1] = c.text end end
          out:write(("[%s] %s\n"):format(v.is_error and "tool error" or "result", short(table.concat(txt, " "):gsub("\n", " "), 300)))
          out:flush()
        elseif t == "retry" then out:write(("\n[retrying in %.1f s: %s]\n"):format(v.wait_s or 0, v.reason or "")) out:flush()
        elseif t == "interrupted" then out:write("\n[interrupted]\n") out:flush()
        elseif t == "error" then out:write("\n[error] ", v.message or "", "\n") out:flush()
        elseif t == "result" and v.reason ~= "user_exit" then
          out:write(("\n[%s]\n"):format(v.reason)) out:flush()
        end
      end
    end
  end)
  raw_off()
  if not ok and not a.done then -- raised here (printing, reading the prompt), not inside the loop
    a.done = true
    a:_write_abnormal(tostring(err))
  end
  a:_cleanup()
  if not ok then error(err, 0) end
  return a.result
end

return M
