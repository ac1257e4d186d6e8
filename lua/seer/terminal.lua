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
--- "\n"; newline and tab stay. Characters that reorder or hide what is shown are shown as
--- `\uNNNN` too: the bidirectional overrides, embeddings and isolates (U+202A-U+202E,
--- U+2066-U+2069; "rm -rf \u202etxt.sgol" displays reversed), the direction marks (U+200E,
--- U+200F, U+061C), the line and paragraph separators (U+2028, U+2029), and the invisible
--- U+200B, U+2060 and U+FEFF. Bytes that are not UTF-8 are shown as `\xNN`: a lone 0x9B is
--- CSI on a terminal that reads bytes as Latin-1, and text handed over in pieces must not join
--- into a command (see `pending_utf8`).
local M = {}

local function hex(c) return ("\\x%02x"):format(c:byte()) end

---The text with its terminal commands taken out (see the module's comment); other values are
---passed through tostring first.
---@param s any
---@return string
-- code points shown as \uNNNN: they reorder or hide text (above)
local HIDDEN = { [0x061C] = true, [0x200B] = true, [0x200E] = true, [0x200F] = true, [0x2028] = true, [0x2029] = true,
                 [0x2060] = true, [0xFEFF] = true }
for c = 0x202A, 0x202E do HIDDEN[c] = true end
for c = 0x2066, 0x2069 do HIDDEN[c] = true end

-- A run of bytes >= 0x80: well-formed UTF-8 characters stay (but C1 controls and HIDDEN ones
-- are shown as \uNNNN); any other byte is shown as \xNN.
local function non_ascii(run)
  local out, i, n = {}, 1, #run
  while i <= n do
    local b = run:byte(i)
    local len, cp, min = 0, nil, 0
    if b >= 0xC2 and b <= 0xDF then len, cp, min = 2, b - 0xC0, 0x80
    elseif b >= 0xE0 and b <= 0xEF then len, cp, min = 3, b - 0xE0, 0x800
    elseif b >= 0xF0 and b <= 0xF4 then len, cp, min = 4, b - 0xF0, 0x10000 end
    if len > 0 and i + len - 1 <= n then
      for k = 1, len - 1 do
        local c = run:byte(i + k)
        if c < 0x80 or c > 0xBF then cp = nil break end
        cp = cp * 64 + (c - 0x80)
      end
      if cp and (cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF)) then cp = nil end
    else
      cp = nil
    end
    if cp then
      out[#out + 1] = (cp <= 0x9F or HIDDEN[cp]) and ("\\u%04x"):format(cp) or run:sub(i, i + len - 1)
      i = i + len
    else
      out[#out + 1] = hex(run:sub(i, i))
      i = i + 1
    end
  end
  return table.concat(out)
end

function M.safe(s)
  s = tostring(s)
  if not s:find("[%z\1-\8\11-\31\127-\255]") then return s end
  s = s:gsub("\27%[[%d;:]*m", ""):gsub("\r\n", "\n"):gsub("[%z\1-\8\11-\31\127]", hex)
  return (s:gsub("[\128-\255]+", non_ascii))
end

---How many bytes at the end of s are the start of a UTF-8 character that is not complete yet
---(0 to 3): a caller that shows text as it arrives in pieces keeps them for the next piece, so
---a character split across two pieces (0xC2 | 0x9B: CSI) is judged whole.
---@param s string
---@return integer
function M.pending_utf8(s)
  local n = #s
  for k = 1, math.min(3, n) do
    local b = s:byte(n - k + 1)
    if b < 0x80 then return 0 end
    if b >= 0xC0 then
      local need = b >= 0xF0 and 4 or b >= 0xE0 and 3 or 2
      return need > k and k or 0
    end
  end
  return 0
end

return M
