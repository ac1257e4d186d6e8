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
--- `\uNNNN` (`\UNNNNNNNN` past U+FFFF) too: the bidirectional overrides, embeddings and isolates
--- (U+202A-U+202E, U+2066-U+2069; "rm -rf \u202etxt.sgol" displays reversed), the direction
--- marks (U+200E, U+200F, U+061C), the line and paragraph separators (U+2028, U+2029), and every
--- character Unicode marks default-ignorable (drawn as nothing): the tag characters
--- U+E0000-U+E007F (which spell ASCII invisibly: "ignore the user" in tags shows nothing on a
--- terminal, yet a model reads it), U+200B-U+200F, U+2060-U+206F, the soft hyphen U+00AD,
--- U+FEFF, variation selectors (U+FE00-U+FE0F, U+E0100-U+E01EF: one after each visible
--- character hides a byte), U+034F, U+115F, U+1160, U+17B4, U+17B5, U+180B-U+180F, U+3164,
--- U+FFA0, U+FFF0-U+FFFB, U+1BCA0-U+1BCA3, U+1D173-U+1D17A and the rest of U+E0000-U+E0FFF.
--- Three of them shape visible text and stay where they do: the joiners U+200C and U+200D
--- right after a visible non-ASCII character (Indic conjuncts, Persian words, emoji sequences
--- such as a family), and U+FE0E/U+FE0F (text or emoji style) right after a visible character;
--- anywhere else, or repeated, they are shown too, so they cannot carry more than a bit per
--- visible character. Bytes that are not UTF-8 are shown as `\xNN`: a lone 0x9B is
--- CSI on a terminal that reads bytes as Latin-1, and text handed over in pieces must not join
--- into a command (see `pending_utf8`).
local M = {}

local function hex(c) return ("\\x%02x"):format(c:byte()) end

-- code points shown as \uNNNN: they reorder or hide text (above)
local HIDDEN = { [0x00AD] = true, [0x034F] = true, [0x061C] = true, [0x115F] = true, [0x1160] = true,
                 [0x17B4] = true, [0x17B5] = true, [0x2028] = true, [0x2029] = true, [0x3164] = true,
                 [0xFEFF] = true, [0xFFA0] = true }
local function range(lo, hi) for c = lo, hi do HIDDEN[c] = true end end
range(0x180B, 0x180F)
range(0x200B, 0x200F)
range(0x202A, 0x202E)
range(0x2060, 0x206F)
range(0xFE00, 0xFE0F)
range(0xFFF0, 0xFFFB)
range(0x1BCA0, 0x1BCA3)
range(0x1D173, 0x1D17A)
local function hidden(cp) return HIDDEN[cp] or (cp >= 0xE0000 and cp <= 0xE0FFF) end
-- Hidden characters that shape the visible one before them (see the module's comment).
local JOINER = { [0x200C] = true, [0x200D] = true }
local PRESENTATION = { [0xFE0E] = true, [0xFE0F] = true }

local function show_cp(cp) return cp > 0xFFFF and ("\\U%08x"):format(cp) or ("\\u%04x"):format(cp) end

-- A run of bytes >= 0x80 (`before` is the byte before it, or ""): well-formed UTF-8 characters
-- stay (but C1 controls and hidden ones are shown as \uNNNN); any other byte is shown as \xNN.
local function non_ascii(run, before)
  local out, i, n = {}, 1, #run
  -- what came just before: "ascii" (a visible ASCII character), "wide" (a visible non-ASCII
  -- one), "style" (U+FE0E/U+FE0F kept after one: a joiner may follow, as in an emoji sequence)
  -- or nil (anything shown escaped, another hidden character, a space, the start)
  local prev = before:match("^[!-~]$") and "ascii" or nil
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
      local show = cp <= 0x9F or hidden(cp)
      if show and JOINER[cp] and (prev == "wide" or prev == "style") then show = false end
      if show and PRESENTATION[cp] and (prev == "wide" or prev == "ascii") then show = false end
      out[#out + 1] = show and show_cp(cp) or run:sub(i, i + len - 1)
      prev = show and nil or PRESENTATION[cp] and "style" or not hidden(cp) and "wide" or nil
      i = i + len
    else
      out[#out + 1] = hex(run:sub(i, i))
      prev = nil
      i = i + 1
    end
  end
  return table.concat(out)
end

---The text with its terminal commands taken out (see the module's comment); other values are
---passed through tostring first.
---@param s any
---@return string
function M.safe(s)
  s = tostring(s)
  if not s:find("[%z\1-\8\11-\31\127-\255]") then return s end
  s = s:gsub("\27%[[%d;:]*m", ""):gsub("\r\n", "\n"):gsub("[%z\1-\8\11-\31\127]", hex)
  return (s:gsub("()([\128-\255]+)", function(at, run) return non_ascii(run, s:sub(at - 1, at - 1)) end))
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

---A writer for text that arrives in pieces (a model's deltas, a generation's stream, a kernel's
---output): each piece goes out through `safe`, and a UTF-8 character cut between two pieces is
---held back until it is whole, so it shows as itself rather than as `\xNN` bytes. Call it with
---nil to write what is held.
---@param write? fun(s: string) default io.write, then flush
---@return fun(piece: string|nil)
function M.stream(write)
  write = write or function(s) io.write(s) io.flush() end
  local held = ""
  return function(piece)
    local s = held .. (piece == nil and "" or tostring(piece))
    local k = piece == nil and 0 or M.pending_utf8(s)
    held = k > 0 and s:sub(-k) or ""
    s = s:sub(1, #s - k)
    if s ~= "" then write(M.safe(s)) end
  end
end

return M
