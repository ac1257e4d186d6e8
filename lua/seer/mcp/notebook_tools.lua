--- seer.mcp.notebook_tools: the notebook tools of `seer mcp notebook`, with the reference's names
--- and parameters (start_new_session, attach_to_session, start_session_resume_notebook,
--- start_session_continue_notebook, execute_code, edit_cell, add_markdown, shutdown_session)
--- plus read_notebook and interrupt. Sessions are seer.execution notebook sessions: started here
--- (a notebook server child of this process) or attached to another process's server (an
--- experiment's session, from its jupyter_url).
---
--- What a cell's outputs become (docs/mcp.md): streams and the text/plain of results and
--- displays -> text; an error -> its name, message and traceback (ANSI codes stripped) as a
--- normal result (isError false); image/png -> MCP image content, downscaled to at most 512 px.
---@class seermcp.notebook_tools
local M = {}

local ffi = require "ffi"
local json = require "seer.json"
local execution = require "seer.execution"
local notebook = require "seer.notebook"

M.IMAGE_MAX_SIDE = 512
M.MAX_IMAGES = 16 -- per tool result; more are mentioned in text

---------------------------------------------------------------------------------------------
-- base64 (notebook outputs carry PNGs as base64, and so does MCP image content)

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local enc_tab = ffi.new("uint8_t[64]", B64)
local dec_tab = ffi.new("int16_t[256]")
for i = 0, 255 do dec_tab[i] = -1 end
for i = 1, 64 do dec_tab[B64:byte(i)] = i - 1 end

local function b64encode(s)
  local n = #s
  local src = ffi.cast("const uint8_t *", s)
  local out = ffi.new("uint8_t[?]", math.floor((n + 2) / 3) * 4 + 1)
  local o = 0
  for i = 0, n - 1, 3 do
    local a, b, c = src[i], i + 1 < n and src[i + 1] or 0, i + 2 < n and src[i + 2] or 0
    local v = a * 65536 + b * 256 + c
    out[o] = enc_tab[bit.rshift(v, 18)]
    out[o + 1] = enc_tab[bit.band(bit.rshift(v, 12), 63)]
    out[o + 2] = i + 1 < n and enc_tab[bit.band(bit.rshift(v, 6), 63)] or 61
    out[o + 3] = i + 2 < n and enc_tab[bit.band(v, 63)] or 61
    o = o + 4
  end
  return ffi.string(out, o)
end
M.b64encode = b64encode

-- Decodes base64, ignoring white space (nbformat may wrap it); nil and why on bad input.
local function b64decode(s)
  local n = #s
  local src = ffi.cast("const uint8_t *", s)
  local out = ffi.new("uint8_t[?]", math.floor(n * 3 / 4) + 3)
  local o, acc, bits, pad = 0, 0, 0, 0
  for i = 0, n - 1 do
    local ch = src[i]
    if ch == 61 then
      pad = pad + 1
    elseif ch ~= 10 and ch ~= 13 and ch ~= 32 and ch ~= 9 then
      local d = dec_tab[ch]
      if d < 0 or pad > 0 then return nil, ("not base64 (byte %d)"):format(i) end
      acc = bit.bor(bit.lshift(bit.band(acc, 0xFFFF), 6), d)
      bits = bits + 6
      if bits >= 8 then
        bits = bits - 8
        out[o] = bit.band(bit.rshift(acc, bits), 255)
        o = o + 1
      end
    end
  end
  return ffi.string(out, o)
end
M.b64decode = b64decode

---------------------------------------------------------------------------------------------
-- outputs -> MCP content

local function strip_ansi(s)
  s = s:gsub("\27%[[%d;?]*[%a@]", ""):gsub("\27%][^\7\27]*\7", ""):gsub("\27%][^\27]*\27\\", ""):gsub("\27[()][%w]", "")
  return s
end
M.strip_ansi = strip_ansi

local function join(v)
  if v == nil or v == json.null then return "" end
  return notebook.join(v)
end

---An image block for PNG bytes (base64 text in nbformat), downscaled to max_side; or nil and why.
local function image_block(b64, max_side)
  local bytes, why = b64decode(join(b64))
  if not bytes then return nil, why end
  local png = require "seer.core.png"
  local ok, out, w, h = pcall(png.fit, bytes, max_side)
  if not ok then return nil, tostring(out):gsub("^png%.fit: ", "") end
  return { type = "image", data = out == bytes and join(b64):gsub("%s", "") or b64encode(out), mimeType = "image/png" }, w, h
