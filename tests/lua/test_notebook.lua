-- Notebook files (seer.notebook) and workspaces (seer.workspace), without a kernel: naming as
-- the reference, nbformat 4.5 validity checked by nbformat's own validator, stream merging,
-- clear_output, atomic saves, loading for resume, and the workspace's validation and docs.
local T = require "testing"
local NB = require "seer.notebook"
local W = require "seer.workspace"
local json = seer.json

local function validate(path)
  local cmd = ("/usr/bin/python3 -c 'import sys, nbformat; nbformat.validate(nbformat.read(sys.argv[1], 4))' '%s' 2>&1; echo \"__exit=$?\""):format(path)
  local p = io.popen(cmd)
  local out = p:read("*a")
  p:close()
  -- LuaJIT's popen:close() is true whatever the status: the shell prints it
  local code = tonumber(out:match("__exit=(%d+)\n?$"))
  return code == 0, (out:gsub("__exit=%d+\n?$", ""))
end

T.test("notebook names follow the reference and never overwrite", function()
  local d = T.tmpdir()
  local t = os.time{ year = 2026, month = 3, day = 4, hour = 5, min = 6 }
  T.eq(NB.unique_path(d, nil, t), d .. "/2026-03-04-05-06_Notebook.ipynb")
  local p = NB.unique_path(d, "steering probe", t)
  T.eq(p, d .. "/2026-03-04-05-06_steering_probe.ipynb")
  seer.write_file(p, "{}")
  T.eq(NB.unique_path(d, "steering probe", t), d .. "/2026-03-04-05-06_steering_probe_1.ipynb")
  seer.write_file(d .. "/2026-03-04-05-06_steering_probe_1.ipynb", "{}")
  T.eq(NB.unique_path(d, "steering probe", t), d .. "/2026-03-04-05-06_steering_probe_2.ipynb")
  T.eq(NB.unique_path(d, "../../etc/x", t), d .. "/2026-03-04-05-06_etc_x.ipynb")
end)

