--- seer.mcp.cli_tools: the tools of `seer mcp cli`, an agent's shell in a sandbox, with the
--- reference's names (run_command, read_file, write_file, list_files; its run_python is
--- run_lua here). Everything runs inside the sandbox through its sandboxd, so the agent gets
--- exactly the sandbox's view: /workspace writable, the rest read-only, no network unless the
--- sandbox has it. Cancelling a call stops the command (its whole process group).
---@class seermcp.cli_tools
local M = {}

local S = require "seer.sandbox"

M.INSTRUCTIONS = [[A shell in an isolated sandbox. Your working directory is /workspace (writable); models are
read-only under /models (their paths are in MODEL_*_PATH variables); /tmp is private scratch
space. run_command runs a shell command, run_lua runs Lua with seer (require "seer.model" etc.),
read_file/write_file/list_files work on files (relative paths are under /workspace).]]

M.DEFAULT_TIMEOUT = 600
M.DEFAULT_MAX_OUTPUT = 100000
M.MAX_LIST = 10000 -- entries list_files shows

local function is_utf8(s)
  -- the stock pattern for well-formed UTF-8 (no overlongs checks needed for display)
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    local len = c < 0x80 and 1 or (c >= 0xC2 and c < 0xE0) and 2 or (c >= 0xE0 and c < 0xF0) and 3
      or (c >= 0xF0 and c < 0xF5) and 4 or nil
    if not len then return false end
    for j = i + 1, i + len - 1 do
      local d = s:byte(j)
      if not d or d < 0x80 or d > 0xBF then return false end
    end
    i = i + len
  end
  return true
end

