--- seer.progress: the one-line progress display of long operations. On a terminal (stderr is a
--- tty) it rewrites one line at most five times a second and ends it with a newline; anywhere
--- else (a pipe, a file, a notebook kernel) it prints nothing. `enabled = false` turns it off.
---
--- ```lua
--- local bar = require("seer.progress").new("patch_sweep", opts.progress)
--- for i = 1, n do ...; bar:update("layer %d/%d", i, n) end
--- bar:finish("layer %d/%d", n, n)
--- ```
local M = {}

---@class seer.Progress
---@field update fun(self: seer.Progress, fmt: string, ...: any) shows "<where>: <text>" (throttled; always the first and a forced one)
---@field finish fun(self: seer.Progress, fmt: string, ...: any) shows the final state whatever the throttle says, then ends the line
---@field done fun(self: seer.Progress) ends the line (once; nothing when nothing was shown)

local Progress = {}
Progress.__index = Progress

---A progress line for `where` (the operation's name). Shown only on a terminal, and not when
---`enabled` is false.
---@param where string
---@param enabled? boolean default true
---@return seer.Progress
function M.new(where, enabled)
  local show = enabled ~= false and require("seer.core.host").isatty(2)
  return setmetatable({ where = where, show = show, shown = false, last = -math.huge }, Progress)
end

function Progress:update(fmt, ...)
  if not self.show then return end
  local now = require("seer").now()
  if self.shown and now - self.last < 0.2 then return end
  self.last, self.shown = now, true
  local text = self.where .. ": " .. fmt:format(...)
  -- spaces over what a longer previous line left (no escape codes: a dumb terminal shows them)
  local pad = math.max(0, (self.width or 0) - #text)
  self.width = #text
  io.stderr:write("\r", text, (" "):rep(pad))
end

---The final state, shown whatever the throttle says, then the newline.
function Progress:finish(fmt, ...)
  if not self.show then return end
  self.last = -math.huge
  self:update(fmt, ...)
  self:done()
end

function Progress:done()
  if self.shown then io.stderr:write("\n") end
  self.shown, self.show = false, false
end

return M
