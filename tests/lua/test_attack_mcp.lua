-- Attack suite, class 1 (docs/security.md): tools that lead out of the sandbox. The agent of
-- a sandboxed notebook session holds that session's mcp_config; it controls every argument of
-- every tool call and everything inside the sandbox, never the MCP server's environment. Each
-- attempt runs its in-sandbox part through the rig (tests/lua/attack.lua: planting links and
-- FIFOs, reconnaissance) and then the real vector: MCP tool calls from seer's MCP client
-- (seer.mcp.client, C) to `seer mcp notebook` started exactly as the session's mcp_config
-- says. Each asserts the attempt failed and the host canary is unchanged; the controls show
-- the same calls succeed where they should (a host session's server, the experiment's own
-- client), so a broken probe cannot pass as a defence.
local T = require "testing"
local A = require "attack"
local exec = require "seer.execution"
local mcp = require "seer.mcp.client"
local json = seer.json

local RIG = { name = "mcp" }          -- the attacker's sandbox: its session's mcp_config is the agent's
local OTHER = { name = "mcp-other" }  -- a bystander sandbox on the same notebook server

local function rig() return A.rig(RIG.name) end
local function other() return A.rig(OTHER.name) end

local clients = {}
local function client(name, config)
  if not clients[name] then clients[name] = mcp.connect(config, { timeout = 120 }) end
  return clients[name]
end

-- The agent's MCP server: the rig session's own mcp_config, as given.
local function agent() return client("agent", rig().session.mcp_config) end

