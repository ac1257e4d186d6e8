--- seer.backends: what the remote sandbox backends share (docs/backends.md).
---
---   local backends = require "seer.backends"
---   local sandboxes = backends.start_all({ env.Sandbox(c1), env.Sandbox(c2), env.Sandbox(c3) }, { name = "agent" })
---
--- `start_all` starts several sandboxes at once: each remote start waits on its own link
--- process (ssh connection, copy, queue, remote start), so they overlap instead of adding up.
---@class seerbackends
local M = {}

local ssh = require "seer.backends.ssh"
local process = require "seer.process"
local net = require "seer.net"

---Starts the sandboxes (not started yet) together; returns them started. opts is what
---`start` takes (a name gets "-1", "-2", ... appended), or a list of such tables, one per
---sandbox. When one fails, the others are terminated and its error is raised.
---@param sandboxes seersandbox.Sandbox[]
---@param opts? table|table[]
---@return seersandbox.Sandbox[]
function M.start_all(sandboxes, opts)
  if type(sandboxes) ~= "table" or #sandboxes == 0 then error("start_all(sandboxes, opts): sandboxes is a list of env.Sandbox(config)", 2) end
  local cos, errs = {}, {}
  for i, s in ipairs(sandboxes) do
    if type(s) ~= "table" or type(s.start) ~= "function" then error(("start_all: sandboxes[%d] is not an env.Sandbox"):format(i), 2) end
    local o = opts
    if type(opts) == "table" and opts[1] ~= nil then o = opts[i] end
    if type(o) == "table" and o.name and not (type(opts) == "table" and opts[1] ~= nil) then
      o = { name = o.name .. "-" .. i, workspace = o.workspace }
    end
    local co = coroutine.create(function() return s:start(o) end)
    ssh.parallel[co] = true
    cos[i] = co
  end
  local left = #cos
  while left > 0 do
    local fds = {}
    for i, co in ipairs(cos) do
      if coroutine.status(co) == "suspended" then
        local ok, err = coroutine.resume(co)
        if not ok then errs[i] = err end
        if coroutine.status(co) == "dead" then left = left - 1 end
      end
      local link = sandboxes[i].link
      if link and coroutine.status(co) ~= "dead" then local o = link:fds(); if o >= 0 then fds[#fds + 1] = o end end
    end
    if left > 0 then
      if #fds > 0 then net.poll(fds, 50) else process.sleep_ms(20) end
    end
  end
  for i in pairs(errs) do
    for _, s in ipairs(sandboxes) do pcall(s.terminate, s) end
    error(("start_all: sandboxes[%d]: %s"):format(i, tostring(errs[i])), 2)
  end
  return sandboxes
end

return M
