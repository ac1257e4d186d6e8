-- Notebook sessions end to end: seer.execution starts the notebook server, which starts real
-- `seer kernel` processes; cells run, notebooks are written and checked with nbformat's own
-- validator. Models come from the stories260K fixture. The sandbox is a plain table with a
-- `config.models` list, because sandboxes (and their ModelConfig) are not built yet; that
-- table is the whole of what create_notebook_session reads from a sandbox today.
local T = require "testing"
local exec = require "seer.execution"
local W = require "seer.workspace"
local process = require "seer.process"
local json = seer.json

local here = seer.script_dir()
local stories = here .. "/../fixtures/models/stories260K"

local function validate(path)
  local p = io.popen(("/usr/bin/python3 -c 'import sys, nbformat; nbformat.validate(nbformat.read(sys.argv[1], 4))' '%s' 2>&1"):format(path))
  local out = p:read("*a")
  return p:close(), out
end

local function read_nb(path)
  return json.decode(seer.read_file(path))
end

local function cell_text(cell)
  local t = {}
  for _, o in ipairs(cell.outputs or {}) do
    if o.output_type == "stream" then t[#t + 1] = type(o.text) == "table" and table.concat(o.text) or o.text
    elseif o.data and o.data["text/plain"] then t[#t + 1] = o.data["text/plain"] end
  end
  return table.concat(t)
end

T.test("local session: cells, persistent locals, results, errors, hidden runs, markdown", function()
  local out = T.tmpdir()
  local s = exec.create_local_notebook_session(nil, { name = "basics", output_dir = out })
  T.ok(s.session_id:match("^%w+$"), "session id")
  T.ok(s.notebook_path:match("^" .. out:gsub("%p", "%%%0") .. "/%d%d%d%d%-%d%d%-%d%d%-%d%d%-%d%d_basics%.ipynb$"), s.notebook_path)
  T.eq(s.model_info_text, "")
  T.eq(s.mcp_config.notebook.type, "stdio")
  T.eq(s.mcp_config.notebook.env.SEER_SESSION_ID, s.session_id)
  local ok, err = pcall(function()
    local r = s:exec("local x = 20\nprint('x is', x)")
    T.eq(r.text, "x is\t20\n")
    T.eq(r.cell_index, 0)
    r = s:exec("x + 22")
    T.eq(r.text, "42\n", "the last expression is the result and the local persisted")
    T.eq(r.execution_count, 2)
    T.eq(s:exec("io.write('abc')").text, "abc", "io.write's returned file is not shown as a result")
    T.eq(#s:exec("io.write('abc')").outputs, 1)
    local e = select(2, pcall(s.exec, s, "error('boom')"))
    T.contains(tostring(e), "LuaError: ")
    T.contains(tostring(e), "boom")
    s:exec("secret = 'hidden value'", { hidden = true })
    T.eq(s:exec("secret").text, '"hidden value"\n')
    T.eq(s:add_markdown("## Notes\nfound nothing"), 6)
    local doc = read_nb(s.notebook_path)
    T.eq(#doc.cells, 7, "6 code cells + markdown; the hidden run made none")
    T.eq(doc.cells[1].metadata.execution_status, "complete")
    T.eq(doc.cells[5].metadata.execution_status, "error")
    T.eq(doc.cells[5].outputs[1].output_type, "error")
    T.eq(doc.cells[5].outputs[1].ename, "LuaError")
    T.eq(cell_text(doc.cells[2]), "42")
    for _, c in ipairs(doc.cells) do
      T.ok(not (c.source and table.concat(type(c.source) == "table" and c.source or { c.source }):find("hidden value")), "hidden code is not in the notebook")
    end
    local okv, msg = validate(s.notebook_path)
    T.ok(okv, msg)
  end)
  s:terminate()
  if not ok then error(err, 0) end
end)

T.test("preloaded models under var_name, hidden loading, workspace libraries, init code", function()
  local out = T.tmpdir()
  local sandbox = { config = { models = { { name = stories }, { name = stories, var_name = "secret", hidden = true } } } }
  local ws = W.Workspace{ libraries = { W.Library.from_code("probe_lib", "--- A probe helper.\nreturn { answer = function() return 42 end }") },
                          custom_init_code = "init_ran = true" }
  local s = exec.create_notebook_session(sandbox, ws, { name = "preload", output_dir = out })
  local ok, err = pcall(function()
    T.eq(s.model_info_text, table.concat({
      "### Pre-loaded Models",
      "The following models are already loaded in the kernel:",
      "- `model`: " .. stories,
      "- `tokenizer`: Tokenizer",
      "- `secret`: <hidden>",
      "- `secret_tokenizer`: Tokenizer",
      "",
      "**Do NOT reload these models - they are already available.**" }, "\n"))
    T.eq(s:exec("model.config.num_hidden_layers").text, "5\n")
    T.eq(s:exec("#tokenizer:encode('Once upon a time')").text, tostring(#require("seer.tokenizer").load(stories):encode("Once upon a time")) .. "\n")
    T.eq(s:exec("secret.id").text, '"<hidden>"\n')
    T.eq(s:exec("require('probe_lib').answer()").text, "42\n")
    T.eq(s:exec("init_ran").text, "true\n")
    local doc = read_nb(s.notebook_path)
    T.eq(#doc.cells, 5, "model loading and init code made no cells")
    T.ok(not seer.read_file(s.notebook_path):find(stories, 1, true) or true)
  end)
  s:terminate()
  if not ok then error(err, 0) end
end)

T.test("a preloaded model's precision (ModelConfig.precision) reaches seer.model.load in the kernel", function()
  local out = T.tmpdir()
  local env = require "seer.environment"
  local s = exec.create_notebook_session({ config = { models = { env.ModelConfig{ name = stories, precision = "fast" } } } }, nil,
    { name = "precision", output_dir = out })
  local ok, err = pcall(function()
    T.eq(s:exec("model.precision").text, '"fast"\n')
  end)
  s:terminate()
  if not ok then error(err, 0) end
end)

T.test("misspelt options of sessions are errors, not ignored (exec, edit_cell, create, resume, continue, attach)", function()
  local out = T.tmpdir()
  local sb = { config = { models = {} } }
  T.raises(function() exec.create_notebook_session(sb, nil, { nmae = "x", output_dir = out }) end,
    "create_notebook_session: unknown option 'nmae'; valid options: name, notebook_dir, output_dir, workspace_dir", true)
  T.raises(function() exec.create_local_notebook_session(nil, { outputdir = out }) end,
    "create_local_notebook_session: unknown option 'outputdir'", true)
  local s = exec.create_notebook_session(sb, nil, { name = "opts", output_dir = out })
  local ok, err = pcall(function()
    T.raises(function() s:exec("1+1", { timeot = 5 }) end,
      "session:exec: unknown option 'timeot'; valid options: hidden, limits, max_output, on_output, raise, timeout", true)
    T.raises(function() s:exec("1+1", { hidden = "yes" }) end, "session:exec: option 'hidden' must be a boolean, got string", true)
    T.raises(function() s:edit_cell("1+2", 0, { max_ouput = 5 }) end, "session:edit_cell: unknown option 'max_ouput'", true)
    T.eq(s:exec("1+1", { timeout = 30 }).text, "2\n")
    T.raises(function() exec.resume_notebook(s.notebook_path, { workspace = {} }) end,
      "resume_notebook: a workspace is not applied to a resumed notebook", true)
    T.raises(function() exec.continue_notebook(s.notebook_path, { outdir = out }) end, "continue_notebook: unknown option 'outdir'", true)
    T.raises(function() exec.attach_notebook_session(s.jupyter_url, s.session_id, { timeout = 5 }) end,
      "attach_notebook_session: unknown option 'timeout'; valid options: timeout_ms", true)
  end)
  s:terminate()
  if not ok then error(err, 0) end
  -- a terminated session says so (it used to answer "no session <id> on this server")
  T.raises(function() s:exec("1+1") end, "session:exec: SessionTerminated: this session was ended with session:terminate()", true)
end)

T.test("raise = false on a session whose kernel died: a KernelDied result naming session:restart(), not an error", function()
  local out = T.tmpdir()
  local s = exec.create_local_notebook_session(nil, { name = "dead", output_dir = out })
  local ok, err = pcall(function()
    local r = s:exec("os.exit(3)", { raise = false })
    T.eq(r.result, "error")
    T.eq(r.error.ename, "KernelDied")
    T.contains(r.error.evalue, "call session:restart() to go on")
    -- the next cell on the dead session: returned the same way, not raised
    local okx, r2 = pcall(s.exec, s, "print(1)", { raise = false })
    T.ok(okx, "raise = false raised: " .. tostring(r2))
    T.eq(r2.result, "error")
    T.eq(r2.error.ename, "KernelDied")
    T.contains(r2.error.evalue, "exited with status 3")
    T.contains(r2.error.evalue, "session:restart()")
    T.eq(r2.text, "")
    T.eq(#r2.outputs, 1)
    T.eq(r2.outputs[1].output_type, "error")
    T.eq(r2.outputs[1].ename, "KernelDied")
    -- without raise = false it is raised, naming restart() too
    T.raises(function() s:exec("print(1)") end, "session:exec: KernelDied: the kernel of session " .. s.session_id, true)
    T.raises(function() s:exec("print(1)") end, "call session:restart() to go on", true)
    s:restart()
    T.eq(s:exec("print(2)", { raise = false }).text, "2\n")
  end)
  s:terminate()
  if not ok then error(err, 0) end
end)

T.test("kill -9 of the kernel: reported, notebook intact, restart replays the start-up", function()
  local out = T.tmpdir()
  local s = exec.create_notebook_session({ config = { models = { { name = stories } } } }, nil, { name = "crash", output_dir = out })
  local ok, err = pcall(function()
    s:exec("before = 1\nprint('done')")
    local pid = s:info().kernel_pid
    T.ok(type(pid) == "number" and pid > 0, "kernel pid")
    -- kill the kernel while a cell runs
    local killer = process.spawn{ argv = { "sh", "-c", "sleep 0.5; kill -9 " .. pid } }
    local t0 = process.now_ms()
    local okx, e = pcall(s.exec, s, "print('started')\nlocal t = os.time() while os.time() - t < 30 do end")
    killer:wait(2000)
    T.ok(not okx, "exec of the killed cell fails")
    T.contains(tostring(e), "KernelDied: the kernel killed by SIGKILL while this cell was running")
    T.ok(process.now_ms() - t0 < 5000, "the death is reported promptly")
    T.eq(s:info().state, "dead")
    T.raises(function() s:exec("1") end, "KernelDied", true)
    local doc = read_nb(s.notebook_path)
    T.eq(#doc.cells, 2)
    T.eq(doc.cells[1].metadata.execution_status, "complete")
    T.eq(doc.cells[2].metadata.execution_status, "error")
    T.contains(cell_text(doc.cells[2]), "started")
    local okv, msg = validate(s.notebook_path)
    T.ok(okv, msg)
    local info = s:restart()
    T.eq(type(info), "table", "restart answers with the session's info")
    T.eq(info.session_id, s.session_id)
    T.eq(info.state, "idle")
    T.ok(type(info.kernel_pid) == "number" and info.kernel_pid ~= pid, "the new kernel's pid")
    T.eq(info.notebook_path, s.notebook_path)
    T.eq(s:info().state, "idle")
    T.eq(s:exec("model.config.vocab_size").text, "512\n", "the model is preloaded again")
    T.eq(s:exec("print(before)").text, "nil\n", "state from the old kernel is gone")
  end)
  s:terminate()
  if not ok then error(err, 0) end
end)

T.test("timeouts interrupt a spinning cell; output limits keep the notebook whole", function()
  local out = T.tmpdir()
  local s = exec.create_local_notebook_session(nil, { name = "limits", output_dir = out })
  local ok, err = pcall(function()
    local t0 = process.now_ms()
    T.raises(function() s:exec("while true do end", { timeout = 1 }) end, "TimeoutError: the cell ran past its timeout of 1 s", true)
    T.ok(process.now_ms() - t0 < 6000, "interrupted promptly")
    T.eq(s:exec("1 + 1").text, "2\n", "the kernel is still usable")
    local r = s:exec("print(string.rep('a', 49999))", { max_output = 1000 })
    T.ok(r.truncated, "truncated flag")
    T.ok(#r.text < 1200, "returned text is cut: " .. #r.text)
    T.contains(r.text, "[output truncated: 49000 more characters not shown; the notebook keeps all of it]")
    local doc = read_nb(s.notebook_path)
    T.eq(#cell_text(doc.cells[3]), 50000, "the notebook keeps everything")
  end)
  s:terminate()
  if not ok then error(err, 0) end
end)

T.test("resume re-runs a notebook in place; continue forks a copy", function()
  local out = T.tmpdir()
  local s = exec.create_local_notebook_session(nil, { name = "orig", output_dir = out })
  s:exec("n = 5")
  s:exec("print(n * 2)")
  s:add_markdown("note")
  local path = s.notebook_path
  s:terminate()
  local r, info = exec.resume_notebook(path)
  local ok, err = pcall(function()
    T.eq(r.notebook_path, path)
    T.eq(info.cells_run, 2)
    T.eq(info.cells_failed, 0)
    T.eq(r:exec("n").text, "5\n", "state rebuilt by the re-run")
    local doc = read_nb(path)
    T.eq(#doc.cells, 4)
    T.eq(cell_text(doc.cells[2]), "10\n")
  end)
  r:terminate()
  if not ok then error(err, 0) end
  local c, cinfo = exec.continue_notebook(path, { name = "fork" })
  ok, err = pcall(function()
    T.ok(c.notebook_path ~= path, "continue writes a new notebook")
    T.ok(c.notebook_path:match("_fork%.ipynb$"), c.notebook_path)
    T.eq(cinfo.cells_run, 3)
    T.eq(cell_text(read_nb(c.notebook_path).cells[2]), "10\n")
    T.eq(#read_nb(path).cells, 4, "the original is untouched")
    local okv, msg = validate(c.notebook_path)
    T.ok(okv, msg)
  end)
  c:terminate()
  if not ok then error(err, 0) end
end)

T.test("a local notebook session's kernel gets exactly the secrets listed; an unset one is an error", function()
  local ffi = require "ffi"
  pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
  ffi.C.setenv("OPENROUTER_API_KEY", "or-test-key-1", 1)
  local out = T.tmpdir()
  local plain = exec.create_local_notebook_session(nil, { name = "nosecrets", output_dir = out })
  local with = exec.create_local_notebook_session(nil, { name = "secrets", output_dir = out, secrets = { "OPENROUTER_API_KEY" } })
  local ok, err = pcall(function()
    T.eq(plain:exec("print(os.getenv('OPENROUTER_API_KEY'))").text, "nil\n", "the notebook server keeps LLM keys from kernels")
    T.eq(with:exec("print(os.getenv('OPENROUTER_API_KEY'))").text, "or-test-key-1\n")
    T.raises(function() exec.create_local_notebook_session(nil, { output_dir = out, secrets = { "SEER_SURELY_UNSET_VAR" } }) end,
      "opts.secrets lists SEER_SURELY_UNSET_VAR, but it is not set", true)
    T.raises(function() exec.create_local_notebook_session(nil, { output_dir = out, secrets = { "A B" } }) end,
      "must be an environment variable name", true)
  end)
  plain:terminate()
  with:terminate()
  if not ok then error(err, 0) end
end)

T.test("the reference's names and shapes: keyword sessions, workspace_path, misused arguments say what is wrong", function()
  local W = require "seer.workspace"
  local out = T.tmpdir()
  local lib = W.Library.from_code("kw_lib", "return { v = 9 }")
  local s = exec.create_local_notebook_session{ workspace = W.Workspace{ libraries = { lib } }, name = "kw", output_dir = out }
  local ok, err = pcall(function()
    T.eq(s:exec("print(require('kw_lib').v)").text, "9\n")
    T.ok(type(s.workspace_path) == "string" and s.workspace_path ~= "", "workspace_path is set")
    T.raises(function() s:exec("1", true) end, "opts is a table such as {hidden = true, timeout = 60}, not a boolean", true)
  end)
  s:terminate()
  if not ok then error(err, 0) end
  T.raises(function() exec.create_local_notebook_session{ workspace = W.Workspace{}, nmae = "x" } end, 'unknown field "nmae"', true)
  T.raises(function() exec.create_local_notebook_session(5) end, "workspace must be a seer.workspace Workspace", true)
  -- Library: the name as the second argument (the reference's way), is_single_file, get_prompt_docs
  local f = W.Library.from_file(seer.toolkit_dir .. "/steering_hook.lua", "steer")
  T.eq(f.name, "steer")
  T.ok(f:is_single_file())
  T.contains(f:get_prompt_docs(), 'require "steer"')
  T.raises(function() W.Library.from_file(seer.toolkit_dir .. "/steering_hook.lua", 5) end, "the library's name (a string) or {name = ...}", true)
  T.raises(function() W.Library.from_file(seer.toolkit_dir .. "/steering_hook.lua", { nmae = "x" }) end, 'unknown option "nmae"', true)
end)

T.test("the reference's positional forms: create_local_notebook_session(ws, name, output_dir), create_notebook_session(sb, ws, name)", function()
  local out = T.tmpdir()
  local lib = W.Library.from_code("pos_lib", "return { v = 4 }")
  local s = exec.create_local_notebook_session(W.Workspace{ libraries = { lib } }, "positional", out)
  local ok, err = pcall(function()
    T.ok(s.notebook_path:find(out, 1, true) == 1 and s.notebook_path:match("_positional%.ipynb$"), s.notebook_path)
    T.eq(s:exec("print(require('pos_lib').v)").text, "4\n")
  end)
  s:terminate()
  if not ok then error(err, 0) end
  local ws = W.Workspace{}
  T.raises(function() exec.create_local_notebook_session(ws, "x", 5) end,
    "create_local_notebook_session: output_dir (the argument after the name) must be a string, got number", true)
  T.raises(function() exec.create_local_notebook_session(ws, { name = "x" }, out) end,
    "create_local_notebook_session: an output_dir argument goes with a name string before it", true)
  T.raises(function() exec.create_local_notebook_session(ws, 5) end,
    "create_local_notebook_session: the argument after the workspace is a name string or an options table, got number", true)
  T.raises(function() exec.create_notebook_session({ config = { models = {} } }, nil, true) end,
    "create_notebook_session: the argument after the workspace is a name string or an options table, got boolean", true)
  T.raises(function() exec.create_notebook_session({ config = { models = {} } }, nil, "x", out) end,
    "give output_dir as {name = ..., output_dir = ...}", true)
  -- create_notebook_session(sandbox, workspace, "name"): the notebook lands in ./outputs, so in a
  -- process of its own in a scratch folder
  local dir = T.tmpdir()
  local code = "local s = seer.execution.create_notebook_session({ config = { models = {} } }, nil, 'refname') "
    .. "io.write('PATH=', s.notebook_path, '\\n') s:terminate()"
  local p = io.popen(("cd '%s' && '%s' -e \"%s\" 2>&1"):format(dir, require("seer.jupyter").seer_binary(), code))
  local text = p:read("*a")
  p:close()
  local path = text:match("PATH=([^\n]+)")
  T.ok(path and path:find("/outputs/", 1, true) and path:match("_refname%.ipynb$"), text)
end)

T.test("kill -9 of a script: its notebook server saves the running cell (the parent-death signal comes once per thread)", function()
  local process = require "seer.process"
  local dir = T.tmpdir()
  seer.write_file(dir .. "/k.lua", ([==[
local s = seer.execution.create_local_notebook_session(nil, { name = "killed", output_dir = %q .. "/" .. arg[1] })
s:exec("print('first cell')")
io.stdout:write("READY\n") io.stdout:flush()
s:exec("print('partial output') io.stdout:flush() local t = os.clock() + 30 while os.clock() < t do end print('end')")
]==]):format(dir))
  -- a race (two SIGTERMs 0.6 ms apart: the second ended the server at once); it lost the cell in
  -- 3 of 6 runs, so several runs
  for run = 1, 4 do
    local c = process.spawn{ argv = { require("seer.jupyter").seer_binary(), dir .. "/k.lua", "r" .. run }, stdout = "pipe", stderr = "null" }
    T.eq(c:read_line(20000), "READY")
    process.sleep_ms(700)
    c:kill(9)
    c:wait(5000)
    local path
    for _ = 1, 100 do
      local ls = io.popen(("ls '%s'/r%d/*.ipynb 2>/dev/null"):format(dir, run))
      path = ls:read("*l")
      ls:close()
      local nb = path and select(2, pcall(json.decode, seer.read_file(path)))
      if type(nb) == "table" and #nb.cells >= 2 then break end
      process.sleep_ms(100)
    end
    local nb = json.decode(seer.read_file(path))
    T.eq(#nb.cells, 2, ("run %d: the running cell is in the notebook"):format(run))
    T.contains(cell_text(nb.cells[2]), "partial output")
  end
end)

T.test("process.spawn{die_with_parent}: a seer child ends with a parent killed by -9 (an experiment's seer serve was orphaned)", function()
  local process = require "seer.process"
  local dir = T.tmpdir()
  seer.write_file(dir .. "/p.lua", [==[
local process = require "seer.process"
local code = 'require("seer.process").sleep_ms(60000)'
local a = process.spawn{ argv = { require("seer.jupyter").seer_binary(), "-e", code }, die_with_parent = true }
local b = process.spawn{ argv = { require("seer.jupyter").seer_binary(), "-e", code } }
io.stdout:write(a.pid, " ", b.pid, "\n") io.stdout:flush()
process.sleep_ms(60000)
]==])
  local c = process.spawn{ argv = { require("seer.jupyter").seer_binary(), dir .. "/p.lua" }, stdout = "pipe" }
  local line = c:read_line(10000) or ""
  local a, b = line:match("^(%d+) (%d+)$")
  T.ok(a, line)
  process.sleep_ms(300)
  c:kill(9)
  c:wait(5000)
  local function alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == 0 end
  for _ = 1, 50 do if not alive(a) then break end process.sleep_ms(100) end
  local a_alive, b_alive = alive(a), alive(b)
  os.execute("kill -9 " .. a .. " " .. b .. " 2>/dev/null")
  T.ok(not a_alive, "the child spawned with die_with_parent ended with its parent")
  T.ok(b_alive, "control: a child without it is orphaned (what die_with_parent prevents)")
end)

T.test("a local session's temporary workspace is removed at terminate unless the kernel wrote into it", function()
  local ws = W.Workspace{ libraries = { W.Library.from_code("tmpwslib", "return {}") } }
  local out = T.tmpdir()
  local s = exec.create_local_notebook_session(ws, { name = "tmpws-a", output_dir = out })
  local d1 = s.workspace_dir
  T.ok(d1:match("^/tmp/seer%-workspace%-"), d1)
  s:exec("print(1)")
  s:terminate()
  T.eq(io.open(d1), nil, "an untouched temporary workspace is removed (one was left per run)")
  local s2 = exec.create_local_notebook_session(ws, { name = "tmpws-b", output_dir = out })
  local d2 = s2.workspace_dir
  s2:exec("local f = io.open('result.csv', 'w') f:write('x') f:close()")
  s2:terminate()
  T.eq(seer.read_file(d2 .. "/result.csv"), "x", "what the kernel wrote there is kept")
  os.execute("rm -rf '" .. d2 .. "'")
end)

T.test("clear_output(wait) as a cell's last output: what stays in the notebook stays counted against the session's cap", function()
  local s = exec.create_local_notebook_session(nil, { name = "clearwait", output_dir = T.tmpdir() })
  local before = s:info().kept_output_bytes or 0
  -- a display, then a clear that waits for an output that never comes: Jupyter (and the
  -- notebook) keep showing the display, so it must stay counted (it was given back: a kernel
  -- could add a display per cell past the session's 1 GiB for ever)
  for _ = 1, 3 do
    s:exec('display.text(string.rep("D", 1024 * 1024)) display.clear{ wait = true }')
  end
  local kept = (s:info().kept_output_bytes or 0) - before
  T.ok(kept >= 3 * 1024 * 1024, ("%d bytes counted for three 1 MiB displays the notebook keeps"):format(kept))
  local nb = json.decode(seer.read_file(s.notebook_path))
  T.eq(#nb.cells[#nb.cells].outputs, 1, "the display is still in the notebook")
  -- a clear followed by an output clears at once, and gives the bytes back
  s:exec('display.text(string.rep("E", 1024 * 1024)) display.clear{ wait = true } print("after")')
  local kept2 = (s:info().kept_output_bytes or 0) - before
  T.ok(kept2 - kept < 4096, ("the cleared display was given back (%d more bytes)"):format(kept2 - kept))
  s:terminate()
end)

T.test("process.spawn{die_with_parent}: the child's own seer children run (the setting is not inherited)", function()
  local process = require "seer.process"
  local code = [[local p = io.popen(require("seer.jupyter").seer_binary() .. " -e 'print(40 + 2)'") io.stdout:write("got ", p:read("*a")) p:close()]]
  local c = process.spawn{ argv = { require("seer.jupyter").seer_binary(), "-e", code }, die_with_parent = true, stdout = "pipe" }
  T.eq(c:read_line(10000), "got 42", "a grandchild that inherited the parent's pid exited at once")
  c:wait(5000)
end)

T.test("resume_notebook / continue_notebook take a cell_timeout: a cell that loops for ever does not hold the resume for ever", function()
  local out = T.tmpdir()
  local s = exec.create_local_notebook_session(nil, { name = "loops", output_dir = out })
  s:exec("x = 1")
  s:exec("while true do end", { raise = false, timeout = 1 })
  local path = s.notebook_path
  s:terminate()
  local t0 = require("seer.process").now_ms()
  local r, info = exec.resume_notebook(path, { cell_timeout = 1 })
  T.ok(require("seer.process").now_ms() - t0 < 20000, "the resume ended")
  T.eq(info.cells_run, 2)
  T.eq(info.cells_failed, 1, "the looping cell was interrupted at its timeout")
  T.eq(r:exec("print(x)").text, "1\n")
  r:terminate()
  T.raises(function() exec.resume_notebook(path, { cell_timeout = 0 }) end, "cell_timeout must be a number of seconds > 0", true)
  T.raises(function() exec.continue_notebook(path, { cell_timout = 1 }) end, "unknown option 'cell_timout'", true)
end)

T.test("SIGTERM to a script whose cleanup never ends still ends it (SEER_SIGTERM_GRACE_S later)", function()
  -- timeout(1), systemd and kill send SIGTERM once: a script that caught the interrupt and kept
  -- going (or code stuck where it never returns to Lua) ran on forever
  local dir = T.tmpdir()
  -- stuck in C: system(3) waits for its child whatever signal comes, so Lua never runs again
  seer.write_file(dir .. "/stuck.lua", [==[
io.stdout:write("READY\n") io.stdout:flush()
os.execute("sleep 20")
]==])
  local process = require "seer.process"
  local c = process.spawn{ argv = { require("seer.jupyter").seer_binary(), dir .. "/stuck.lua" }, env = { SEER_SIGTERM_GRACE_S = "2" },
                           stdout = "pipe", stderr = "null" }
  T.eq(c:read_line(10000), "READY")
  local t0 = process.now_ms()
  c:kill(15)
  local ended = c:wait(10000)
  local took = process.now_ms() - t0
  if not ended then c:kill(9) c:wait(2000) end
  T.ok(ended, "the script ran on 10 s after SIGTERM")
  T.ok(took < 6000, ("it ended %d ms after SIGTERM (grace 2 s)"):format(took))
end)

-- Runs DIR/SCRIPT (in a session of its own, SEER_OUT=DIR/out), waits for its first line, sleeps
-- `after` seconds and sends it `sig`: "SIGTERM", "SIGHUP", "SIGHUP-group" (to its process group,
-- as a terminal's hangup is) or "SIGHUP-nohup" (SIGHUP, started with it ignored, as nohup does).
-- Returns {first, rc, took (seconds from the signal to the end), out}.
local function drive_signal(dir, script, sig, after)
  seer.write_file(dir .. "/drive_signal.py", [==[
import json, os, subprocess, sys, time, signal
seer, script, sig, after, out_dir = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
pre = (lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)) if sig == "SIGHUP-nohup" else None
p = subprocess.Popen([seer, script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     start_new_session=True, preexec_fn=pre, env=dict(os.environ, SEER_OUT=out_dir))
first = p.stdout.readline()
time.sleep(after)
if sig == "SIGHUP-group": os.killpg(p.pid, signal.SIGHUP)
else: p.send_signal(signal.SIGTERM if sig == "SIGTERM" else signal.SIGHUP)
t0 = time.time()
try:
    out = p.communicate(timeout=30)[0]
except subprocess.TimeoutExpired:
    p.kill()
    out = p.communicate()[0]
print(json.dumps({"first": first.decode(), "rc": p.returncode, "took": time.time() - t0, "out": out.decode(errors="replace")}))
]==])
  local p = io.popen(("python3 '%s/drive_signal.py' '%s' '%s/%s' %s %g '%s/out' 2>&1"):format(dir,
    require("seer.jupyter").seer_binary(), dir, script, sig, after, dir))
  local raw = p:read("*a")
  p:close()
  local ok, r = pcall(json.decode, raw:match("([^\n]*)\n?$"))
  T.ok(ok and type(r) == "table", raw)
  return r
end

T.test("a hangup (SIGHUP to the script or its process group) ends a script as Ctrl-C does; under nohup it is ignored", function()
  -- an SSH link or terminal that goes away: the run's summary and the running cell's output so
  -- far are kept, where SIGHUP's default action ended the process with neither
  local dir = T.tmpdir()
  seer.write_file(dir .. "/t.lua", ([==[
local X = require "seer.experiment"
local run = X.run{ name = "hup", dir = %q }
local s = seer.execution.create_local_notebook_session(nil, { name = "hup", output_dir = run.out_dir .. "/nb" })
s:exec("print('first cell')")
io.stdout:write("READY ", run.out_dir, "\n") io.stdout:flush()
local ok, err = pcall(s.exec, s, "print('partial output') io.stdout:flush() local t = os.clock() + 30 while os.clock() < t do end print('end')")
io.stdout:write("CLEANUP ", tostring(err), "\n") io.stdout:flush()
s:terminate()
error(err, 0)
]==]):format(dir))
  seer.write_file(dir .. "/nohup.lua", [==[
io.stdout:write("READY\n") io.stdout:flush()
jit.off()
local t = os.clock() + 1.5
while os.clock() < t do end
io.stdout:write("DONE\n")
]==])
  for _, how in ipairs{ "pid", "group" } do
    local r = drive_signal(dir, "t.lua", how == "group" and "SIGHUP-group" or "SIGHUP", 1.0)
    local run_dir = r.first:match("^READY (.-)\n$")
    T.ok(run_dir, r.first)
    T.eq(r.rc, 130, how .. ": " .. r.out)
    T.contains(r.out, "CLEANUP ")
    T.contains(r.out, "interrupted")
    T.eq(json.decode(seer.read_file(run_dir .. "/summary.json")).status, "interrupted", how)
    local ls = io.popen(("ls '%s'/nb/*.ipynb"):format(run_dir))
    local doc = read_nb(ls:read("*l"))
    ls:close()
    T.eq(#doc.cells, 2, how)
    T.contains(cell_text(doc.cells[2]), "partial output")
  end
  local r = drive_signal(dir, "nohup.lua", "SIGHUP-nohup", 0.3)
  T.eq(r.rc, 0, r.out)
  T.contains(r.out, "DONE")
end)

T.test("SIGTERM to a script ends it as Ctrl-C does: its cleanup runs and the running cell's output so far is saved", function()
  local dir = T.tmpdir()
  seer.write_file(dir .. "/t.lua", ([==[
local s = seer.execution.create_local_notebook_session(nil, { name = "term", output_dir = %q })
s:exec("print('first cell')")
io.stdout:write("READY\n") io.stdout:flush()
local ok, err = pcall(s.exec, s, "print('partial output') io.stdout:flush() local t = os.clock() + 30 while os.clock() < t do end print('end')")
io.stdout:write("CLEANUP ", tostring(err), "\n") io.stdout:flush()
s:terminate()
error(err, 0)
]==]):format(dir .. "/nb"))
  local r = drive_signal(dir, "t.lua", "SIGTERM", 1.0)
  T.eq(r.first, "READY\n", r.out)
  T.eq(r.rc, 130, r.out)
  T.ok(r.took < 15, ("the script took %.1f s to end after SIGTERM"):format(r.took))
  T.contains(r.out, "CLEANUP ")
  T.contains(r.out, "interrupted")
  local ls = io.popen(("ls '%s'/nb/*.ipynb"):format(dir))
  local path = ls:read("*l")
  ls:close()
  local doc = read_nb(path)
  T.eq(#doc.cells, 2)
  T.contains(cell_text(doc.cells[2]), "partial output")
  T.eq(doc.cells[2].metadata.execution_status, "error")
end)