end
M.image_block = image_block

---MCP content blocks for nbformat outputs, in order: adjacent text joined into one block.
---@param outputs table[]
---@param opts? {max_side?: integer, max_images?: integer, images?: boolean} images = false: a placeholder line instead
---@return table content
function M.outputs_to_content(outputs, opts)
  opts = opts or {}
  local content, text, images = json.array(), {}, 0
  local function flush()
    if #text > 0 then
      content[#content + 1] = { type = "text", text = table.concat(text) }
      text = {}
    end
  end
  local function add_text(s)
    if s ~= "" then text[#text + 1] = s end
  end
  for _, o in ipairs(outputs or {}) do
    local t = o.output_type
    if t == "stream" then
      add_text(strip_ansi(join(o.text)))
    elseif t == "error" then
      local tb = {}
      for _, l in ipairs(type(o.traceback) == "table" and o.traceback or {}) do tb[#tb + 1] = strip_ansi(join(l)) end
      local head = ("%s: %s"):format(join(o.ename), strip_ansi(join(o.evalue)))
      -- Lua tracebacks start with "ename: evalue" already; others get it in front.
      if #tb == 0 or not tb[1]:find(join(o.ename), 1, true) then table.insert(tb, 1, head) end
      local s = table.concat(tb, "\n")
      if #text > 0 and not text[#text]:match("\n$") then s = "\n" .. s end
      add_text(s .. "\n")
    elseif type(o.data) == "table" then
      local d = o.data
      if d["image/png"] and opts.images == false then
        add_text("[image" .. (d["text/plain"] and (": " .. join(d["text/plain"])) or "") .. "]\n")
      elseif d["image/png"] then
        images = images + 1
        if images > (opts.max_images or M.MAX_IMAGES) then
          add_text("[image not shown: more than " .. (opts.max_images or M.MAX_IMAGES) .. " images in one result]\n")
        else
          local block, w_or_why = image_block(d["image/png"], opts.max_side or M.IMAGE_MAX_SIDE)
          if block then
            flush()
            content[#content + 1] = block
          else
            add_text("[an image/png output that cannot be shown: " .. tostring(w_or_why) .. "]\n")
          end
        end
      elseif d["text/plain"] then
        add_text(strip_ansi(join(d["text/plain"])) .. "\n")
      elseif d["text/markdown"] then
        add_text(join(d["text/markdown"]) .. "\n")
      elseif d["application/json"] then
        local ok, s = pcall(json.encode, d["application/json"])
        add_text((ok and s or "[application/json output]") .. "\n")
      else
        local kinds = {}
        for k in pairs(d) do kinds[#kinds + 1] = k end
        table.sort(kinds)
        add_text("[output of type " .. table.concat(kinds, ", ") .. "]\n")
      end
    end
  end
  flush()
  if #content == 0 then content[1] = { type = "text", text = "(no output)" } end
  return content
end

---------------------------------------------------------------------------------------------
-- the tools

-- What the tools reach (docs/mcp.md, "Sandbox-bound servers"):
--   "sandbox"  bound to one sandbox's scope on a notebook server (a sandboxed session's
--              mcp_config: SEER_NOTEBOOK_ENDPOINT + SEER_NOTEBOOK_SCOPE_KEY, or a preset
--              session that turned out to be sandboxed): new sessions start in that sandbox,
--              notebooks are named inside its output directory, attach reaches its sessions.
--   "host"     no sandbox: new sessions are kernels on this machine (an explicit opt-in: a
--              local session's mcp_config, or seer mcp notebook started by hand).
--   "pending"  a preset session given by jupyter_url that could not be reached yet: nothing
--              starts until it is known whether it is sandboxed.
M.NOT_SANDBOXED = "NOT sandboxed: the kernel runs on this machine as your user, with your files and network."

---Adds the notebook tools to an MCP server.
---@param srv table a seer.mcp.server
---@param opts {output_dir?: string, max_output?: integer, session_id?: string, jupyter_url?: string, notebook_dir?: string, scope?: {endpoint: string, key: string}}
---@return table state {sessions = {[id] = session}, mode = "sandbox"|"host"|"pending", sandbox_id?: string}
function M.install(srv, opts)
  opts = opts or {}
  local sessions, owned, order = {}, {}, {}
  local state = { sessions = sessions }
  local preset_error
  local binding -- seer.execution SandboxBinding in "sandbox" mode

  execution.set_waiter(srv:waiter())

  local function remember(s, is_owned)
    if not sessions[s.session_id] then order[#order + 1] = s.session_id end
    sessions[s.session_id] = s
    owned[s.session_id] = is_owned or nil
  end

  -- Binds to a sandbox's scope; from then on no tool reaches anything outside it.
  local function bind(endpoint, key, sandbox_id)
    binding = execution.bind_sandbox(endpoint, key)
    state.mode, state.sandbox_id = "sandbox", sandbox_id
  end

  -- The preset session given by jupyter_url (main key). A sandboxed one binds this server to
  -- its sandbox, and the main connection is not used for anything else.
  local function attach_preset_url()
    local s = execution.attach_notebook_session(opts.jupyter_url, opts.session_id)
    if s.sandbox_id then
      local cred = execution.scope_credential(s)
      bind(cred.endpoint, cred.key, cred.sandbox_id)
      s = binding:attach(opts.session_id)
    else
      state.mode = "host"
    end
    remember(s, false)
    return s
  end

  local function attach_preset()
    if binding then
      local s = binding:attach(opts.session_id)
      state.sandbox_id = s.sandbox_id or state.sandbox_id
      remember(s, false)
      return s
    end
    return attach_preset_url()
  end

  -- The mode is settled before the tools are described: the preset session is attached now
  -- (a failure is logged and retried on use).
  if opts.scope then
    bind(opts.scope.endpoint, opts.scope.key, nil)
  elseif opts.session_id and opts.jupyter_url then
    state.mode = "pending"
  else
    state.mode = "host"
  end
  if opts.session_id and (binding or opts.jupyter_url) then
    local ok, err = pcall(attach_preset)
    if not ok then
      preset_error = tostring(err)
      srv:log("cannot attach to session %s: %s", opts.session_id, preset_error)
    end
  end

  if state.mode == "sandbox" then
    srv.instructions = M.INSTRUCTIONS .. "\nThis server is bound to one sandbox: new sessions start inside it with its models"
      .. " preloaded, notebooks are named by file name in its output directory, and only its sessions can be attached."
  else
    srv.instructions = M.INSTRUCTIONS .. "\nSessions that start_* tools start here are " .. M.NOT_SANDBOXED
  end
  if opts.session_id and not preset_error then
    -- The agent is told where it is: the session it was given, already started.
    srv.instructions = srv.instructions .. ("\nYour session is already started: session_id %q. Use it with execute_code, "
      .. "add_markdown and the other tools; do not start a new session unless the task asks for one."):format(opts.session_id)
  end

  -- Tools that start kernels on this machine run only in "host" mode; "pending" first tries
  -- to learn what the preset session is.
  local function host_allowed()
    if state.mode == "pending" then
      local ok, r = pcall(attach_preset)
      if not ok then preset_error = tostring(r) end
    end
    if state.mode == "host" then return true end
    if state.mode == "pending" then
      error(("this server was given session %s, which cannot be reached (%s); it starts no kernel until it knows whether that session is sandboxed")
        :format(tostring(opts.session_id), tostring(preset_error)), 0)
    end
    return false
  end

  local function session(id)
    local s = sessions[id]
    if s then return s end
    -- The preset session (mcp_config) is attached again if attaching at start failed.
    if id == opts.session_id and (binding or opts.jupyter_url) then
      local ok, r = pcall(attach_preset)
      if ok then return r end
      preset_error = tostring(r)
    end
    local ids = {}
    for _, k in ipairs(order) do if sessions[k] then ids[#ids + 1] = k end end
    error(("unknown session_id %q%s; sessions: %s. Start one with start_new_session (or attach_to_session)")
      :format(tostring(id), (id == opts.session_id and preset_error) and (" (attaching to it failed: " .. preset_error .. ")") or "",
              #ids > 0 and table.concat(ids, ", ") or "none"), 0)
  end

  local function started(s, status, extra)
    local r = { session_id = s.session_id, notebook_path = s.notebook_path, status = status }
    for k, v in pairs(extra or {}) do r[k] = v end
    local lines = { ("Session %s %s. Notebook: %s"):format(s.session_id, status, tostring(s.notebook_path)) }
    if extra and extra.cells_run then
      lines[#lines + 1] = ("Re-ran %d code cells (%d failed); read_notebook shows them."):format(extra.cells_run, extra.cells_failed or 0)
    end
    lines[#lines + 1] = "Run code with execute_code(session_id, code)."
    return { content = { { type = "text", text = table.concat(lines, "\n") } }, structuredContent = r }
  end

  local function exec_opts(ctx)
    local o = { max_output = opts.max_output, raise = false }
    if ctx.progress_token then
      local n = 0
      o.on_output = function(out)
        n = n + 1
        local kind = out.output_type == "stream" and (out.name or "stream") or out.output_type
        ctx:progress(("output %d (%s)"):format(n, tostring(kind)))
      end
    end
    return o
  end

  local function cell_result(s, r)
    local content = M.outputs_to_content(r.outputs)
    local sc = { session_id = s.session_id, execution_count = r.execution_count or json.null,
                 cell_index = r.cell_index or json.null, status = r.result == "ok" and "ok" or "error",
                 truncated = r.truncated and true or false }
    if r.error then
      local ev = r.error.evalue
      if r.error.ename == "KernelDied" then
        -- the Lua API's advice (session:restart()) is not the agent's: the server's words, as the outputs have them
        for _, o in ipairs(r.outputs or {}) do
          if o.output_type == "error" and o.ename == "KernelDied" and type(o.evalue) == "string" then ev = o.evalue end
        end
      end
      sc.error = { ename = r.error.ename, evalue = ev }
    end
    -- what the notebook server did not keep past the cell's output limits (the record is also
    -- the last line of the text), and a save that failed
    if r.dropped then sc.dropped = r.dropped end
    if r.save_error then sc.save_error = r.save_error end
    return { content = content, structuredContent = sc }
  end

  -- Runs a cell for a tool call. A session runs its cells in order, so the first of its calls
  -- in flight is the one running: cancelling it interrupts the kernel; cancelling a call whose
  -- cell still waits only drops its answer (the notebook server has no way to unqueue a cell).
  local in_flight = {} -- session_id -> list of ctx, oldest first
  local function running(s, ctx, run)
    local q = in_flight[s.session_id] or {}
    in_flight[s.session_id] = q
    q[#q + 1] = ctx
    ctx:on_cancel(function()
      if q[1] == ctx then s:interrupt() end
    end)
    local ok, r = pcall(run, exec_opts(ctx))
    for i, c in ipairs(q) do if c == ctx then table.remove(q, i) break end end
    if not ok then error(r, 0) end
    return cell_result(s, r)
  end

  -- A notebook of the bound sandbox's output directory, by file name (the notebook server
  -- checks it again and opens it without following links).
  local function name_arg(p)
    local name, why = require("seer.cli.notebook").notebook_name(p)
    if not name then
      error(("notebook_path: %s (this server is bound to sandbox %s: notebooks are named by file name in its session's output directory, as start_* results give them)")
        :format(why, tostring(state.sandbox_id or "of this session")), 0)
    end
    return name
  end

  local function path_arg(p)
    local core = require "seer.core.host"
    local real = core.realpath(p)
    if not real then error(("notebook_path %q does not exist (paths are relative to %s)"):format(p, core.cwd()), 0) end
    if not real:match("%.ipynb$") then error(("notebook_path %q is not an .ipynb notebook"):format(p), 0) end
    return real
  end

  local session_id = { type = "string", description = "The session_id a start_* or attach_to_session call returned." }
  local ro = { readOnlyHint = true, destructiveHint = false, idempotentHint = true, openWorldHint = false }
  local rw = { readOnlyHint = false, destructiveHint = false, idempotentHint = false, openWorldHint = false }

  local tools = {
    {
      name = "start_new_session", title = "Start a new notebook session",
      description = state.mode == "sandbox"
        and "Start a new Lua kernel inside this session's sandbox, like the session you were given: same sandbox, same workspace, the same models preloaded, with an empty notebook in the same output directory. Returns session_id and the notebook's name."
        or ("Start a new Lua kernel with an empty notebook (saved as {date}_{experiment_name}.ipynb in the output directory). Returns session_id and notebook_path. " .. M.NOT_SANDBOXED),
      inputSchema = { type = "object", additionalProperties = false,
                      properties = { experiment_name = { type = "string", description = "Name for the notebook (default \"Notebook\")." } } },
      annotations = rw,
      run = function(ctx, a)
        local s
        if host_allowed() then
          s = execution.create_local_notebook_session(nil, { name = a.experiment_name, output_dir = opts.output_dir })
        else
          s = binding:start_session{ like = state.like or opts.session_id, name = a.experiment_name }
        end
        remember(s, true)
        return started(s, "started")
      end,
    },
    {
      name = "attach_to_session", title = "Attach to a running notebook session",
      description = state.mode == "sandbox"
        and "Attach to another running session of this sandbox by its session_id (sessions of other sandboxes and of the host are not reachable from here; jupyter_url is not needed)."
        or "Attach to a session that another process started (an experiment's notebook session), from its session_id and jupyter_url.",
      inputSchema = { type = "object", additionalProperties = false,
                      required = state.mode == "sandbox" and { "session_id" } or { "session_id", "jupyter_url" },
                      properties = { session_id = { type = "string", description = "The session's id." },
                                     jupyter_url = { type = "string", description = state.mode == "sandbox"
                                                     and "Not used: this server reaches only its sandbox's sessions."
                                                     or "The session's jupyter_url (http://HOST:PORT/notebooks/ID?token=T)." },
                                     notebook_dir = { type = "string", description = "Accepted for compatibility; the notebook server reports the notebook's path." } } },
      annotations = rw,
      run = function(ctx, a)
        local s
        if binding or not host_allowed() then
          s = binding:attach(a.session_id)
        else
          if type(a.jupyter_url) ~= "string" then error("attach_to_session needs the session's jupyter_url", 0) end
          s = execution.attach_notebook_session(a.jupyter_url, a.session_id)
          if s.sandbox_id then
            -- A sandboxed session binds this server to its sandbox, as --jupyter-url does at
            -- start: from here on start_* tools start kernels in that sandbox, never on this
            -- machine (an agent given a plain `seer mcp notebook` to attach to a sandboxed
            -- session would otherwise get an unsandboxed kernel, without its models, from
            -- start_new_session). A server that already reaches kernels outside that sandbox
            -- cannot be bound: it would reach both.
            local outside = {}
            for _, id in ipairs(order) do
              local o = sessions[id]
              if o and o.sandbox_id ~= s.sandbox_id then outside[#outside + 1] = id end
            end
            if #outside > 0 then
              error(("session %s is sandboxed (sandbox %s), and this server already has sessions outside that sandbox (%s); a server reaches one sandbox or this machine, not both: "
                .. "start another `seer mcp notebook` for it (the session's mcp_config, or --session-id and --jupyter-url)")
                :format(a.session_id, s.sandbox_id, table.concat(outside, ", ")), 0)
            end
            local cred = execution.scope_credential(s)
            bind(cred.endpoint, cred.key, cred.sandbox_id)
            s = binding:attach(a.session_id)
            state.like = a.session_id
            remember(s, false)
            local r = started(s, "attached")
            r.content[1].text = r.content[1].text .. ("\nThis server is now bound to sandbox %s: start_new_session and the other start_* tools start kernels inside it, like this session (its models preloaded), and only its sessions can be attached.")
              :format(s.sandbox_id or cred.sandbox_id)
            r.structuredContent.bound_sandbox = cred.sandbox_id
            return r
          end
        end
        remember(s, false)
        return started(s, "attached")
      end,
    },
    {
      name = "start_session_resume_notebook", title = "Start Session - Resume Notebook",
      description = state.mode == "sandbox"
        and "Start a new session in this sandbox by resuming a notebook of its output directory in place (name it by file name, e.g. 2025-01-31-10-00_probe.ipynb): the models are preloaded, every code cell is re-run and the file is updated with the new outputs."
        or ("Start a new session by resuming an existing notebook in place: every code cell is re-run to restore the kernel state and the file is updated with the new outputs. " .. M.NOT_SANDBOXED),
      inputSchema = { type = "object", additionalProperties = false, required = { "notebook_path" },
                      properties = { notebook_path = { type = "string", description = state.mode == "sandbox"
                                                       and "The notebook's file name in the session's output directory."
                                                       or "Path to the existing .ipynb notebook." } } },
      annotations = rw,
      run = function(ctx, a)
        local s, info
        if host_allowed() then
          s, info = execution.resume_notebook(path_arg(a.notebook_path))
        else
          s, info = binding:start_session{ like = state.like or opts.session_id, resume = name_arg(a.notebook_path) }
        end
        remember(s, true)
        return started(s, "resumed", { cells_run = info.cells_run or 0, cells_failed = info.cells_failed or 0 })
      end,
    },
    {
      name = "start_session_continue_notebook", title = "Start Session - Continue Notebook",
      description = state.mode == "sandbox"
        and "Start a new session in this sandbox that continues a notebook of its output directory (name it by file name): its cells are copied into a new notebook there and re-run with the models preloaded; the original is unchanged."
        or ("Start a session that continues an existing notebook: its cells are copied into a new notebook (beside the original) and re-run; the original is unchanged. " .. M.NOT_SANDBOXED),
      inputSchema = { type = "object", additionalProperties = false, required = { "notebook_path" },
                      properties = { notebook_path = { type = "string", description = state.mode == "sandbox"
                                                       and "The notebook's file name in the session's output directory."
                                                       or "Path to the existing .ipynb notebook." },
                                     experiment_name = { type = "string", description = "Name for the new notebook (default: the original's)." } } },
      annotations = rw,
      run = function(ctx, a)
        local s, info
        if host_allowed() then
          s, info = execution.continue_notebook(path_arg(a.notebook_path), { name = a.experiment_name })
        else
          s, info = binding:start_session{ like = state.like or opts.session_id, ["continue"] = name_arg(a.notebook_path), name = a.experiment_name }
        end
        remember(s, true)
        return started(s, "continued", { cells_run = info.cells_run or 0, cells_failed = info.cells_failed or 0 })
      end,
    },
    {
      name = "execute_code", title = "Execute code",
      description = "Append a code cell (Lua, seer's kernel) to the notebook, run it and return its outputs: printed text, results, errors with their traceback, and images. Cancelling the call interrupts the cell.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id", "code" },
                      properties = { session_id = session_id, code = { type = "string", description = "Lua code to run." } } },
      annotations = rw,
      run = function(ctx, a)
        local s = session(a.session_id)
        return running(s, ctx, function(o) return s:exec(a.code, o) end)
      end,
    },
    {
      name = "edit_cell", title = "Edit and re-run a cell",
      description = "Replace the source of a code cell, clear its outputs and run it again. cell_index counts code cells only: 0 is the first, -1 (default) the last, -2 the one before.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id", "code" },
                      properties = { session_id = session_id, code = { type = "string", description = "The cell's new code." },
                                     cell_index = { type = "integer", description = "Which code cell (default -1, the last)." } } },
      annotations = rw,
      run = function(ctx, a)
        local s = session(a.session_id)
        return running(s, ctx, function(o) return s:edit_cell(a.code, a.cell_index or -1, o) end)
      end,
    },
    {
      name = "add_markdown", title = "Add a markdown cell",
      description = "Append a markdown cell to the notebook (notes, findings). Returns its cell_number.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id", "content" },
                      properties = { session_id = session_id, content = { type = "string", description = "Markdown text." } } },
      annotations = rw,
      run = function(ctx, a)
        local n = session(a.session_id):add_markdown(a.content)
        return { content = { { type = "text", text = json.encode{ cell_number = n } } }, structuredContent = { cell_number = n } }
      end,
    },
    {
      name = "read_notebook", title = "Read the notebook",
      description = "The notebook's cells as text (source and outputs; images are mentioned, not sent): `limit` cells from the 0-based `start`.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id" },
                      properties = { session_id = session_id,
                                     start = { type = "integer", minimum = 0, description = "First cell (0-based, default 0)." },
                                     limit = { type = "integer", minimum = 1, description = "How many cells (default all)." } } },
      annotations = ro,
      run = function(ctx, a)
        local s = session(a.session_id)
        local r = s:read_notebook(a.start, a.limit)
        local start = a.start or 0
        local parts
        if #r.cells > 0 then
          parts = { ("Notebook %s: cells %d-%d of %d"):format(tostring(r.notebook_path), start, start + #r.cells - 1, r.total) }
        elseif r.total == 0 then
          parts = { ("Notebook %s: no cells yet (it is empty)."):format(tostring(r.notebook_path)) }
        else
          -- a start past the end: say so, and where the cells are
          parts = { ("Notebook %s: no cells from %d on: the notebook has %d cell%s (0 to %d); give a start from 0 to %d.")
            :format(tostring(r.notebook_path), start, r.total, r.total == 1 and "" or "s", r.total - 1, r.total - 1) }
        end
        for i, c in ipairs(r.cells) do
          local head
          if c.cell_type == "code" then
            local md = type(c.metadata) == "table" and c.metadata or {}
            head = ("## cell %d (code, [%s], %s)"):format(start + i - 1,
              (c.execution_count ~= nil and c.execution_count ~= json.null) and tostring(c.execution_count) or " ",
              tostring(md.execution_status or "pending"))
          else
            head = ("## cell %d (%s)"):format(start + i - 1, tostring(c.cell_type))
          end
          parts[#parts + 1] = head
          parts[#parts + 1] = join(c.source)
          if c.cell_type == "code" and type(c.outputs) == "table" and #c.outputs > 0 then
            parts[#parts + 1] = "-- outputs:"
            for _, b in ipairs(M.outputs_to_content(c.outputs, { images = false })) do parts[#parts + 1] = b.text end
          end
        end
        local text = table.concat(parts, "\n")
        local max = opts.max_output or 20000
        if #text > max * 2 then
          local keep = max * 2
          while keep > 0 and text:byte(keep + 1) and text:byte(keep + 1) >= 0x80 and text:byte(keep + 1) < 0xC0 do keep = keep - 1 end
          text = text:sub(1, keep) .. ("\n[output truncated: %d more characters not shown; read fewer cells with start and limit]"):format(#text - keep)
        end
        return { content = { { type = "text", text = text } },
                 structuredContent = { notebook_path = r.notebook_path, total = r.total, start = start, count = #r.cells } }
      end,
    },
    {
      name = "interrupt", title = "Interrupt the running cell",
      description = "Interrupt the cell that is running in a session (if any); the session stays usable.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id" },
                      properties = { session_id = session_id } },
      annotations = { readOnlyHint = false, destructiveHint = false, idempotentHint = true, openWorldHint = false },
      run = function(ctx, a)
        session(a.session_id):interrupt()
        return "Interrupt sent to session " .. a.session_id .. "."
      end,
    },
    {
      name = "shutdown_session", title = "Shut down a session",
      description = "Shut down a session's kernel (its state is lost; the notebook file stays). Only do this when told to.",
      inputSchema = { type = "object", additionalProperties = false, required = { "session_id" },
                      properties = { session_id = session_id } },
      annotations = { readOnlyHint = false, destructiveHint = true, idempotentHint = true, openWorldHint = false },
      run = function(ctx, a)
        local s = session(a.session_id)
        s:terminate()
        sessions[a.session_id], owned[a.session_id] = nil, nil
        return ("Session %s shut down; the notebook stays at %s"):format(a.session_id, tostring(s.notebook_path))
      end,
    },
  }
  for _, t in ipairs(tools) do srv:add_tool(t) end

  -- Sessions this process started end with it; attached ones belong to their experiment.
  srv:on_exit(function()
    for _, id in ipairs(order) do
      if sessions[id] and owned[id] then pcall(sessions[id].terminate, sessions[id]) end
    end
  end)

  return state
end

M.INSTRUCTIONS = [[
Tools for a Lua notebook (seer's kernel) whose cells run one after another in one kernel.
Start with start_new_session (or use the session_id you were given), then execute_code to run
Lua and see its printed output, results, errors and images; edit_cell fixes a cell in place;
add_markdown records findings; read_notebook shows what is there. Variables persist between
cells. Long outputs are cut (the notebook keeps everything). Cancelling execute_code, or calling
interrupt, stops a running cell.]]

return M