-- A tool call's outcome as {isError, text, structured}; a JSON-RPC error (arguments the schema
-- refuses) counts as a failed call, with its message.
local function call(c, tool, args)
  local ok, r = pcall(c.call, c, tool, args or {})
  if not ok then return { isError = true, text = tostring(r), rpc_error = true } end
  local text = {}
  for _, b in ipairs(r.content or {}) do if b.type == "text" then text[#text + 1] = b.text end end
  return { isError = r.isError and true or false, text = table.concat(text, "\n"), structured = r.structuredContent }
end

local function refused(r, pattern, what)
  T.ok(r.isError, (what or "the call") .. " should have failed, but answered: " .. tostring(r.text))
  if pattern then T.contains(r.text, pattern, what) end
end

local function ok_call(r, what)
  T.ok(not r.isError, (what or "the call") .. " failed: " .. tostring(r.text))
  return r
end

-- The sessions on this process's notebook server whose kernel runs on the host.
local function host_sessions()
  local ids = {}
  for _, s in ipairs(exec.list_sessions()) do
    if s.sandbox_id == nil or s.sandbox_id == json.null then ids[#ids + 1] = s.session_id end
  end
  table.sort(ids)
  return table.concat(ids, ",")
end

-- A session on the host (the researcher's own, on the same notebook server as the sandboxes').
local host_session
local function host()
  if not host_session then
    host_session = exec.create_local_notebook_session(nil, { name = "host", output_dir = A.root .. "/host-notebooks" })
    host_session:exec("host_secret = 'researcher only'", { hidden = true })
  end
  return host_session
end

-- A notebook on the host, outside every sandbox's output directory, whose source is a secret.
local HOST_NB = A.root .. "/host-only.ipynb"
do
  local f = assert(io.open(HOST_NB, "wb"))
  f:write(json.encode{ nbformat = 4, nbformat_minor = 5, metadata = json.object(),
                       cells = { { cell_type = "code", id = "c1", metadata = json.object(), outputs = json.array(),
                                   execution_count = json.null, source = "print('HOST-NOTEBOOK-SECRET')" } } })
  f:close()
end

-- A second session of the attacker's sandbox whose output directory is inside /workspace, so
-- agent code can plant links and FIFOs among its notebooks; its own mcp_config's server.
local ws_session
local function ws()
  if not ws_session then
    local r = rig()
    ws_session = exec.create_notebook_session(r.sandbox, nil, { name = "ws", output_dir = r.sandbox.workspace_dir .. "/notebooks" })
    ws_session:exec("print('a cell')")
  end
  return ws_session, client("ws", ws_session.mcp_config)
end
local WS_NB = "/workspace/notebooks"

-- What agent code inside tries first: who am I, what sockets and run files are there.
local RECON = "echo sandbox=$SEER_SANDBOX_ID; id -u; ls /run/seer 2>&1 | head -5"

local function mcp_attack(a)
  A.attack{
    name = "mcp: " .. a.name, class = 1, rig = a.rig or RIG, vectors = { a.vector or "exec/sh" }, timeout = a.timeout,
    sh = a.sh or RECON, setup = a.setup, teardown = a.teardown,
    check = function(out, vector) a.check(out, vector) end,
  }
end

---------------------------------------------------------------------------------------------
-- the tools of a host session say so; a sandboxed session's do not offer the host

T.test("mcp: a host session's server says its kernels are NOT sandboxed; a sandboxed session's binds to its sandbox", function()
  local h = client("host", host().mcp_config)
  local starts = 0
  for _, t in ipairs(h:tools()) do
    if t.name:match("^start_") then
      starts = starts + 1
      T.contains(t.description, "NOT sandboxed", t.name)
    end
  end
  T.eq(starts, 3)
  local cfg = rig().session.mcp_config.notebook
  T.eq(cfg.env.SEER_NOTEBOOK_URL, nil, "no live-view URL (its token opens the main key) in a sandboxed session's config")
  local token = rig().session.jupyter_url:match("token=([%w]+)")
  T.ok(token and not json.encode(rig().session.mcp_config):find(token, 1, true), "the live view's token is not in the config")
  T.ok(cfg.env.SEER_NOTEBOOK_SCOPE_KEY and cfg.env.SEER_NOTEBOOK_ENDPOINT, "the sandbox binding")
  for _, t in ipairs(agent():tools()) do
    T.ok(not t.description:find("NOT sandboxed", 1, true), t.name .. " of a bound server mentions host kernels")
    if t.name:match("^start_") then T.contains(t.description, "sandbox", t.name) end
  end
end)

T.test("mcp: a server given a sandboxed session's jupyter_url by hand binds itself to that sandbox", function()
  local r = rig()
  local cfg = { notebook = { type = "stdio", command = r.session.mcp_config.notebook.command, args = { "mcp", "notebook" },
                             env = { SEER_SESSION_ID = r.session.session_id, SEER_NOTEBOOK_URL = r.session.jupyter_url } } }
  local c = mcp.connect(cfg, { timeout = 120 })
  for _, t in ipairs(c:tools()) do
    T.ok(not t.description:find("NOT sandboxed", 1, true), t.name .. " offers host kernels")
  end
  local before = host_sessions()
  local s = ok_call(call(c, "start_new_session", { experiment_name = "by-url" }))
  local out = ok_call(call(c, "execute_code", { session_id = s.structured.session_id, code = "print(os.getenv('SEER_SANDBOX_ID'))" })).text
  T.eq(out, r.sandbox.sandbox_id .. "\n")
  T.eq(host_sessions(), before)
  refused(call(c, "attach_to_session", { session_id = host().session_id, jupyter_url = host().jupyter_url }), "SessionNotFound")
  c:close()
end)

---------------------------------------------------------------------------------------------
-- the attempts

mcp_attack{
  name = "start_new_session from a sandboxed session for a kernel on the host",
  sh = "ls /models",
  check = function(models_inside)
    local before = host_sessions()
    local r = ok_call(call(agent(), "start_new_session", { experiment_name = "escape" }), "start_new_session")
    local id = r.structured.session_id
    T.ok(not tostring(r.structured.notebook_path):find("/", 1, true), "notebooks are named, not host paths: " .. tostring(r.structured.notebook_path))
    local probe = ([[
local f = io.open(%q, "rb"); print("read", f and f:read("*a") or "no")
print("write", (io.open(%q, "wb")) and "yes" or "no")
print("sandbox", os.getenv("SEER_SANDBOX_ID"))
print("uid", io.popen("id -u"):read("*l"))
print("models", (io.popen("ls /models"):read("*a"):gsub("\n", " ")))
print("model", model ~= nil and tokenizer ~= nil and #model:generate("Once", { max_new_tokens = 2 }).text > 0)]])
      :format(A.canary_dir .. "/secret.txt", A.canary_dir .. "/planted.txt")
    local out = ok_call(call(agent(), "execute_code", { session_id = id, code = probe }), "execute_code").text
    T.contains(out, "read\tno\n", "the new kernel cannot read the host canary")
    T.contains(out, "write\tno\n", "the new kernel cannot write the host canary folder")
    T.contains(out, "sandbox\t" .. rig().sandbox.sandbox_id .. "\n", "the same sandbox")
    T.contains(out, "uid\t65534\n", "the sandbox's user")
    T.contains(out, "models\t" .. models_inside:gsub("\n", " ") .. "\n", "the same /models")
    T.contains(out, "model\ttrue\n", "the model and tokenizer are preloaded as in the first session")
    T.eq(host_sessions(), before, "no kernel started on the host")
    ok_call(call(agent(), "shutdown_session", { session_id = id }))
    -- control: the same probe through a host session's server does reach the host
    local h = client("host", host().mcp_config)
    local hr = ok_call(call(h, "start_new_session", { experiment_name = "control" }), "host start_new_session")
    local hout = ok_call(call(h, "execute_code", { session_id = hr.structured.session_id,
      code = ("local f = io.open(%q, 'rb'); print(f and 'read' or 'no')"):format(A.canary_dir .. "/secret.txt") })).text
    T.eq(hout, "read\n", "control: a host kernel reads the canary, so the probe works")
    ok_call(call(h, "shutdown_session", { session_id = hr.structured.session_id }))
  end,
}

mcp_attack{
  name = "resume or continue a host notebook by a ../ path",
  check = function()
    local rel = "../host-only.ipynb"
    for _, name in ipairs{ rel, "../../host-only.ipynb", "..", "../" .. (HOST_NB:match("[^/]+$")), "..%2fhost-only.ipynb" } do
      for _, tool in ipairs{ "start_session_resume_notebook", "start_session_continue_notebook" } do
        local r = call(agent(), tool, { notebook_path = name })
        refused(r, nil, tool .. " " .. name)
        T.ok(not r.text:find("HOST-NOTEBOOK-SECRET", 1, true), "the host notebook's source leaked")
      end
    end
    -- control: the file is there, and a host session's server resumes it
    local h = client("host", host().mcp_config)
    local hr = ok_call(call(h, "start_session_resume_notebook", { notebook_path = HOST_NB }), "control: host resume")
    T.eq(hr.structured.cells_run, 1)
    ok_call(call(h, "shutdown_session", { session_id = hr.structured.session_id }))
  end,
}

mcp_attack{
  name = "resume or continue a host notebook by its absolute path",
  check = function()
    for _, tool in ipairs{ "start_session_resume_notebook", "start_session_continue_notebook" } do
      for _, p in ipairs{ HOST_NB, A.canary_dir .. "/secret.txt", "/proc/self/root" .. HOST_NB } do
        local r = call(agent(), tool, { notebook_path = p })
        refused(r, "is a path", tool .. " " .. p)
        T.ok(not r.text:find("HOST-NOTEBOOK-SECRET", 1, true) and not r.text:find("host secret", 1, true), "a host file leaked")
      end
    end
  end,
}

mcp_attack{
  name = "continue or resume, by its file name, a host session's notebook in the sandbox's own output folder",
  check = function()
    -- the researcher's host session writes into the same output folder as the sandbox's
    -- session (the default ./outputs is shared by every session of a run, and of earlier runs)
    local r = rig()
    local hs = exec.create_local_notebook_session(nil, { name = "host-analysis", output_dir = r.session.output_dir })
    hs:exec("api_key = 'sk-HOST-ONLY-SECRET-123'")
    local name = hs.notebook_path:match("[^/]+$")
    hs:terminate()
    for _, tool in ipairs{ "start_session_resume_notebook", "start_session_continue_notebook" } do
      local rr = call(agent(), tool, { notebook_path = name })
      refused(rr, "was not written by a session of this sandbox", tool .. " " .. name)
      T.ok(not rr.text:find("sk-HOST-ONLY-SECRET", 1, true), "the host cell reached the agent: " .. rr.text)
      T.ok(not rr.text:find(r.session.output_dir, 1, true), "a host path reached the agent: " .. rr.text)
    end
    -- a name that is not there lists only this sandbox's notebooks, not the host's
    local nf = call(agent(), "start_session_continue_notebook", { notebook_path = "no-such.ipynb" })
    refused(nf, "NotebookNotFound", "continue a missing notebook")
    T.ok(not nf.text:find("host-analysis", 1, true), "the host notebook's name was listed: " .. nf.text)
    T.contains(nf.text, r.session.notebook_path:match("[^/]+$"), "the sandbox's own notebook is listed")
    -- control: the sandbox's own notebook continues
    local own = ok_call(call(agent(), "start_session_continue_notebook", { notebook_path = r.session.notebook_path:match("[^/]+$") }), "continue own")
    ok_call(call(agent(), "shutdown_session", { session_id = own.structured.session_id }))
  end,
}

mcp_attack{
  name = "resume a notebook name that agent code symlinked to a host notebook",
  vector = "kernel/sh",
  sh = function() ws() return ("ln -sf %s %s/evil.ipynb && ln -sf %s %s/secret.ipynb && ls -l %s"):format(HOST_NB, WS_NB, A.canary_dir .. "/secret.txt", WS_NB, WS_NB) end,
  check = function(out)
    T.contains(out, "evil.ipynb ->", "the links were planted")
    local s, c = ws()
    -- control: the host would read the host notebook through the planted link
    local f = assert(io.open(s.output_dir .. "/evil.ipynb", "rb"))
    T.contains(f:read("*a"), "HOST-NOTEBOOK-SECRET", "control: the link leads to the host notebook")
    f:close()
    for _, name in ipairs{ "evil.ipynb", "evil", "secret.ipynb" } do
      for _, tool in ipairs{ "start_session_resume_notebook", "start_session_continue_notebook" } do
        local r = call(c, tool, { notebook_path = name })
        refused(r, "NotebookNotFound", tool .. " " .. name)
        T.ok(not r.text:find("HOST-NOTEBOOK-SECRET", 1, true) and not r.text:find("host secret", 1, true), "a host file leaked")
      end
    end
    -- control: the session's own notebook (a regular file there) is found and continued in the
    -- sandbox (resuming it is refused while its session lives: two sessions would save one file)
    local name = s.notebook_path:match("[^/]+$")
    refused(call(c, "start_session_resume_notebook", { notebook_path = name }), "NotebookInUse", "resume own live")
    local own = ok_call(call(c, "start_session_continue_notebook", { notebook_path = name }), "continue own")
    T.eq(own.structured.cells_run, 1)
    ok_call(call(c, "shutdown_session", { session_id = own.structured.session_id }))
  end,
  teardown = function() os.remove(ws().output_dir .. "/evil.ipynb"); os.remove(ws().output_dir .. "/secret.ipynb") end,
}

mcp_attack{
  name = "swap the output directory for a symlink to a host folder, then resume",
  vector = "exec/sh",
  sh = function() ws() return ("mv %s /workspace/notebooks.real && ln -s %s %s && readlink %s"):format(WS_NB, A.root, WS_NB, WS_NB) end,
  check = function(out)
    T.contains(out, A.root, "the directory was swapped for a link")
    local s, c = ws()
    -- control: on the host, the session's output directory now leads to the host folder
    local f = assert(io.open(s.output_dir .. "/host-only.ipynb", "rb"))
    T.contains(f:read("*a"), "HOST-NOTEBOOK-SECRET", "control: the swapped directory leads to the host notebook")
    f:close()
    for _, tool in ipairs{ "start_session_resume_notebook", "start_session_continue_notebook" } do
      local r = call(c, tool, { notebook_path = "host-only.ipynb" })
      refused(r, "NotebookNotFound", tool)
      T.ok(not r.text:find("HOST-NOTEBOOK-SECRET", 1, true), "the host notebook leaked")
    end
  end,
  teardown = function()
    A.exec_sh(("rm -f %s && mv /workspace/notebooks.real %s"):format(WS_NB, WS_NB), 30, rig())
  end,
}

mcp_attack{
  name = "swap the output directory for a link to the host canary, then run a cell (the host saves the notebook)",
  vector = "kernel/sh",
  sh = function() ws() return ("mv %s /workspace/notebooks.real && ln -s %s %s && readlink %s"):format(WS_NB, A.canary_dir, WS_NB, WS_NB) end,
  check = function(out)
    T.contains(out, A.canary_dir, "the directory was swapped for a link")
    local s, c = ws()
    -- control: on the host, the session's output directory now leads into the canary folder
    local f = assert(io.open(s.output_dir .. "/notes.md", "rb"))
    T.eq(f:read("*a"), A.canary_files["notes.md"], "control: the link leads to the canary")
    f:close()
    -- each of these makes the host save the notebook; none may land in the canary folder
    call(c, "execute_code", { session_id = s.session_id, code = "print('saved?')" })
    call(c, "add_markdown", { session_id = s.session_id, content = "# planted" })
    local before = #exec.list_sessions()
    local r = call(c, "start_new_session", { experiment_name = "through-the-link" })
    refused(r, "follow", "a new notebook through the swapped folder")
    T.eq(#exec.list_sessions(), before, "the refused session's kernel did not stay behind")
  end,
  teardown = function()
    A.exec_sh(("rm -f %s && mv /workspace/notebooks.real %s"):format(WS_NB, WS_NB), 30, rig())
  end,
}

mcp_attack{
  name = "a FIFO planted under a notebook name (the server must not hang on it)",
  vector = "kernel/sh",
  sh = function() ws() return ("mkfifo %s/fifo.ipynb && mkdir -p %s/dir.ipynb && ls -l %s"):format(WS_NB, WS_NB, WS_NB) end,
  check = function(out)
    T.contains(out, "fifo.ipynb", "the FIFO was planted")
    local _, c = ws()
    local t0 = require("seer.process").now_ms()
    refused(call(c, "start_session_resume_notebook", { notebook_path = "fifo.ipynb" }), "not a regular file", "resume a FIFO")
    refused(call(c, "start_session_continue_notebook", { notebook_path = "dir.ipynb" }), "NotebookNotFound", "continue a directory")
    T.ok(require("seer.process").now_ms() - t0 < 10000, "refused at once, not after a hang")
    -- the server still serves everyone
    T.eq(ok_call(call(agent(), "execute_code", { session_id = rig().session.session_id, code = "print(1 + 1)" })).text, "2\n")
  end,
  teardown = function() A.exec_sh(("rm -rf %s/fifo.ipynb %s/dir.ipynb"):format(WS_NB, WS_NB), 30, rig()) end,
}

mcp_attack{
  name = "attach to, run code in and shut down another sandbox's session",
  check = function()
    local o = other().session
    local before = o:exec("print(1)").text
    T.eq(before, "1\n", "control: the other sandbox's session works for its owner")
    local url = o.jupyter_url -- even the live view URL with its token, were the agent to learn it
    refused(call(agent(), "attach_to_session", { session_id = o.session_id, jupyter_url = url }), "SessionNotFound", "attach")
    refused(call(agent(), "attach_to_session", { session_id = o.session_id }), "SessionNotFound", "attach without url")
    refused(call(agent(), "execute_code", { session_id = o.session_id, code = "print(os.getenv('SEER_SANDBOX_ID'))" }), "unknown session_id", "execute")
    refused(call(agent(), "shutdown_session", { session_id = o.session_id }), "unknown session_id", "shutdown")
    refused(call(agent(), "read_notebook", { session_id = o.session_id }), "unknown session_id", "read")
    T.eq(o:info().state, "idle", "the other sandbox's session lives on")
    -- control: the bystander's own server reaches it
    local oc = client("other", o.mcp_config)
    local r = ok_call(call(oc, "execute_code", { session_id = o.session_id, code = "print(os.getenv('SEER_SANDBOX_ID'))" }))
    T.eq(r.text, other().sandbox.sandbox_id .. "\n")
  end,
}

mcp_attack{
  name = "attach to and run code in a host session by its id",
  check = function()
    local h = host()
    for _, args in ipairs{ { session_id = h.session_id, jupyter_url = h.jupyter_url }, { session_id = h.session_id } } do
      refused(call(agent(), "attach_to_session", args), "SessionNotFound", "attach to the host session")
    end
    refused(call(agent(), "execute_code", { session_id = h.session_id, code = "print(host_secret)" }), "unknown session_id", "execute")
    refused(call(agent(), "edit_cell", { session_id = h.session_id, code = "print(host_secret)" }), "unknown session_id", "edit_cell")
    refused(call(agent(), "interrupt", { session_id = h.session_id }), "unknown session_id", "interrupt")
    refused(call(agent(), "restart_kernel", { session_id = h.session_id }), "unknown session_id", "restart_kernel")
    refused(call(agent(), "shutdown_session", { session_id = h.session_id }), "unknown session_id", "shutdown")
    -- control: the host session is alive and holds the secret
    T.eq(h:exec("print(host_secret)").text, "researcher only\n")
  end,
}

mcp_attack{
  name = "experiment names with path separators write outside the output directory",
  check = function()
    local r = rig()
    local out_dir = r.session.output_dir
    for _, name in ipairs{ "../../host-canary/pwn", A.canary_dir .. "/pwn", "..", "a/../../b", "..\\..\\pwn", "~/pwn" } do
      local s = ok_call(call(agent(), "start_new_session", { experiment_name = name }), "start_new_session " .. name)
      local nb = s.structured.notebook_path
      T.ok(not nb:find("/", 1, true), "a file name, not a path: " .. nb)
      T.ok(io.open(out_dir .. "/" .. nb, "rb") ~= nil, "the notebook is in the session's output directory")
      ok_call(call(agent(), "shutdown_session", { session_id = s.structured.session_id }))
      local c = call(agent(), "start_session_continue_notebook", { notebook_path = r.session.notebook_path:match("[^/]+$"), experiment_name = name })
      ok_call(c, "continue with name " .. name)
      T.ok(not c.structured.notebook_path:find("/", 1, true), "a file name, not a path")
      ok_call(call(agent(), "shutdown_session", { session_id = c.structured.session_id }))
    end
  end,
}

mcp_attack{
  name = "arguments that try to choose the kernel's env, cwd, sandbox or output directory",
  check = function()
    local before = host_sessions()
    for _, args in ipairs{ { env = { LD_PRELOAD = "/tmp/x.so" } }, { cwd = "/" }, { sandbox = false }, { workspace_dir = A.canary_dir },
                           { output_dir = A.canary_dir }, { notebook_dir = A.canary_dir }, { kernel_env = { HOME = "/" } } } do
      local k = next(args)
      refused(call(agent(), "start_new_session", args), k, "start_new_session with " .. k)
      local rr = call(agent(), "start_session_resume_notebook", { notebook_path = "x.ipynb", [k] = args[k] })
      refused(rr, k, "resume with " .. k)
    end
    T.eq(host_sessions(), before, "no host kernel")
  end,
}

mcp_attack{
  name = "the sandbox's scope key sent straight to the notebook server (a hijacked MCP server)",
  check = function()
    -- What a compromised seer mcp notebook could do with everything it holds: the binding.
    local env = rig().session.mcp_config.notebook.env
    local b = exec.bind_sandbox(env.SEER_NOTEBOOK_ENDPOINT, env.SEER_NOTEBOOK_SCOPE_KEY)
    local srv = b._srv
    local function raw(t, content)
      local net = require "seer.net"
      local h = net.header(t .. "_request", srv.session)
      srv.inbox[h.msg_id] = {}
      srv.sock:send{ header = h, parent_header = {}, metadata = {}, content = content }
      local deadline = require("seer.process").now_ms() + 20000
      while require("seer.process").now_ms() < deadline do
        local m = srv.sock:recv(100)
        if m and m.parent_header.msg_id == h.msg_id then srv.inbox[h.msg_id] = nil return m.content end
      end
      error("no answer to " .. t)
    end
    local before = host_sessions()
    local launcher = other().sandbox:kernel_launcher()
    for _, c in ipairs{ { sandbox = launcher }, { sandbox = json.null }, { kernel_env = { X = "1" } }, { workspace_dir = "/" },
                        { notebook_dir = A.canary_dir }, { resume = HOST_NB }, { ["continue"] = "../host-only.ipynb" },
                        { like = other().session.session_id }, { like = host().session_id } } do
      local r = raw("start_session", c)
      T.eq(r.status, "error", "start_session " .. json.encode(c))
    end
    T.eq(raw("shutdown", {}).ename, "NotAllowed", "the whole server cannot be shut down")
    T.eq(raw("scope_credential", { session_id = other().session.session_id }).ename, "NotAllowed")
    T.eq(raw("execute", { session_id = rig().session.session_id, code = "x = 1", init = true }).ename, "NotAllowed")
    T.eq(raw("session_info", { session_id = host().session_id }).ename, "SessionNotFound")
    local listed = raw("list_sessions", {}).sessions
    for _, s in ipairs(listed) do
      T.eq(s.sandbox_id, rig().sandbox.sandbox_id, "list_sessions shows only this sandbox's sessions")
      T.eq(s.jupyter_url, json.null, "no live-view URL (its token is the main key's)")
    end
    T.eq(host_sessions(), before, "no host kernel")
    T.eq(other().session:info().state, "idle", "the bystander sandbox's session is untouched")
  end,
}

mcp_attack{
  name = "a forged scope key or the other sandbox's endpoint",
  check = function()
    local env = rig().session.mcp_config.notebook.env
    local oenv = other().session.mcp_config.notebook.env
    T.eq(env.SEER_NOTEBOOK_ENDPOINT ~= oenv.SEER_NOTEBOOK_ENDPOINT and env.SEER_NOTEBOOK_SCOPE_KEY ~= oenv.SEER_NOTEBOOK_SCOPE_KEY, true,
      "each sandbox has its own socket and key")
    -- this sandbox's key on the other's socket, and a made-up key: the server drops what it cannot verify
    for _, k in ipairs{ env.SEER_NOTEBOOK_SCOPE_KEY, string.rep("ab", 32) } do
      local b = exec.bind_sandbox(oenv.SEER_NOTEBOOK_ENDPOINT, k)
      local ok, err = pcall(b.attach, b, other().session.session_id, { timeout_ms = 1500 })
      T.ok(not ok, "attached with a key that is not the scope's")
      T.contains(tostring(err), "did not answer")
    end
    -- the MCP server started with a forged key fails to reach anything, and starts no host kernel
    local before = host_sessions()
    local cfg = { notebook = { type = "stdio", command = rig().session.mcp_config.notebook.command, args = { "mcp", "notebook" },
                               env = { SEER_SESSION_ID = other().session.session_id, SEER_NOTEBOOK_ENDPOINT = oenv.SEER_NOTEBOOK_ENDPOINT,
                                       SEER_NOTEBOOK_SCOPE_KEY = string.rep("cd", 32) } } }
    local c = mcp.connect(cfg, { timeout = 60, connect_timeout = 60 })
    local r = call(c, "start_new_session", {})
    c:close()
    refused(r, nil, "start_new_session with a forged key")
    T.eq(host_sessions(), before, "no host kernel")
  end,
}

mcp_attack{
  name = "start_new_session after the sandbox has ended falls back to nothing",
  rig = { name = "mcp-ended", config = { models = {} } },
  check = function()
    local r = A.rig("mcp-ended")
    local c = client("ended", r.session.mcp_config)
    ok_call(call(c, "execute_code", { session_id = r.session.session_id, code = "print(1)" }), "control: the session works")
    local before = host_sessions()
    r.sandbox:terminate()
    local s = call(c, "start_new_session", { experiment_name = "after" })
    refused(s, "sandbox", "start_new_session in an ended sandbox")
    T.eq(host_sessions(), before, "no host kernel instead")
  end,
}

-- A host TCP listener that records whether anything connected (a python one-liner, so the
-- test does not depend on the code under test to notice a connection).
local function host_listener()
  local file = A.root .. "/listener-" .. tostring(os.time()) .. "-" .. math.random(1e6)
  os.execute(("/usr/bin/python3 -c 'import socket,sys\ns=socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(4)\n"
    .. "open(sys.argv[1] + \".port\", \"w\").write(str(s.getsockname()[1]))\ns.settimeout(90)\n"
    .. "try:\n  c, _ = s.accept(); open(sys.argv[1] + \".hit\", \"w\").write(\"connected\")\nexcept Exception: pass' '%s' &"):format(file))
  local port
  for _ = 1, 500 do
    local f = io.open(file .. ".port")
    if f then port = tonumber(f:read("*a")) f:close() end
    if port then break end
    require("seer.process").sleep_ms(10)
  end
  assert(port, "the host listener did not start")
  return port, function() local f = io.open(file .. ".hit") if f then f:close() return true end return false end
end

local listener_port, listener_hit
mcp_attack{
  name = "agent code impersonates sandboxd and answers start_kernel with a host TCP endpoint",
  rig = { name = "mcp-impostor", config = { models = {} } },
  vector = "exec/sh",
  -- The impostor binds the socket path the host connects to (the run directory is writable
  -- inside) and answers the next start_kernel with tcp://127.0.0.1:PORT of a host listener:
  -- outbound connections chosen by a sandbox that has no network. sandboxd deletes its
  -- connection file once read, so the test hands the impostor sandboxd's key itself (a leak
  -- assumed, so the host's own check of the reply is what is tested; without the key the
  -- host drops the impostor's replies as badly signed).
  setup = function()
    local r = A.rig("mcp-impostor")
    local f = assert(io.open(r.sandbox.workspace_dir .. "/leaked.key", "wb"))
    f:write(r.sandbox.key)
    f:close()
  end,
  sh = function()
    listener_port, listener_hit = host_listener()
    local lua = ([[
local net, json = require "seer.net", require "seer.json"
local f = assert(io.open("/workspace/leaked.key")) local key = f:read("*a") f:close()
local sock = net.socket("router", key)
sock:bind("ipc:///run/seer/sandboxd.sock")
print("IMPOSTOR-BOUND") io.stdout:flush()
local t0 = os.time()
while os.time() - t0 < 60 do
  local req = sock:recv(200)
  if req then
    local t = req.header.msg_type
    local content = { status = "ok" }
    if t == "start_kernel_request" then
      content.name, content.pid = req.content.name, 1
      content.connection = { transport = "tcp", ip = "127.0.0.1", shell_port = %d, iopub_port = %d, stdin_port = %d,
                             control_port = %d, hb_port = %d, key = string.rep("k", 64), signature_scheme = "hmac-sha256" }
    end
    sock:send{ idents = req.idents, header = net.header((t:gsub("_request$", "_reply")), "impostor"), parent_header = req.header,
               metadata = {}, content = content }
  end
end]]):format(listener_port, listener_port, listener_port, listener_port, listener_port)
    local fh = assert(io.open(A.rig("mcp-impostor").sandbox.workspace_dir .. "/impostor.lua", "wb"))
    fh:write(lua)
    fh:close()
    return "(/opt/seer/bin/seer /workspace/impostor.lua > /workspace/impostor.out 2>&1 &) ; sleep 1; cat /workspace/impostor.out"
  end,
  check = function(out)
    T.contains(out, "IMPOSTOR-BOUND", "the impostor holds the sandboxd socket path")
    local r = A.rig("mcp-impostor")
    local c = client("impostor", r.session.mcp_config)
    local before = host_sessions()
    local res = call(c, "start_new_session", { experiment_name = "impostor" })
    -- the reply the host refused was the impostor's (the error names what was wrong with it)
    refused(res, "transport is not ipc", "start_new_session answered by the impostor")
    require("seer.process").sleep_ms(300)
    T.ok(not listener_hit(), "the host connected to the endpoint the sandbox chose")
    T.eq(host_sessions(), before, "no host kernel")
  end,
}

mcp_attack{
  name = "seer mcp cli: path and cwd arguments that name host files",
  sh = "ls / ; ls " .. A.canary_dir .. " 2>&1; true",
  check = function(out)
    T.ok(not out:find("secret.txt", 1, true), "the canary is not visible inside")
    local r = rig()
    local cli = client("cli", exec.create_cli_session(r.sandbox).mcp_config)
    local read = call(cli, "read_file", { path = A.canary_dir .. "/secret.txt" })
    refused(read, nil, "read_file of a host file")
    T.ok(not read.text:find("host secret", 1, true), "the secret leaked")
    refused(call(cli, "read_file", { path = "../../../../" .. A.canary_dir .. "/secret.txt" }), nil, "read_file ../")
    -- The sandbox has its own /tmp: a write to the canary's path lands there, inside, and the
    -- rig checks the host folder gained nothing.
    call(cli, "write_file", { path = A.canary_dir .. "/planted.txt", content = "x" })
    T.eq(io.open(A.canary_dir .. "/planted.txt", "rb"), nil, "write_file reached the host canary")
    local list = call(cli, "list_files", { path = A.canary_dir })
    T.ok(not list.text:find("secret.txt", 1, true) and not list.text:find("notes.md", 1, true), "list_files showed the host canary: " .. list.text)
    for _, cwd in ipairs{ A.canary_dir, "../../../.." .. A.canary_dir } do
      local run = call(cli, "run_command", { command = "pwd; cat secret.txt; cat " .. A.canary_dir .. "/secret.txt; id -u", cwd = cwd })
      T.ok(not run.text:find("host secret", 1, true), "run_command with a host cwd read the secret: " .. run.text)
    end
    refused(call(cli, "run_command", { command = "true", env = { LD_PRELOAD = "x" } }), "env", "run_command with env")
    -- control: the tools work inside
    ok_call(call(cli, "write_file", { path = "probe.txt", content = "inside" }))
    T.eq(ok_call(call(cli, "read_file", { path = "/workspace/probe.txt" })).text, "inside")
  end,
}

local scoped_sb
mcp_attack{
  name = "seer mcp rpc: the connection file swapped for a link to a host file from inside",
  check = function()
    local env = require "seer.environment"
    scoped_sb = scoped_sb or env.ScopedSandbox(env.SandboxConfig{ execution_mode = "cli", models = {} }):start{ name = "mcp-scoped" }
    local iface = A.root .. "/hello_iface.lua"
    seer.write_file(iface, "---Says hello.\n---@return string\nfunction expose.hello() return 'hi' end\n")
    local given, srv = scoped_sb:serve(iface, { expose_as = "mcp", name = "hello" })
    -- the entry the host hands out names no file the sandbox can write (its endpoint and key
    -- are in its environment); a user may still point seer mcp rpc at the server's own file
    local conn = srv.connection_file
    for _, a in ipairs(given.hello.args) do T.ok(a ~= conn, "the mcp entry names the sandbox's connection file") end
    local cfg = { hello = { type = "stdio", command = given.hello.command,
                            args = { "mcp", "rpc", "--connection-file", conn, "--name", "hello" }, env = {} } }
    -- control: the entry works as given
    local c = mcp.connect(cfg, { timeout = 60 })
    T.eq(ok_call(call(c, "hello", {})).text, "hi")
    c:close()
    -- inside: the run directory is writable, and bound at its host path too
    local out = scoped_sb.sandbox:exec({ "/bin/sh", "-c", ("ln -sf %s %s.x && mv -f %s.x %s && ls -l %s"):format(
      A.canary_dir .. "/secret.txt", conn, conn, conn, conn) })
    T.contains(out, "->", "the link was planted")
    local f = assert(io.open(conn, "rb"))
    T.contains(f:read("*a"), "host secret", "control: following the link reads the host's secret")
    f:close()
    local ok, err = pcall(mcp.connect, cfg, { timeout = 30, connect_timeout = 30 })
    if ok then err:close() end
    T.ok(not ok, "seer mcp rpc started from a planted link")
    T.contains(tostring(err), "without following links")
    T.ok(not tostring(err):find("host secret", 1, true), "the host file's content reached the error: " .. tostring(err))
    -- the entry the host gave is not moved by the link
    c = mcp.connect(given, { timeout = 60 })
    T.eq(ok_call(call(c, "hello", {})).text, "hi")
    c:close()
  end,
}

mcp_attack{
  name = "seer mcp rpc: the connection file rewritten from inside with an endpoint of the sandbox's choosing",
  check = function()
    local env = require "seer.environment"
    scoped_sb = scoped_sb or env.ScopedSandbox(env.SandboxConfig{ execution_mode = "cli", models = {} }):start{ name = "mcp-scoped" }
    local iface = A.root .. "/hello2_iface.lua"
    seer.write_file(iface, "---Says hello.\n---@return string\nfunction expose.hello2() return 'hi' end\n")
    local given, srv = scoped_sb:serve(iface, { expose_as = "mcp", name = "hello2" })
    local conn = srv.connection_file
    local cfg = { hello2 = { type = "stdio", command = given.hello2.command,
                             args = { "mcp", "rpc", "--connection-file", conn, "--name", "hello2" }, env = {} } }
    local orig = json.decode(seer.read_file(conn))
    for _, ep in ipairs{ "tcp://exfil-0123456789abcdef.invalid:80", "tcp://10.255.255.1:9", "ipc:///tmp/elsewhere.sock",
                         "ipc://" .. conn:match("^(.*)/") .. "/../../../x.sock" } do
      local forged = { key = orig.key, endpoint = ep, signature_scheme = "hmac-sha256", transport = ep:match("^(%a+)"), name = "hello2", pid = orig.pid }
      local text = json.encode(forged):gsub("'", "")
      scoped_sb.sandbox:exec({ "/bin/sh", "-c", ("printf '%%s' '%s' > %s.x && mv -f %s.x %s"):format(text, conn, conn, conn) })
      T.eq(json.decode(seer.read_file(conn)).endpoint, ep, "control: the sandbox rewrote the file")
      local ok, err = pcall(mcp.connect, cfg, { timeout = 30, connect_timeout = 30 })
      if ok then err:close() end
      T.ok(not ok, "seer mcp rpc used the endpoint " .. ep)
      T.ok(tostring(err):find("loopback", 1, true) or tostring(err):find("outside its own folder", 1, true), tostring(err))
    end
    -- the endpoint and key from the host's memory, in the entry's environment, need no file
    local e = { type = "stdio", command = cfg.hello2.command, args = { "mcp", "rpc", "--name", "hello2" },
                env = { SEER_RPC_ENDPOINT = srv.client.info.endpoint, SEER_RPC_KEY = srv.client.info.key } }
    local c = mcp.connect({ hello2 = e }, { timeout = 60 })
    T.eq(ok_call(call(c, "hello2", {})).text, "hi")
    c:close()
    -- which is what the entry the host hands out does: the rewritten file does not move it
    c = mcp.connect(given, { timeout = 60 })
    T.eq(ok_call(call(c, "hello2", {})).text, "hi")
    c:close()
  end,
}

T.test("mcp attacks: end of file (closes the clients and rigs)", function()
  if scoped_sb then pcall(scoped_sb.terminate, scoped_sb) end
  for name, c in pairs(clients) do pcall(c.close, c) clients[name] = nil end
  if host_session then host_session:terminate() end
  if ws_session then ws_session:terminate() end
  A.close()
end)
