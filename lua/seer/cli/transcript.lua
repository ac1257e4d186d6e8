--- `seer transcript view FILE`: an agent transcript (JSONL, docs/harness.md) as a readable log:
--- the system prompt and tools, each user message, each assistant turn with its tool calls and
--- results, retries, errors, usage and cost, and the result. A transcript cut short (the host
--- was killed) shows what had streamed of the unfinished turn; a last line cut in half is noted.
local json = require "seer.json"

local M = {}

local USAGE = [[
usage: seer transcript view FILE [--full]

Prints an agent transcript as a readable log. Tool results longer than 2000 characters are
cut unless --full is given. A file with no transcript event in it is an error (exit 1); a
transcript whose last line was cut short (its writer was killed) is shown with a note.]]

-- The event types the harness writes (docs/harness.md, "Messages"): a file with none of them
-- is not a transcript.
local EVENT_TYPES = {
  run_start = true, user = true, request = true, text_delta = true, thinking_delta = true, tool_use_start = true,
  retry = true, assistant = true, usage = true, tool_call = true, tool_result = true, interrupted = true,
  error = true, result = true,
}

local function indent(text, prefix)
  return (prefix .. tostring(text):gsub("\n", "\n" .. prefix))
end

local function cut(s, n, full)
  s = tostring(s or "")
  if full or #s <= n then return s end
  return s:sub(1, n) .. ("... [%d more characters]"):format(#s - n)
end

local function content_text(content, full)
  if type(content) == "string" then return cut(content, 2000, full) end
  local parts = {}
  for _, c in ipairs(content or {}) do
    if c.type == "text" then parts[#parts + 1] = c.text
    elseif c.type == "image" then parts[#parts + 1] = ("[image %s]"):format(c.source and c.source.media_type or "")
    else parts[#parts + 1] = json.encode(c) end
  end
  return cut(table.concat(parts, "\n"), 2000, full)
end

-- replayed: a replay's usage and cost are the recording's (no model was called)
local function usage_line(u, cost, replayed)
  u = u or {}
  local s = ("in %d, out %d"):format(u.input_tokens or 0, u.output_tokens or 0)
  if (u.cache_read_input_tokens or 0) > 0 or (u.cache_creation_input_tokens or 0) > 0 then
    s = s .. (", cache read %d, cache write %d"):format(u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0)
  end
  if type(cost) == "number" then s = s .. (", $%.4f"):format(cost) end
  if replayed == true then s = s .. " as recorded (a replay: no model was called)" end
  return s
end

---Writes the readable log of the transcript at path to out (default stdout).
---@param path string
---@param full? boolean
---@param out? file*
---@return integer bad lines shown as notes (not JSON, or an event seer cannot show)
---@return string|nil err when no line of the file is a transcript event (nothing is written then)
function M.view(path, full, out)
  -- The whole view is built first and redacted once: a secret split across deltas (or an old
  -- transcript written before it was declared) is whole only in the assembled text.
  local real_out = out or io.stdout
  local parts = {}
  out = { write = function(self, ...) for _, s in ipairs({ ... }) do parts[#parts + 1] = tostring(s) end return self end }
  local bad, events, lines = M._view(path, full, out)
  if events == 0 and lines > 0 then
    -- nothing here is a transcript: one message, not a note for every line
    return bad, ("%s is not an agent transcript: none of its %d line(s) is a transcript event (a JSON object per line "
      .. "with a \"type\" such as run_start, assistant, tool_result or result; docs/harness.md). "
      .. "Transcripts are the .jsonl files a run writes (run_agent's transcript option)"):format(path, lines)
  end
  -- tool results are a sandbox's output and the rest a model's: shown without the escape
  -- sequences that would command the terminal (seer.terminal); redacted after that, so a secret
  -- that colour codes had split is whole again when it is looked for
  local text = require("seer.terminal").safe(table.concat(parts))
  local secrets = require("seer.harness").environment_secrets()
  if #secrets > 0 then text = require("seer.core.harness").redact(text, secrets) end
  real_out:write(text)
  return bad
end

function M._view(path, full, out)
  local f, why = io.open(path, "r")
  if not f then
    io.stderr:write(("seer transcript: cannot read %s (%s)\n"):format(path, why))
    os.exit(1)
  end
  local probe, read_err = f:read(0)
  if not probe and read_err then
    f:close()
    io.stderr:write(("seer transcript: cannot read %s (%s)\n"):format(path, read_err))
    os.exit(1)
  end
  local function w(...) out:write(...) out:write("\n") end
  local streamed = {}   -- text of the turn in progress, from its deltas
  local streamed_turn
  local n, bad, events, lines = 0, 0, 0, 0
  for line in f:lines() do
    n = n + 1
    if line:match("%S") then lines = lines + 1 end
    local ok, ev = pcall(json.decode, line)
    if ok and type(ev) == "table" and EVENT_TYPES[ev.type] then events = events + 1 end
    if not ok or type(ev) ~= "table" then
      if line:match("%S") then bad = bad + 1; w(("[line %d is not a whole JSON event: %s]"):format(n, cut(line, 80))) end
    else
      local shown, why = pcall(function()
        local t = ev.type
        local turn = ev.turn
        if t == "run_start" then
          w(("== agent '%s' · %s · %s · %s"):format(ev.agent or "?", ev.provider or "?", ev.model or "?",
            ev.time and os.date("%Y-%m-%d %H:%M:%S", math.floor(ev.time)) or ""))
          if ev.replay then w("   replaying " .. ev.replay) end
          if ev.system and ev.system ~= "" then w("-- system prompt"); w(indent(cut(ev.system, 4000, full), "   ")) end
          local names = {}
          for _, tool in ipairs(ev.tools or {}) do names[#names + 1] = tool.name end
          w("-- tools: " .. (#names > 0 and table.concat(names, ", ") or "(none)"))
        elseif t == "user" then
          w(""); w("[user]"); w(indent(ev.text or "", "   "))
        elseif t == "text_delta" then
          if streamed_turn ~= turn then streamed, streamed_turn = {}, turn end
          streamed[#streamed + 1] = ev.text
        elseif t == "retry" then
          streamed = {}
          w(("[retry] attempt %s failed: %s; retrying in %.2f s"):format(tostring(ev.attempt), ev.reason or "?", ev.wait_s or 0))
        elseif t == "assistant" then
          streamed, streamed_turn = {}, nil
          w(""); w(("[assistant · turn %s · %s]"):format(tostring(turn), tostring(ev.stop_reason)))
          for _, b in ipairs(ev.message and ev.message.content or {}) do
            if b.type == "text" then w(indent(b.text, "   "))
            elseif b.type == "thinking" then w(indent("(thinking) " .. cut(b.thinking, 2000, full), "   "))
            elseif b.type == "redacted_thinking" then w("   (redacted thinking)")
            elseif b.type == "tool_use" then
              w(("   -> %s %s"):format(b.name, b.seer_invalid_input and ("(invalid arguments) " .. b.seer_invalid_input)
                or json.encode(b.input or {})))
            else w("   [" .. tostring(b.type) .. "]") end
          end
        elseif t == "usage" then
          if ev.usage_known == false then
            -- what the provider reported was not a count (the harness's note says what it was)
            w("   (usage unknown" .. (type(ev.note) == "string" and (": " .. ev.note) or "") .. ")")
          else
            w("   (" .. usage_line(ev.usage, ev.cost_usd, ev.replayed) .. ")")
          end
        elseif t == "tool_result" then
          local head = ("   <- %s%s%s"):format(ev.name or "?", ev.is_error and " (error)" or "",
            ev.duration_s and (" in %.2f s"):format(ev.duration_s) or "")
          w(head); w(indent(content_text(ev.content, full), "      "))
        elseif t == "interrupted" then
          w("[interrupted by the user during the " .. tostring(ev.during) .. "]")
        elseif t == "error" then
          w("[error] " .. tostring(ev.message))
        elseif t == "result" then
          if #streamed > 0 then
            w(""); w(("[assistant · turn %s · incomplete]"):format(tostring(streamed_turn))); w(indent(table.concat(streamed), "   "))
            streamed = {}
          end
          w("")
          -- transcripts written before results of failed runs carried a duration: say unknown, not 0.0 s
          w(("[result] %s after %s turn(s), %s; %s"):format(tostring(ev.reason), tostring(ev.turns),
            type(ev.duration_s) == "number" and ("%.1f s"):format(ev.duration_s) or "duration unknown",
            usage_line(ev.usage, ev.cost_usd, ev.replayed)))
          if ev.error then w("   " .. tostring(ev.error)) end
        end
      end)
      if not shown then
        -- a field of the wrong kind (a transcript edited or written by something else)
        bad = bad + 1
        w(("[line %d: a %s event seer cannot show: %s]"):format(n, cut(json.encode(ev.type), 40),
          (tostring(why):gsub("^[^:]*:%d+: ", ""))))
      end
    end
  end
  f:close()
  if #streamed > 0 then
    w(""); w(("[assistant · turn %s · incomplete: the transcript ends here]"):format(tostring(streamed_turn)))
    w(indent(table.concat(streamed), "   "))
  end
  if n == 0 then w("(the transcript is empty)") end
  return bad, events, lines
end

function M.main(cmd, ...)
  if cmd == nil then -- no subcommand: a usage error (exit 2), as for any other missing argument
    io.stderr:write(USAGE, "\n")
    os.exit(2)
  end
  if cmd == "-h" or cmd == "--help" or cmd == "help" then
    print(USAGE)
    return
  end
  if cmd ~= "view" then
    io.stderr:write(("seer transcript: unknown command %q\n%s\n"):format(cmd, USAGE))
    os.exit(2)
  end
  local path, full
  for _, a in ipairs({ ... }) do
    if a == "--full" then full = true
    elseif a:sub(1, 1) == "-" or path then
      io.stderr:write(("seer transcript view: unexpected argument %s\n%s\n"):format(a, USAGE))
      os.exit(2)
    else path = a end
  end
  if not path then
    io.stderr:write("seer transcript view: FILE is missing\n" .. USAGE .. "\n")
    os.exit(2)
  end
  local _, err = M.view(path, full)
  if err then
    io.stderr:write("seer transcript view: " .. err .. "\n")
    os.exit(1)
  end
end

return M
