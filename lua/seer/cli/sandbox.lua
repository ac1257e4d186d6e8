--- `seer sandbox list | logs ID | terminate ID... | terminate --all | snapshots`: the local
--- sandboxes of this user, from any terminal (docs/sandbox.md).
local M = {}

local S = require "seer.sandbox"
local process = require "seer.process"

local USAGE = [[usage: seer sandbox list
       seer sandbox logs ID [-n LINES] [-f] [--service NAME]
       seer sandbox terminate ID... | --all
       seer sandbox snapshots
       seer sandbox ssh-link | remote-start   (run by the ssh backend, not by hand: docs/backends.md)
       seer sandbox k8s-transport | k8s-delete | curve-serve   (run by the kubernetes backend)]]

-- A usage error: the message and the usage on stderr, exit status 2, no traceback.
local function usage_error(msg)
  io.stderr:write(msg, "\n", USAGE, "\n")
  os.exit(2)
end

local function age(t)
  local s = os.time() - (t or os.time())
  if s < 120 then return s .. "s" end
  if s < 7200 then return math.floor(s / 60) .. "m" end
  return math.floor(s / 3600) .. "h"
end

local function list()
  local all = S.list()
  if #all == 0 then print("no running sandboxes"); return 0 end
  print(("%-28s %-8s %-8s %-6s %s"):format("ID", "OWNER", "KEEPER", "AGE", "CONFIG"))
  for _, s in ipairs(all) do
    print(("%-28s %-8s %-8s %-6s %s"):format(s.id, s.detached and "detached" or tostring(s.owner_pid), tostring(s.keeper_pid), age(s.created),
      (s.config or ""):sub(1, 80)))
  end
  return 0
end

local function logs(args)
  local id, n, follow, service = nil, 50, false, nil
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "-n" then
      n = tonumber(args[i + 1])
      if not n or n ~= math.floor(n) or n < 1 or n > 1e9 then
        usage_error(("seer sandbox logs: -n needs a whole number of lines from 1 (got %s)"):format(tostring(args[i + 1])))
      end
      i = i + 1
    elseif a == "-f" then follow = true
    elseif a == "--service" then
      service = args[i + 1] or usage_error("seer sandbox logs: --service needs a NAME")
      i = i + 1
    elseif a:sub(1, 1) == "-" then usage_error("seer sandbox logs: unknown option " .. a)
    elseif id then usage_error("seer sandbox logs: one sandbox at a time (got " .. id .. " and " .. a .. ")")
    else id = a end
    i = i + 1
  end
  if not id then usage_error("seer sandbox logs: which sandbox? (seer sandbox list shows the ids)") end
  -- The log folder is the sandbox's to write: read beneath it with no link followed, never a
  -- fifo, at most 1 MiB at a time (seer.safe_fs).
  local root, rel = S.log_file(id, service)
  if not root then
    io.stderr:write(("seer sandbox logs: no sandbox %s%s (seer sandbox list shows the running ones)\n"):format(id,
      service and (" with a service " .. service) or ""))
    return 1
  end
  local text, size = root:read(rel, { max = 1048576, tail = true })
  if not text then
    io.stderr:write(("seer sandbox logs: %s\n"):format(size))
    return 1
  end
  -- The log is the sandbox's writing: on a terminal its escape sequences are shown, not obeyed
  -- (seer.terminal); into a pipe or a file it goes byte for byte.
  local tty = require("seer.core.host").isatty(1)
  local show = tty and require("seer.terminal").safe or tostring
  -- On a terminal, a character the sandbox has written only part of is left for the next read,
  -- so it is judged whole (0xC2 then 0x9B, written apart, is CSI); into a pipe, bytes as they are.
  local pending = tty and require("seer.terminal").pending_utf8 or function() return 0 end
  local held = follow and pending(text) or 0
  text = text:sub(1, #text - held)
  local lines = {}
  for l in text:gmatch("[^\n]*\n?") do if l ~= "" then lines[#lines + 1] = l end end
  io.stdout:write(show(table.concat(lines, "", math.max(1, #lines - n + 1))))
  io.stdout:flush()
  local offset = size - held
  while follow do
    local more, total, code = root:read(rel, { max = 1048576, offset = offset })
    if not more and code == "toobig" then
      more, total = root:read(rel, { max = 1048576, tail = true }) -- grew by more than 1 MiB: its end
      if more then offset = total - #more end
    end
    if not more then break end -- removed, or replaced by a link or a fifo
    if total < offset then offset = 0 -- truncated: start again
    elseif #more > pending(more) then
      local whole = more:sub(1, #more - pending(more))
      io.stdout:write(show(whole)); io.stdout:flush(); offset = offset + #whole
    else
      if not S.log_file(id, service) then break end
      process.sleep_ms(200)
    end
  end
  return 0
end

local function terminate(args)
  if #args == 0 then usage_error("seer sandbox terminate: which sandbox? give ids or --all") end
  if args[1] == "--all" and #args > 1 then usage_error("seer sandbox terminate: --all takes no ids") end
  for _, a in ipairs(args) do
    if a ~= "--all" and a:sub(1, 1) == "-" then usage_error("seer sandbox terminate: unknown option " .. a) end
  end
  local ids = {}
  if args[1] == "--all" then
    for _, s in ipairs(S.list()) do ids[#ids + 1] = s.id end
    if #ids == 0 then print("no running sandboxes"); return 0 end
  else
    ids = args
  end
  local rc = 0
  for _, id in ipairs(ids) do
    if S.terminate_id(id) then print("terminated " .. id)
    else io.stderr:write(("seer sandbox terminate: no sandbox %s\n"):format(id)); rc = 1 end
  end
  return rc
end

local function snapshots()
  local all = S.snapshots()
  if #all == 0 then print("no snapshots in " .. S.snapshot_root()); return 0 end
  for _, s in ipairs(all) do print(("%-28s %-24s %s"):format(s.id, s.sandbox_id or "", s.description or "")) end
  return 0
end

function M.main(cmd, ...)
  local args = { ... }
  local rc
  if (cmd == "list" or cmd == "ls" or cmd == "snapshots") and #args > 0 then
    usage_error(("seer sandbox %s: unexpected argument %s"):format(cmd, args[1]))
  end
  if cmd == "list" or cmd == "ls" then rc = list()
  elseif cmd == "logs" then rc = logs(args)
  elseif cmd == "terminate" or cmd == "kill" then rc = terminate(args)
  elseif cmd == "snapshots" then rc = snapshots()
  elseif cmd == "ssh-link" or cmd == "remote-start" then rc = require("seer.backends.ssh").main(cmd)
  elseif cmd == "k8s-transport" or cmd == "k8s-delete" or cmd == "curve-serve" then rc = require("seer.backends.kubernetes").main(cmd, args)
  elseif cmd == nil then io.stderr:write(USAGE, "\n"); rc = 2 -- no subcommand: a usage error
  elseif cmd == "-h" or cmd == "--help" or cmd == "help" then print(USAGE); rc = 0
  else usage_error(("seer sandbox: unknown command %q"):format(cmd)) end
  if rc ~= 0 then os.exit(rc) end
end

return M
