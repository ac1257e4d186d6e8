-- seer mcp notebook as an agent sees it, through seer's MCP client against the real server:
-- cell numbers (read_notebook's header names each code cell's index, the cell_index edit_cell
-- takes as the reference's does: code cells only);
-- a way on after the kernel dies (restart_kernel, named by every KernelDied; a resume whose
-- re-run kills the kernel says so); read_notebook on a long cell (its head, its tail and its
-- error, paged with output_offset). SIGTERM to the server: tests/integration/test_mcp_signals.py.
local T = require "testing"
local exec = require "seer.execution"
local mcp = require "seer.mcp.client"
local jupyter = require "seer.jupyter"
local json = seer.json

local function connect(args, env)
  local a = { "mcp", "notebook" }
  for _, x in ipairs(args or {}) do a[#a + 1] = x end
  return mcp.connect({ notebook = { type = "stdio", command = jupyter.seer_binary(), args = a, env = env } }, { timeout = 60 })
end

local function text_of(r)
  local t = {}
  for _, b in ipairs(r.content or {}) do if b.type == "text" then t[#t + 1] = b.text end end
  return table.concat(t)
end

local function ok(r, what)
  T.ok(not r.isError, (what or "the call") .. " failed: " .. text_of(r))
  return r
end

local function cells_of(path)
  local doc = json.decode(seer.read_file(path))
  local out = {}
  for i, c in ipairs(doc.cells) do
    out[i] = { type = c.cell_type, source = type(c.source) == "table" and table.concat(c.source) or c.source }
  end
  return out
end

---------------------------------------------------------------------------------------------
-- 1. one numbering

T.test("cell numbers: read_notebook names each code cell's edit_cell index; edit_cell edits that cell (code cells, as the reference)", function()
  local dir = T.tmpdir()
  local c = connect({ "--output-dir", dir })
  local st = ok(c:call("start_new_session", { experiment_name = "numbers" }))
  local sid, path = st.structuredContent.session_id, st.structuredContent.notebook_path
  local A = ok(c:call("execute_code", { session_id = sid, code = 'a = "A"' }))
  T.eq(ok(c:call("add_markdown", { session_id = sid, content = "## notes" })).structuredContent.cell_number, 1)
  local B = ok(c:call("execute_code", { session_id = sid, code = 'b = "B"' }))
  local C = ok(c:call("execute_code", { session_id = sid, code = 'c = "C"\nlocal t = nil\nreturn t.x' }))
  T.eq({ A.structuredContent.cell_index, A.structuredContent.cell_number }, { 0, 0 })
  T.eq({ B.structuredContent.cell_index, B.structuredContent.cell_number }, { 1, 2 },
    "B is code cell 1 (edit_cell's index) and cell 2 among all cells")
  T.eq({ C.structuredContent.cell_index, C.structuredContent.cell_number }, { 2, 3 })
  -- the kernel's "[cell 3]" is its third run, not a cell number: the agent reads it as a run
  T.contains(text_of(C), "LuaError: [run 3]:3: attempt to index")
  T.ok(not text_of(C):find("[cell ", 1, true), text_of(C))
  local read = text_of(ok(c:call("read_notebook", { session_id = sid })))
  T.contains(read, '## cell 2 (code cell 1: edit_cell cell_index=1, run 2, complete)\nb = "B"')
  T.contains(read, '## cell 3 (code cell 2: edit_cell cell_index=2, run 3, error)\nc = "C"')
  T.contains(read, "## cell 1 (markdown)\n## notes")
  -- read from the middle: the code-cell index still counts the code cells before start
  T.contains(text_of(ok(c:call("read_notebook", { session_id = sid, start = 3 }))), "## cell 3 (code cell 2: edit_cell cell_index=2,")

  -- the index read_notebook names is the cell edit_cell edits (an agent that took the header's
  -- all-cells number "2" for B overwrote C until the header named the index)
  local e = ok(c:call("edit_cell", { session_id = sid, cell_index = 1, code = 'b = "B2"' }))
  T.eq({ e.structuredContent.cell_index, e.structuredContent.cell_number }, { 1, 2 })
  local cells = cells_of(path)
  T.eq(cells[3].source, 'b = "B2"', "B was edited")
  T.eq(cells[4].source, 'c = "C"\nlocal t = nil\nreturn t.x', "C is untouched")
  e = ok(c:call("edit_cell", { session_id = sid, cell_index = 2, code = 'c = "C2"' }))
  T.eq(e.structuredContent.status, "ok")
  T.eq(cells_of(path)[4].source, 'c = "C2"')
  -- one past the end is refused and changes nothing
  local before = seer.read_file(path)
  local r = c:call("edit_cell", { session_id = sid, cell_index = 9, code = "x = 1" })
  T.ok(r.isError)
  T.contains(text_of(r), "IndexError")
  T.eq(seer.read_file(path), before, "the notebook is as it was")
  T.eq(text_of(ok(c:call("execute_code", { session_id = sid, code = "print(a .. b .. c)" }))), "AB2C2\n")

  -- negative numbers count code cells from the end; without a number, the last code cell
  T.eq(ok(c:call("add_markdown", { session_id = sid, content = "more notes" })).structuredContent.cell_number, 5)
  e = ok(c:call("edit_cell", { session_id = sid, cell_index = -2, code = 'c = "C3"' }))
  T.eq(e.structuredContent.cell_index, 2)
  e = ok(c:call("edit_cell", { session_id = sid, code = "return 40 + 2" }))
  T.eq(e.structuredContent.cell_index, 3, "the last code cell, not the markdown after it")
  T.eq(text_of(e), "42\n")
  cells = cells_of(path)
  T.eq({ cells[4].source, cells[5].source, cells[6].source }, { 'c = "C3"', "return 40 + 2", "more notes" })
  c:close()
end)

T.test("cell numbers: the Lua API and the agent's tools count code cells alike", function()
  local dir = T.tmpdir()
  local s = exec.create_local_notebook_session(nil, { name = "api", output_dir = dir })
  T.eq(s:exec("x = 1").cell_index, 0)
  T.eq(s:add_markdown("note"), 1)
  T.eq(s:exec("y = 2").cell_index, 1, "exec_result.cell_index counts code cells (docs/notebook.md)")
  local c = connect({}, { SEER_SESSION_ID = s.session_id, SEER_NOTEBOOK_URL = s.jupyter_url })
  local r = ok(c:call("execute_code", { session_id = s.session_id, code = "z = 3" }))
  T.eq({ r.structuredContent.cell_index, r.structuredContent.cell_number }, { 2, 3 })
  T.eq(s:edit_cell("y = 20", 1).cell_index, 1)
  ok(c:call("edit_cell", { session_id = s.session_id, cell_index = 1, code = "y = 21" }))
  local cells = cells_of(s.notebook_path)
  T.eq({ cells[1].source, cells[2].source, cells[3].source, cells[4].source }, { "x = 1", "note", "y = 21", "z = 3" })
  c:close()
  s:terminate()
end)

---------------------------------------------------------------------------------------------
-- 2. after the kernel dies

T.test("a dead kernel: every KernelDied names restart_kernel, which works; a resume that kills the kernel says so", function()
  local dir = T.tmpdir()
  local c = connect({ "--output-dir", dir })
  local names = {}
  for _, t in ipairs(c:tools()) do names[t.name] = t end
  T.ok(names.restart_kernel, "a restart_kernel tool")
  local st = ok(c:call("start_new_session", { experiment_name = "dies" }))
  local sid, path = st.structuredContent.session_id, st.structuredContent.notebook_path
  ok(c:call("execute_code", { session_id = sid, code = "keep = 123" }))
  local r = ok(c:call("execute_code", { session_id = sid, code = 'print("about to exit") io.stdout:flush() os.exit(3)' }))
  local want = ('restart_kernel(session_id="%s")'):format(sid)
  T.eq(r.structuredContent.status, "error")
  T.eq(r.structuredContent.error.ename, "KernelDied")
  T.contains(r.structuredContent.error.evalue, want)
  T.contains(text_of(r), "about to exit")
  T.contains(text_of(r), want)
  T.ok(not text_of(r):find("restart the session", 1, true), text_of(r))
  -- every later call on the session says the same
  for _, call in ipairs{ { "execute_code", { session_id = sid, code = "print(keep)" } },
                         { "edit_cell", { session_id = sid, cell_index = 0, code = "keep = 1" } },
                         { "interrupt", { session_id = sid } } } do
    local x = c:call(call[1], call[2])
    T.contains(text_of(x), "KernelDied", call[1])
    T.contains(text_of(x), want, call[1])
    T.ok(not text_of(x):find("restart the session", 1, true), call[1] .. ": " .. text_of(x))
    T.ok(not text_of(x):find(".lua:", 1, true), call[1] .. ": no source position: " .. text_of(x))
  end
  -- its notebook cannot be resumed while the dead session holds it: the refusal names the ways on
  r = c:call("start_session_resume_notebook", { notebook_path = path })
  T.ok(r.isError)
  T.contains(text_of(r), "NotebookInUse")
  T.contains(text_of(r), want)
  T.contains(text_of(r), ('shutdown_session(session_id="%s")'):format(sid))
  -- restart_kernel: a new kernel, the earlier cells' variables gone, the notebook kept
  r = ok(c:call("restart_kernel", { session_id = sid }))
  T.eq(r.structuredContent.state, "idle")
  T.contains(text_of(r), "new kernel")
  T.eq(text_of(ok(c:call("execute_code", { session_id = sid, code = "print(keep, 1 + 1)" }))), "nil\t2\n")
  T.eq(#cells_of(path), 3)

  -- a resume whose re-run kills the kernel: the result says the kernel died, in which cell, and the way on
  ok(c:call("shutdown_session", { session_id = sid }))
  r = ok(c:call("start_session_resume_notebook", { notebook_path = path }))
  local rid = r.structuredContent.session_id
  T.eq(r.structuredContent.state, "dead")
  T.eq(r.structuredContent.kernel_died.cell_number, 1)
  T.eq(r.structuredContent.kernel_died.cells_not_run, 1)
  T.contains(text_of(r), "The kernel DIED while re-running cell 1 (the kernel exited with status 3)")
  T.contains(text_of(r), ('restart_kernel(session_id="%s")'):format(rid))
  T.contains(text_of(r), ('edit_cell(session_id="%s", cell_index=1'):format(rid))
  T.ok(not text_of(r):find("Run code with execute_code", 1, true), "not told to run code in a dead session")
  r = ok(c:call("execute_code", { session_id = rid, code = "print(1)" }))
  T.contains(text_of(r), ('restart_kernel(session_id="%s")'):format(rid))
  ok(c:call("restart_kernel", { session_id = rid }))
  ok(c:call("edit_cell", { session_id = rid, cell_index = 1, code = "keep = 456" }))
  T.eq(text_of(ok(c:call("execute_code", { session_id = rid, code = "print(keep)" }))), "456\n")
  c:close()
end)

---------------------------------------------------------------------------------------------
-- 3. read_notebook on a long cell

-- The body of one output page (between its first line and its closing line).
local function page_body(t)
  return t:match("^[^\n]*\n(.*)\n%[characters %d+ to %d+ of %d+ shown; the next page")
      or t:match("^[^\n]*\n(.*)\n%[the end of cell")
end

T.test("read_notebook on a long cell: its head, its tail and its error, what was cut, and pages through all of it", function()
  local dir = T.tmpdir()
  local c = connect({ "--output-dir", dir, "--max-output", "2000" }) -- an answer holds about 4000 characters
  local sid = ok(c:call("start_new_session", { experiment_name = "long" })).structuredContent.session_id
  ok(c:call("execute_code", { session_id = sid, code = 'print("short")' }))
  local r = ok(c:call("execute_code", { session_id = sid,
    code = 'for i = 1, 3000 do print(("line %05d %s"):format(i, ("x"):rep(20))) end\nerror("late failure after long output")' }))
  T.eq(r.structuredContent.truncated, true)

  local t = text_of(ok(c:call("read_notebook", { session_id = sid, start = 1, limit = 1 })))
  T.ok(#t < 6000, "bounded: " .. #t)
  T.contains(t, "line 00001 ")
  T.contains(t, "line 03000 ", "the tail")
  T.contains(t, "late failure after long output", "the error")
  T.contains(t, "## cell 1 (code cell 1: edit_cell cell_index=1, run 2, error)")
  T.contains(t, "LuaError: [run 2]:2: late failure after long output")
  local cut = t:match("%[%.%.%. (%d+) characters of this cell's output not shown %(characters %d+ to %d+ of %d+%); read them with read_notebook%(session_id, start=1, output_offset=%d+%)")
  T.ok(cut and tonumber(cut) > 80000, "says how much was cut and how to read it: " .. t:sub(1, 200))
  T.contains(text_of(r), "read_notebook(session_id, start=1, output_offset=0)", "the cut execute_code result says how to read it all")

  -- the whole notebook: each cell bounded, the error still there
  t = text_of(ok(c:call("read_notebook", { session_id = sid })))
  T.ok(#t < 6000, "bounded: " .. #t)
  T.contains(t, "## cell 0 (code cell 0: edit_cell cell_index=0, run 1, complete)\nprint(\"short\")\n-- outputs:\nshort")
  T.contains(t, "late failure after long output")

  -- pages: every line once, in order, each page bounded, the error on every page
  local offset, lines, pages = 0, {}, 0
  while offset do
    local p = ok(c:call("read_notebook", { session_id = sid, start = 1, output_offset = offset }))
    local pt = text_of(p)
    pages = pages + 1
    T.ok(#pt < 4000 + 1500, "a page is bounded: " .. #pt)
    T.contains(pt, "late failure after long output")
    local body = page_body(pt)
    T.ok(body, "a page: " .. pt:sub(1, 200))
    for n in body:gmatch("line (%d%d%d%d%d) ") do lines[#lines + 1] = tonumber(n) end
    T.eq(p.structuredContent.output_offset, offset)
    local nxt = p.structuredContent.next_output_offset
    offset = type(nxt) == "number" and nxt or nil
    T.ok(pages < 100, "paging ends")
  end
  T.ok(pages > 20, pages)
  T.eq(#lines, 3000)
  for i = 1, 3000 do if lines[i] ~= i then T.eq(lines[i], i, "line order") end end

  local bad = c:call("read_notebook", { session_id = sid, start = 1, output_offset = 10 ^ 7 })
  T.ok(bad.isError)
  T.contains(text_of(bad), "past the end of cell 1's output")
  ok(c:call("add_markdown", { session_id = sid, content = "notes" }))
  bad = c:call("read_notebook", { session_id = sid, start = 2, output_offset = 0 })
  T.ok(bad.isError)
  T.contains(text_of(bad), "cell 2 is a markdown cell")

  -- many long cells: the answer stops at its bound and says where the rest starts
  for i = 1, 4 do ok(c:call("execute_code", { session_id = sid, code = ("for i = 1, 400 do print(%d, i) end"):format(i) })) end
  local all = ok(c:call("read_notebook", { session_id = sid }))
  t = text_of(all)
  T.ok(#t < 6000, "bounded: " .. #t)
  local nxt = all.structuredContent.next_start
  T.ok(type(nxt) == "number" and nxt < 7, tostring(nxt))
  T.contains(t, ("read them with read_notebook(session_id, start=%d)"):format(nxt))
  t = text_of(ok(c:call("read_notebook", { session_id = sid, start = nxt })))
  T.contains(t, ("## cell %d (code"):format(nxt))
  c:close()
end)