local function show_exec(r, max_output)
  local parts = {}
  local out = r.stdout .. (r.stderr ~= "" and ((r.stdout ~= "" and not r.stdout:match("\n$") and "\n" or "") .. r.stderr) or "")
  if #out > max_output then
    out = out:sub(1, max_output) .. ("\n[... %d more bytes not shown]"):format(#out - max_output)
  end
  if not is_utf8(out) then out = out:gsub("[\128-\255]", "?") end
  parts[#parts + 1] = out
  if r.truncated then parts[#parts + 1] = "[output beyond the sandbox's cap was dropped]" end
  if r.timed_out then parts[#parts + 1] = "[killed: the command ran past its timeout]"
  elseif r.out_of_memory then parts[#parts + 1] = "[killed: the sandbox's memory limit was reached]"
  else parts[#parts + 1] = ("[exit code %d]"):format(r.exit_code) end
  return table.concat(parts, out ~= "" and not out:match("\n$") and "\n" or "")
end

---Adds the CLI tools to an MCP server.
---@param srv table seer.mcp.server instance
---@param opts {sandbox_id: string, max_output?: integer}
function M.install(srv, opts)
  local max_output = opts.max_output or M.DEFAULT_MAX_OUTPUT
  S.set_waiter(srv:waiter())
  local client
  local function sandbox()
    client = client or S.connect_id(opts.sandbox_id)
    return client
  end

  -- An exec through sandboxd that the MCP client can cancel.
  local function run(ctx, content)
    local c = sandbox()
    local id
    ctx:on_cancel(function() if id then c:cancel(id) end end)
    local r, bufs = c:request("exec", content, { on_sent = function(i) id = i end })
    r.stdout, r.stderr = bufs and bufs[1] or "", bufs and bufs[2] or ""
    return r
  end

  local timeout_prop = { type = "number", description = ("Seconds before the command is killed (default %d)."):format(M.DEFAULT_TIMEOUT) }
  local ro = { readOnlyHint = false, destructiveHint = true, openWorldHint = false }

  srv:add_tool{
    name = "run_command", title = "Run a shell command",
    description = "Run a shell command (/bin/sh -c) in the sandbox and return its output (stdout, then stderr) and exit code. Working directory: /workspace unless cwd is given.",
    inputSchema = { type = "object", additionalProperties = false, required = { "command" },
                    properties = { command = { type = "string", description = "The command line." },
                                   timeout = timeout_prop,
                                   cwd = { type = "string", description = "Working directory (relative to /workspace)." } } },
    annotations = ro,
    run = function(ctx, a)
      local r = run(ctx, { argv = a.command, timeout = a.timeout or M.DEFAULT_TIMEOUT, cwd = a.cwd, max_output = max_output + 1 })
      return show_exec(r, max_output)
    end,
  }
  srv:add_tool{
    name = "run_lua", title = "Run Lua",
    description = "Run Lua code in a fresh seer process in the sandbox (seer's modules are available: require \"seer.model\", \"seer.tensor\", ...) and return what it prints.",
    inputSchema = { type = "object", additionalProperties = false, required = { "code" },
                    properties = { code = { type = "string", description = "Lua source." }, timeout = timeout_prop } },
    annotations = ro,
    run = function(ctx, a)
      local r = run(ctx, { argv = { "/opt/seer/bin/seer", "-" }, stdin = a.code, timeout = a.timeout or M.DEFAULT_TIMEOUT,
                           max_output = max_output + 1 })
      return show_exec(r, max_output)
    end,
  }
  srv:add_tool{
    name = "read_file", title = "Read a file",
    description = "Read a text file from the sandbox (relative paths are under /workspace).",
    inputSchema = { type = "object", additionalProperties = false, required = { "path" },
                    properties = { path = { type = "string" } } },
    annotations = { readOnlyHint = true, openWorldHint = false },
    run = function(_, a)
      -- Only what is shown crosses over: sandboxd sends at most max_output bytes (plus 3, to
      -- finish a character cut at the end) and the file's size, never the whole file; a fifo or
      -- device there is refused by sandboxd with an error naming it.
      local want = max_output + 3
      local r, bufs = sandbox():request("read_file", { path = a.path, max_bytes = want, truncate = true })
      local data = bufs and bufs[1] or ""
      if #data > want then data = data:sub(1, want) end
      local size = math.max(tonumber(r.size) or #data, #data)
      local shown = data
      if #data > max_output then
        shown = data:sub(1, max_output)
        -- a character cut at the end stays whole (its bytes were asked for)
        local i = #shown
        while i > 0 and i > #shown - 3 and shown:byte(i) >= 0x80 and shown:byte(i) < 0xC0 do i = i - 1 end
        if i > 0 and shown:byte(i) >= 0xC0 then
          local c = shown:byte(i)
          local len = c >= 0xF0 and 4 or c >= 0xE0 and 3 or 2
          shown = data:sub(1, i + len - 1)
        end
      end
      if not is_utf8(shown) or shown:find("%z") then
        error(("%s is a binary file (%d bytes); inspect it with run_command (e.g. xxd or base64)"):format(a.path, size), 0)
      end
      if size > #shown then
        return shown .. ("\n[... %d more bytes; read the rest with run_command, e.g. tail -c]"):format(size - #shown)
      end
      return shown
    end,
  }
  srv:add_tool{
    name = "write_file", title = "Write a file",
    description = "Write a text file in the sandbox (parents are created; relative paths are under /workspace). Only /workspace and /tmp are writable.",
    inputSchema = { type = "object", additionalProperties = false, required = { "path", "content" },
                    properties = { path = { type = "string" }, content = { type = "string" } } },
    annotations = ro,
    run = function(_, a)
      local r = sandbox():request("write_file", { path = a.path }, { buffers = { a.content } })
      return ("wrote %d bytes to %s"):format(r.bytes, r.path)
    end,
  }
  srv:add_tool{
    name = "list_files", title = "List a directory",
    description = "List a directory in the sandbox (default /workspace): type, size in bytes and name per line.",
    inputSchema = { type = "object", additionalProperties = false,
                    properties = { path = { type = "string", description = "Directory (default /workspace)." } } },
    annotations = { readOnlyHint = true, openWorldHint = false },
    run = function(_, a)
      local r = sandbox():request("list", { path = a.path, max_entries = M.MAX_LIST })
      local lines = { tostring(r.path) .. ":" }
      for i, e in ipairs(type(r.entries) == "table" and r.entries or {}) do
        if i > M.MAX_LIST then break end
        lines[#lines + 1] = ("%-4s %10s  %s%s"):format(e.type, e.type == "dir" and "-" or tostring(math.floor(e.size or 0)),
          e.name, e.type == "dir" and "/" or "")
      end
      if #lines == 1 then lines[#lines + 1] = "(empty)" end
      if r.truncated then
        lines[#lines + 1] = ("[... %s entries in all; only the first %d by name are shown: use run_command (e.g. ls | head)]")
          :format(tostring(r.total), M.MAX_LIST)
      end
      return table.concat(lines, "\n")
    end,
  }
end

return M
