---Work to do when the script ends, however it ends: normally, by an uncaught error or Ctrl-C
---(the host runs it before it closes the Lua state, in a whole state: no finalizer has run),
---or by `os.exit(code)` (wrapped here so that it runs the same work first).
---What ends a run's records uses it: an experiment's unfinished runs get their ledger and a
---summary saying how they ended (seer.experiment), unfinished agents a result in their
---transcripts (seer.harness).
---
---   require("seer.exit").on_exit(function(how) ... end)
---
---Each function runs once, the last registered first, each in a pcall (one that fails does not
---stop the others). `how.error` is the first line of the error the script ended with
---("interrupted" for Ctrl-C, SIGTERM or a hangup; nil after a normal end or os.exit);
---`how.exit_code` is os.exit's code when the script called it (nil otherwise).
local core = require "seer.core.host"

local M = {}

---@class seerexit.how
---@field error? string the first line of the error the script ended with
---@field exit_code? any the code given to os.exit, when the script called it

local handlers = {}
local ran = false

local function run_all(how)
  if ran then return end
  ran = true
  for i = #handlers, 1, -1 do pcall(handlers[i], how) end
end

-- Called by the host (engine/host/host.c, seer_host_close) before lua_close, on every way a
-- script ends but os.exit: work done from a finalizer while the state closes runs in a state
-- half taken apart (stop 65: a cleanup loop spinning there), so none of seer's is done there.
function M._at_close()
  run_all({ error = core.script_error() })
end

local real_exit = os.exit
---@diagnostic disable-next-line: duplicate-set-field
os.exit = function(code, close)
  run_all({ exit_code = code == nil and true or code })
  return real_exit(code, close)
end

---Runs fn(how) when the script ends (see the module's description).
---@param fn fun(how: seerexit.how)
function M.on_exit(fn)
  if type(fn) ~= "function" then error("seer.exit.on_exit: takes a function", 2) end
  handlers[#handlers + 1] = fn
end

return M
