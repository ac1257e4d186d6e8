-- Shared by the batched-generation tests (test_model_batch.lua on the CPU, test_cuda_batch.lua on
-- a GPU): each sequence of a batch generated with per-sequence hooks against the same sequence
-- generated alone with the same hooks, and the unhooked ones against a batch without hooks.
local T = require "testing"

local M = {}

local function join(t) return table.concat(t, ",") end

---@param m table the model
---@param name string for the messages
---@param seqs integer[][] the prompts
---@param outs table generate_batch's results with the hooks
---@param plain table generate_batch's results without them
---@param hooks table<integer, table> the hook list of each hooked sequence
---@param opts fun(i: integer): table generate's options for sequence i alone
function M.against_alone(m, name, seqs, outs, plain, hooks, opts)
  local changed = 0
  for i, s in ipairs(seqs) do
    local alone
    if hooks[i] then
      alone = m:with_hooks(hooks[i], function() return m:generate(s, opts(i)) end)
    else
      alone = m:generate(s, opts(i))
    end
    T.eq(join(outs[i].ids), join(alone.ids), ("%s: sequence %d"):format(name, i))
    if join(outs[i].ids) ~= join(plain[i].ids) then changed = changed + 1 end
    if not hooks[i] then T.eq(join(outs[i].ids), join(plain[i].ids), name .. ": an unhooked sequence is untouched") end
  end
  T.ok(changed >= 2, name .. ": the interventions changed at least two continuations (else this test checks nothing)")
end

return M
