-- The live view's publish of one notebook snapshot (engine/net/http.c: the JSON check, the copy
-- and the server-sent-event text), beside seer.json.decode of the same text for scale.
-- Usage: seer tests/bench/live_publish.lua [CELLS OUTPUTS_PER_CELL] (default 100 x 200 display
-- outputs: a 1.5 MB notebook of 20,000 outputs).
local http = require "seer.core.http"
local json = require "seer.json"
local now = require("seer.core.host").now
local ncells, nouts = tonumber(arg[1] or 100), tonumber(arg[2] or 200)
local cells = {}
for i = 1, ncells do
  local outs = {}
  for j = 1, nouts do outs[j] = { output_type = "display_data", data = { ["text/plain"] = { "v" .. j } }, metadata = {} } end
  cells[i] = { cell_type = "code", source = { "print('x')\n", "x = " .. i }, metadata = { seer = { t = i } }, outputs = outs,
               execution_count = i }
end
local doc = json.encode({ cells = cells, metadata = { seer = { path = "nb/bench.ipynb" } }, nbformat = 4, nbformat_minor = 5 })
local srv = http.serve({ host = "127.0.0.1", port = 0, token = ("t"):rep(32) })
local N = 30
local t0 = now()
for _ = 1, N do srv:publish("bench", doc) end
local per = (now() - t0) / N * 1000
t0 = now()
for _ = 1, N do json.decode(doc) end
local dec = (now() - t0) / N * 1000
print(("notebook of %.2f MB (%d outputs): publish %.2f ms each; seer.json.decode %.2f ms each"):format(#doc / 1e6, ncells * nouts, per, dec))
srv:close()
