-- For make bench's throughput scripts: what their timed runs take from a computed prompt
-- (core.shared_prefills: prompts, beginnings, blocks) must stay nothing, or a run that skipped
-- work it is timed for would print figures too high. guard() snapshots the counts now; the
-- function it returns raises (naming the script and the counts) if they moved since.
local core = require("seer.core.model")
local function taken() return table.concat({ core.shared_prefills() }, "/") end
return function()
  local taken0 = taken()
  return function()
    if taken() ~= taken0 then
      error(("%s: the timed runs took prompts from a cache (core.shared_prefills %s -> %s): the figures would be high")
        :format(arg[0], taken0, taken()), 0)
    end
  end
end