-- A sandbox can write a notebook folder inside its workspace, so it can fill the names the next
-- session would take: `<date>_x.ipynb`, `_x_1` ... `_x_100000`. Trying them in turn held the
-- notebook server (and every session on it) for 6 s per start, and the final error named the
-- folder's host path to the sandbox's client. A name now costs at most 81 tries (the first 64
-- numbers in order, then random ones), and no error names the folder.
T.test("notebook names take a bounded number of tries whatever the folder holds, and errors name no folder", function()
  local fs = require "seer.safe_fs"
  local real = fs.write_nofollow
  local calls = 0
  local function count(...) calls = calls + 1 return real(...) end
  local d = T.tmpdir()
  local t = os.time{ year = 2026, month = 3, day = 4, hour = 5, min = 6 }
  local base = "2026-03-04-05-06_x"
  seer.write_file(("%s/%s.ipynb"):format(d, base), "planted")
  for i = 1, 300 do seer.write_file(("%s/%s_%d.ipynb"):format(d, base, i), "planted") end
  fs.write_nofollow = count
  local ok, p = pcall(NB.unique_path, d, "x", t)
  fs.write_nofollow = real
  T.ok(ok, p)
  T.ok(calls <= 81, ("%d tries for one name"):format(calls))
  local prefix = ("%s/%s_"):format(d, base)
  local n = p:sub(1, #prefix) == prefix and tonumber(p:sub(#prefix + 1):match("^(%d+)%.ipynb$"))
  T.ok(n and n > 64, p)
  T.eq(require("seer.json").decode(seer.read_file(p)).nbformat, 4) -- reserved, not a planted file
  -- random numbers: two more names are distinct, each a fresh reservation
  local q = NB.unique_path(d, "x", t)
  T.ok(q ~= p and not q:find("_%d%d?%d?%.ipynb$"), q)

  -- every name taken (here by a stand-in that answers "exists"): an error at once, no path
  calls = 0
  fs.write_nofollow = function(path) calls = calls + 1 return nil, path .. " in the notebook folder: already exists", "exists" end
  local ok2, err = pcall(NB.unique_path, d, "x", t)
  fs.write_nofollow = real
  T.ok(not ok2)
  T.ok(calls <= 81, ("%d tries before giving up"):format(calls))
  T.contains(err, "no free notebook name for " .. base)
  T.ok(not tostring(err):find(d, 1, true), err)

  -- any other failure names the file and the reason, never the folder
  fs.write_nofollow = function(path) return nil, path .. " (in the notebook folder): Permission denied", "io" end
  local ok3, err3 = pcall(NB.unique_path, d, "x", t)
  fs.write_nofollow = real
  T.ok(not ok3)
  T.eq(err3, "cannot create the notebook " .. base .. ".ipynb in the notebook folder: Permission denied")
  local link = T.tmpdir() .. "/link"
  os.execute(("ln -s '%s' '%s'"):format(d, link))
  local ok4, err4 = pcall(NB.unique_path, link, "x", t)
  T.ok(not ok4)
  T.ok(not tostring(err4):find(d, 1, true) and not tostring(err4):find(link, 1, true), err4)
  T.contains(err4, "symbolic link")
end)

T.test("a notebook with every output kind validates with nbformat", function()
  local d = T.tmpdir()
  local nb = NB.new{ path = d .. "/a.ipynb" }
  local c = nb:add_code("x = 1\nprint(x)\n")
  nb:add_output(c, { output_type = "stream", name = "stdout", text = "1\n" })
  nb:add_output(c, { output_type = "stream", name = "stdout", text = "2\n" })
  nb:add_output(c, { output_type = "stream", name = "stderr", text = "warn\n" })
  nb:add_output(c, { output_type = "display_data", data = { ["image/png"] = "iVBORw0KGgo=", ["text/plain"] = "<image>" }, metadata = {} })
  nb:add_output(c, { output_type = "execute_result", execution_count = 1, data = { ["text/plain"] = "3" }, metadata = {} })
  nb:add_output(c, { output_type = "error", ename = "LuaError", evalue = "boom", traceback = json.array{ "a", "b" } })
  c.execution_count = 1
  c.metadata.execution_status = "error"
  nb:add_markdown("# Findings\n\nnothing yet")
  nb:add_code("") -- an empty pending cell
  nb:save()
  local ok, out = validate(nb.path)
  T.ok(ok, out)
  local doc = json.decode(seer.read_file(nb.path))
  T.eq(doc.nbformat, 4)
  T.eq(doc.nbformat_minor, 5)
  T.eq(#doc.cells, 3)
  T.eq(#doc.cells[1].outputs, 5, "consecutive stdout merged, stderr separate")
  T.eq(table.concat(doc.cells[1].outputs[1].text), "1\n2\n")
  T.eq(doc.cells[1].metadata.execution_status, "error")
  T.eq(doc.cells[3].metadata.execution_status, "pending")
  T.ok(doc.cells[1].id ~= doc.cells[2].id and doc.cells[2].id ~= doc.cells[3].id, "cell ids are unique")
  T.eq(doc.metadata.kernelspec.language, "lua")
end)

T.test("merging streams never changes the caller's output tables", function()
  local nb = NB.new{ path = T.tmpdir() .. "/m.ipynb" }
  local c = nb:add_code("x")
  local first = { output_type = "stream", name = "stdout", text = "a\n" }
  nb:add_output(c, first)
  nb:add_output(c, { output_type = "stream", name = "stdout", text = "b\n" })
  T.eq(first.text, "a\n", "the first output as returned to a client keeps its own text")
  T.eq(NB.join(c.outputs[1].text), "a\nb\n")
end)

T.test("a long stream merges in linear time and is written whole", function()
  local nb = NB.new{ path = T.tmpdir() .. "/long.ipynb" }
  local c = nb:add_code("x")
  local piece = string.rep("y", 1023) .. "\n"
  local t0 = os.clock()
  for i = 1, 20000 do nb:add_output(c, { output_type = "stream", name = "stdout", text = ("%05d"):format(i) .. piece }) end
  -- 20 MB merged: appending to one string would copy ~200 GB
  T.ok(os.clock() - t0 < 2, ("merging took %.1f s"):format(os.clock() - t0))
  nb:save()
  local doc = json.decode(seer.read_file(nb.path))
  local text = NB.join(doc.cells[1].outputs[1].text)
  T.eq(#text, 20000 * 1029)
  T.eq(text:sub(1, 5), "00001")
  T.eq(text:sub(-1029, -1025), "20000")
  local ok, out = validate(nb.path)
  T.ok(ok, out)
  -- the streamed writer (what the notebook server saves with) gives the same document
  local parts = {}
  nb:write_json(function(p) parts[#parts + 1] = p end, true)
  T.ok(#parts > 20000, "a large stream is written a piece at a time")
  T.eq(json.decode(table.concat(parts)), json.decode(nb:to_json(true)))
  -- the live view's snapshot shows the head and the tail of it
  local live = json.decode(nb:to_json(false, 4096))
  local shown = NB.join(live.cells[1].outputs[1].text)
  T.ok(#shown < 8192, "the snapshot is small")
  T.contains(shown, "bytes not shown here; the notebook file has all of it")
  T.eq(shown:sub(1, 5), "00001")
  T.eq(shown:sub(-1029, -1025), "20000")
end)

T.test("the live view's snapshot bounds stream outputs too (many streams of stdout and stderr in turn)", function()
  local nb = NB.new{ path = T.tmpdir() .. "/streams.ipynb" }
  local c = nb:add_code("x")
  local piece = string.rep("s", 64 * 1024 - 1) .. "\n"
  -- 200 outputs of 64 KiB (stdout and stderr in turn: each a separate output), each under the
  -- per-stream cut; with a budget of 2 MiB the snapshot must stay near it, not be 12.5 MiB
  for i = 1, 200 do nb:add_output(c, { output_type = "stream", name = i % 2 == 0 and "stdout" or "stderr", text = piece }) end
  local saved = NB.LIVE_MAX_OUTPUT_BYTES
  NB.LIVE_MAX_OUTPUT_BYTES = 2 * 1024 * 1024
  local ok, live = pcall(function() return nb:to_json(false, 512 * 1024) end)
  NB.LIVE_MAX_OUTPUT_BYTES = saved
  T.ok(ok, tostring(live))
  T.ok(#live < 3 * 1024 * 1024, ("the snapshot is %.1f MiB (budget 2 MiB)"):format(#live / 1048576))
  local doc = json.decode(live)
  T.eq(#doc.cells[1].outputs, 200, "every output is there, the older ones as notices")
  T.contains(NB.join(doc.cells[1].outputs[1].text), "not shown here (the live view shows the newest 2 MiB of outputs)")
  T.eq(NB.join(doc.cells[1].outputs[200].text), piece, "the newest are shown")
  -- the file keeps all of it
  nb:save()
  T.eq(NB.join(json.decode(seer.read_file(nb.path)).cells[1].outputs[1].text), piece)
end)

T.test("clear_output now and with wait", function()
  local nb = NB.new{ path = T.tmpdir() .. "/c.ipynb" }
  local c = nb:add_code("x")
  nb:add_output(c, { output_type = "stream", name = "stdout", text = "old\n" })
  nb:clear_outputs(c, true)
  T.eq(#c.outputs, 1, "wait keeps the output until the next one")
  nb:add_output(c, { output_type = "stream", name = "stdout", text = "new\n" })
  T.eq(#c.outputs, 1)
  T.eq(c.outputs[1].text, "new\n")
  nb:clear_outputs(c, false)
  T.eq(#c.outputs, 0)
end)

T.test("save is atomic and load reads back what was saved", function()
  local d = T.tmpdir()
  local nb = NB.new{ path = d .. "/n.ipynb" }
  nb:add_code("print('hi')")
  nb:save()
  local before = seer.read_file(nb.path)
  local again = NB.load(nb.path)
  T.eq(#again:code_cells(), 1)
  T.eq(NB.join(again:code_cells()[1].source), "print('hi')")
  again:save()
  T.eq(seer.read_file(nb.path), before, "load + save is the identity")
  -- no temporary files are left behind
  local p = io.popen("ls -a '" .. d .. "'")
  local listing = p:read("*a")
  p:close()
  T.eq(listing:gsub("%s+", " "), ". .. n.ipynb ")
end)

T.test("loading something that is not a notebook says what is wrong", function()
  local d = T.tmpdir()
  seer.write_file(d .. "/bad.ipynb", "{not json")
  T.raises(function() NB.load(d .. "/bad.ipynb") end, "is not a notebook (invalid JSON)", true)
  seer.write_file(d .. "/v3.ipynb", '{"nbformat": 3, "worksheets": []}')
  T.raises(function() NB.load(d .. "/v3.ipynb") end, "is not an nbformat 4 notebook", true)
  T.raises(function() NB.load(d .. "/missing.ipynb") end, "cannot read notebook", true)
  -- many tiny values ("[0,0,0,...") cost some 40 times the file's size once decoded: refused
  -- past notebook.MAX_VALUES before anything is built, and a caller may raise the bound
  seer.write_file(d .. "/many.ipynb", '{"nbformat": 4, "cells": [], "metadata": {"x": [' .. string.rep("0,", 99) .. '0]}}')
  T.raises(function() NB.load(d .. "/many.ipynb", { max_values = 100 }) end,
           "holds 109 values, more than max_values = 100 (arrays, objects, strings and keys, numbers and literals count); notebook.load(path, {max_values = N})", true)
  T.eq(#NB.load(d .. "/many.ipynb", { max_values = 109 }).doc.metadata.x, 100)
  T.eq(NB.MAX_VALUES, 4000000)
  -- a notebook may come from a sandbox's workspace: malformed cells are refused by name at load
  -- (they failed later, inside a save or a rerun, with a Lua indexing error)
  local cases = {
    { '{"nbformat": 4, "cells": [7]}', "cell 1 is a number, not an object" },
    { '{"nbformat": 4, "cells": {"x": 1}}', "cells must be a list; it has a key x" },
    { '{"nbformat": 4, "cells": [{"cell_type": "code", "source": "x"}, {"cell_type": "picture"}]}', "cell 2 has cell_type picture" },
    { '{"nbformat": 4, "cells": [{"cell_type": "code", "source": ["a", 1]}]}', "cell 1: source is not a string or a list of strings" },
    { '{"nbformat": 4, "cells": [{"cell_type": "code", "source": "", "outputs": "none"}]}', "cell 1: outputs is not a list" },
    { '{"nbformat": 4, "cells": [{"cell_type": "code", "source": "", "outputs": [3]}]}', "cell 1: output 1 is not an object with an output_type" },
    { '{"nbformat": 4, "cells": [{"cell_type": "code", "source": "", "outputs": [{"output_type": "stream", "text": {"a": 1}}]}]}',
      "cell 1: output 1's text is not a string or a list of strings" },
    { '{"nbformat": 4, "cells": [{"cell_type": "markdown", "source": "", "metadata": []}], "metadata": 5}', "metadata is not an object" },
    { '{"nbformat": 4, "cells": [{"cell_type": "markdown", "source": "", "id": 12}]}', "cell 1: id is not a string" },
  }
  for i, c in ipairs(cases) do
    local f = ("%s/m%d.ipynb"):format(d, i)
    seer.write_file(f, c[1])
    T.raises(function() NB.load(f) end, f .. " is not a valid notebook: " .. c[2], true)
  end
  -- the well-formed variants load and save: lists of lines, an empty outputs list, no metadata
  seer.write_file(d .. "/ok.ipynb", '{"nbformat": 4, "cells": [{"cell_type": "code", "source": ["a\\n", "b"], "outputs": ' ..
    '[{"output_type": "stream", "name": "stdout", "text": ["x\\n"]}]}, {"cell_type": "raw", "source": []}]}')
  local ok = NB.load(d .. "/ok.ipynb")
  T.eq(NB.join(ok.doc.cells[1].source), "a\nb")
  ok:save()
end)

T.test("Workspace validates its fields", function()
  T.raises(function() W.Workspace{ librarys = {} } end, 'unknown field "librarys"; fields: custom_init_code', true)
  T.raises(function() W.Workspace{ preload_models = "yes" } end, "Workspace.preload_models must be a boolean, not a string", true)
  T.raises(function() W.Workspace{ libraries = { "x.lua" } } end, "Workspace.libraries[1] is not a Library", true)
  T.raises(function() W.Workspace{ local_files = { "a" } } end, "Workspace.local_files[1] must be {local_path, workspace_path}", true)
  local w = W.Workspace{}
  T.eq(w.preload_models, true)
  T.eq(w.hidden_model_loading, true)
  T.eq(w:get_library_docs(), "")
end)

T.test("libraries: docs from the leading comment, install, get_library_docs format", function()
  local d = T.tmpdir()
  seer.write_file(d .. "/probe.lua", "--- Linear probes on the residual stream.\n--- fit(x, y) -> probe\nlocal M = {}\nreturn M\n")
  local a = W.Library.from_file(d .. "/probe.lua")
  T.eq(a.name, "probe")
  T.eq(a.docs, "Linear probes on the residual stream.\nfit(x, y) -> probe")
  local b = W.Library.from_code("helpers", "return { answer = 42 }")
  T.eq(b.docs, "")
  require("seer.process").mkdir_p(d .. "/pkg")
  seer.write_file(d .. "/pkg/init.lua", "--[[ A package. ]]\nreturn { sub = require 'pkg.sub' }\n")
  seer.write_file(d .. "/pkg/sub.lua", "return 7\n")
  local c = W.Library.from_directory(d .. "/pkg")
  T.eq(c.name, "pkg")
  T.eq(c.docs, "A package.")
  local ws = W.Workspace{ libraries = { a, b, c } }
  T.eq(ws:get_library_docs(), "# Available Libraries\n\n## probe\n\nLinear probes on the residual stream.\nfit(x, y) -> probe\n\n"
    .. "## helpers\n\nAvailable via: `require \"helpers\"`\n\n## pkg\n\nA package.\n")
  local target = d .. "/ws"
  ws:install(target)
  T.eq(seer.read_file(target .. "/helpers.lua"), "return { answer = 42 }")
  T.eq(seer.read_file(target .. "/pkg/sub.lua"), "return 7\n")
  T.raises(function() W.Library.from_directory(d) end, "has no init.lua", true)
  T.raises(function() W.Library.from_code("bad name", "") end, "must be a valid Lua module name", true)
end)

T.test("notebook names are reserved atomically: eight processes racing for one name get eight files", function()
  local dir = T.tmpdir()
  local SEER = require("seer.jupyter").seer_binary()
  local start = require("seer.process").now_ms() + 400
  local code = ([[local p = require("seer.process")
while p.now_ms() < %d do end
print(require("seer.notebook").unique_path(%q, "same name", 1795305000))]]):format(start, dir)
  local procs = {}
  for i = 1, 8 do procs[i] = io.popen(("'%s' -e '%s' 2>&1"):format(SEER, code:gsub("'", "'\\''"))) end
  local seen, n = {}, 0
  for _, p in ipairs(procs) do
    local path = p:read("*l")
    p:close()
    T.ok(path and path:find(dir, 1, true) == 1, tostring(path))
    T.ok(not seen[path], "two processes got " .. tostring(path))
    seen[path] = true
    n = n + 1
  end
  T.eq(n, 8)
  -- each reservation is a valid empty notebook until its first save
  for path in pairs(seen) do
    local doc = require("seer.json").decode(seer.read_file(path))
    T.eq(doc.nbformat, 4)
  end
  -- a link planted at the next name is skipped, not followed
  local canary = T.tmpdir() .. "/canary"
  seer.write_file(canary, "host file\n")
  local nb = require "seer.notebook"
  local base = os.date("%Y-%m-%d-%H-%M", 1795305000) .. "_linked"
  os.execute(("ln -s '%s' '%s/%s.ipynb'"):format(canary, dir, base))
  local p = nb.unique_path(dir, "linked", 1795305000)
  T.eq(p, ("%s/%s_1.ipynb"):format(dir, base))
  T.eq(seer.read_file(canary), "host file\n")
end)
