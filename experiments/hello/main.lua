-- The offline demo: what the engine can do today, end to end, in one script. It grows into a
-- full offline investigation (model, hooks, notebook, agent replay) as seer grows.
local seer = require "seer"
local json = seer.json

local here = seer.script_dir()
local task = seer.read_file(here .. "/task.md")

print("== seer " .. seer.version .. " on " .. jit.version .. " (" .. jit.os .. "/" .. jit.arch .. ")")
print("task: " .. task:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", ""))

-- A record of the kind experiments write: nested, with explicit empty arrays and nulls.
local record = {
  experiment = "hello",
  engine = { seer = seer.version, luajit = jit.version, jit = jit.status() },
  layers = { 0, 4, 8 },
  notes = json.array({}),
  missing = json.null,
}
local text = json.encode(record, { indent = 2 })
print("\n== record as JSON")
print(text)
local back = json.decode(text)
assert(back.experiment == "hello" and back.layers[3] == 8 and back.missing == json.null)
assert(json.encode(back) == json.encode(record), "JSON round trip changed the record")

-- Time encode + decode of a larger payload: 20k rows of mixed values.
local rows = {}
for i = 1, 20000 do
  rows[i] = { id = i, token = "tok" .. i, logit = math.sin(i) * 10, top = { i % 7, i % 11, i % 13 } }
end
local t0 = seer.now()
local big = json.encode(rows)
local t1 = seer.now()
local parsed = json.decode(big)
local t2 = seer.now()
assert(#parsed == #rows and parsed[12345].token == "tok12345")
print(("\n== %d rows, %.1f MB of JSON: encode %.1f ms, decode %.1f ms"):format(
  #rows, #big / 1e6, (t1 - t0) * 1000, (t2 - t1) * 1000))

-- Results are written atomically next to the script's outputs.
local out_dir = os.getenv("SEER_OUT") or "/tmp"
local out = out_dir .. "/seer-hello-result.json"
seer.write_file(out, json.encode({ ok = true, rows = #rows, bytes = #big }, { indent = 2 }) .. "\n")
print("\nwrote " .. out)
