--- `seer serve MODEL`: a model behind an OpenAI-compatible endpoint (lua/seer/serve.lua,
--- docs/serve.md). Prints one JSON line {"url", "port", "model"} on stdout when it listens.
local M = {}

local USAGE = [[
usage: seer serve MODEL [--port N] [--host ADDR] [--name ID] [--token TOKEN] [--max-tokens N] [--adapter DIR] [--read-timeout S]
                        [--precision exact|fast] [--allow-origin ORIGIN]... [--allow-host NAME]...

Serves MODEL (a directory or a hub id in the cache) at http://HOST:PORT/v1 with OpenAI's
/v1/chat/completions, /v1/completions and /v1/models, one request at a time, until Ctrl-C.
  --port N        default 0: a free port (printed)
  --host ADDR     default 127.0.0.1 (0.0.0.0 serves every interface: then set a token)
  --name ID       the model id clients send and see (default: the model's directory name)
  --token TOKEN   require "Authorization: Bearer TOKEN" (or set SEER_SERVE_TOKEN)
  --max-tokens N  the largest max_tokens a request may ask (default 1024)
  --adapter DIR   a PEFT LoRA adapter on top of MODEL
  --read-timeout S  seconds a client has to send its request (default 10; the head within 5)
  --allow-origin ORIGIN  take requests from web pages of ORIGIN (e.g. http://localhost:3000; * any),
                  with CORS headers; other pages' requests (a foreign Origin header) are refused
  --allow-host NAME  take requests whose Host is NAME (or NAME:PORT; * any) besides this server's
                  address (a proxy's name); other Host values are refused (DNS rebinding)
  --precision P   exact (default) or fast: bf16 weights meet activations rounded to bf16, as
                  torch's bf16 matmul (faster where the CPU has AMX or AVX512_BF16; docs/model.md)]]

function M.main(...)
  local args = { ... }
  local o = {}
  local i = 1
  local function value(flag)
    i = i + 1
    local v = args[i]
    if v == nil then io.stderr:write("seer serve: ", flag, " needs a value\n", USAGE, "\n"); os.exit(2) end
    return v
  end
  -- a number flag's value: "--port abc" was read as no port (a random one) without a word
  local function number(flag)
    local v = value(flag)
    local n = tonumber(v)
    if not n or n ~= n then io.stderr:write("seer serve: ", flag, " needs a number, got '", v, "'\n"); os.exit(2) end
    return n
  end
  while i <= #args do
    local a = args[i]
    if a == "-h" or a == "--help" then print(USAGE) return
    elseif a == "--port" then o.port = number(a)
    elseif a == "--host" then o.host = value(a)
    elseif a == "--name" then o.name = value(a)
    elseif a == "--token" then o.token = value(a)
    elseif a == "--max-tokens" then o.max_tokens = number(a)
    elseif a == "--adapter" then o.adapter = value(a)
    elseif a == "--read-timeout" then o.read_timeout = number(a)
    elseif a == "--precision" then o.precision = value(a)
    elseif a == "--allow-origin" then
      local v = value(a)
      if v ~= "*" and not v:match("^https?://[^/%s]+/?$") then
        io.stderr:write("seer serve: --allow-origin needs an origin such as http://localhost:3000 (or *), got '", v, "'\n"); os.exit(2)
      end
      o.allow_origins = o.allow_origins or {}
      o.allow_origins[#o.allow_origins + 1] = v
    elseif a == "--allow-host" then
      local v = value(a)
      if v ~= "*" and not v:match("^[%w%.%-%[%]:]+$") then
        io.stderr:write("seer serve: --allow-host needs a host name (or NAME:PORT, or *), got '", v, "'\n"); os.exit(2)
      end
      o.allow_hosts = o.allow_hosts or {}
      o.allow_hosts[#o.allow_hosts + 1] = v
    elseif a:sub(1, 1) == "-" then io.stderr:write("seer serve: unknown option ", a, "\n", USAGE, "\n"); os.exit(2)
    elseif o.model then io.stderr:write("seer serve: unexpected argument ", a, "\n", USAGE, "\n"); os.exit(2)
    else o.model = a end
    i = i + 1
  end
  if not o.model then io.stderr:write("seer serve: MODEL is missing\n", USAGE, "\n"); os.exit(2) end
  if o.port and (o.port ~= math.floor(o.port) or o.port < 0 or o.port > 65535) then
    io.stderr:write("seer serve: --port must be 0..65535\n"); os.exit(2)
  end
  if o.max_tokens and (o.max_tokens < 1 or o.max_tokens ~= math.floor(o.max_tokens)) then
    io.stderr:write("seer serve: --max-tokens must be a positive integer\n"); os.exit(2)
  end
  if o.read_timeout and not (o.read_timeout > 0 and o.read_timeout <= 86400) then
    io.stderr:write("seer serve: --read-timeout must be a number of seconds from 0 (exclusive) to 86400\n"); os.exit(2)
  end
  if o.precision and o.precision ~= "exact" and o.precision ~= "fast" then
    io.stderr:write("seer serve: --precision must be exact or fast, got '", o.precision, "'\n"); os.exit(2)
  end
  o.token = o.token or os.getenv("SEER_SERVE_TOKEN")
  if o.token == "" then o.token = nil end
  if o.host and o.host ~= "127.0.0.1" and not o.token then
    io.stderr:write("seer serve: serving beyond loopback without a token lets anyone on the network use the model; add --token\n")
    os.exit(2)
  end
  -- a MODEL or --adapter that cannot be loaded is the user's to fix: one line, no traceback,
  -- status 1 (as `seer model info`)
  local ok, model = pcall(function()
    local m = require("seer.model").load(o.model, { precision = o.precision })
    if o.adapter then m:load_adapter(o.adapter) end
    return m
  end)
  if not ok then
    io.stderr:write("seer serve: ", require("seer.terminal").safe((tostring(model):gsub("^[^:\n]+:%d+: ", ""))), "\n")
    os.exit(1)
  end
  local json = require "seer.json"
  local name = o.name or (o.model:match("([^/]+)/*$") or o.model)
  require("seer.serve").serve{ model = model, name = name, host = o.host, port = o.port, token = o.token,
    max_tokens = o.max_tokens, read_timeout = o.read_timeout, allow_origins = o.allow_origins, allow_hosts = o.allow_hosts,
    on_ready = function(info)
      io.stdout:write(json.encode{ url = info.url, port = info.port, model = name }, "\n")
      io.stdout:flush()
      io.stderr:write(("seer serve: %s at %s (Ctrl-C ends it)\n"):format(name, info.url))
    end }
end

return M
