--- Text from a sandbox or a model, made safe to show on a terminal (docs/security.md,
--- "Terminals").
---
--- What a sandbox prints (tool results, logs, a kernel's output) and what a model writes reach
--- the user's terminal through `seer transcript view`, `seer sandbox logs`, the agent chat and
--- the experiments' progress lines. Escape sequences in that text are commands to the terminal:
--- they can clear the screen, rewrite or hide lines already shown (cursor moves, "\r", SGR 8
--- "conceal"), set the window title, write the clipboard (OSC 52), make links (OSC 8) or, on
--- some terminals, answer back as if typed. `safe` keeps the text readable and takes the
--- commands out: colours and styles (SGR, `ESC [ ... m`) are dropped, every other control
--- character is shown as `\xNN` (C1 controls, U+0080-U+009F, as `\u00NN`), "\r\n" becomes
--- "\n"; newline and tab stay. Invalid UTF-8 is left as it is (a UTF-8 terminal shows it as
--- replacement characters and runs no command for it).
local M = {}

local function hex(c) return ("\\x%02x"):format(c:byte()) end
local function c1(b) return ("\\u%04x"):format(b:byte()) end

---The text with its terminal commands taken out (see the module's comment); other values are
---passed through tostring first.
---@param s any
---@return string
function M.safe(s)
  s = tostring(s)
  if not s:find("[%z\1-\8\11-\31\127\194]") then return s end
  s = s:gsub("\27%[[%d;:]*m", ""):gsub("\r\n", "\n"):gsub("[%z\1-\8\11-\31\127]", hex)
  return (s:gsub("\194([\128-\159])", c1))
end

return M
