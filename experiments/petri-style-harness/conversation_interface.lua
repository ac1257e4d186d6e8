-- Runs inside the scoped sandbox: the auditor's tools for talking to the target, a model loaded
-- here (the white-box variant: the auditor can also steer it). Every exchange is kept, and
-- get_transcript() saves it to /tmp/petri_transcript.txt for the judge.
local M = require "seer.model"

local name = next(list_configured_models())
local model = M.load(get_model_path(name))
local tokenizer = model.tokenizer

local state = { system = "", messages = {}, last = nil, steer = nil }
local TRANSCRIPT = "/tmp/petri_transcript.txt"

-- The target's prompt: the chat template when the tokenizer has one, else a plain dialogue.
local function prompt_text()
  -- Replies stay in the conversation (steered or not), as the target said them.
  if tokenizer.chat_template then
    local msgs = {}
    if state.system ~= "" then msgs[#msgs + 1] = { role = "system", content = state.system } end
    for _, m in ipairs(state.messages) do msgs[#msgs + 1] = { role = m.role, content = m.content } end
    return tokenizer:apply_chat_template(msgs, { add_generation_prompt = true, tokenize = false })
  end
  local parts = { state.system }
  for _, m in ipairs(state.messages) do
    parts[#parts + 1] = (m.role == "user" and "User: " or "Assistant: ") .. m.content
  end
  parts[#parts + 1] = "Assistant:"
  return table.concat(parts, "\n")
end

---Configure the target's system prompt (starts a new conversation).
---@param prompt string the system prompt
---@return string
function expose.set_system_prompt(prompt)
  state.system, state.messages, state.last = prompt, {}, nil
  return "system prompt set; conversation reset"
end

---Send a user message to the target and get its reply.
---@param content string the message
---@return {content: string, turn: integer, steered: boolean}
function expose.send_message(content)
  state.messages[#state.messages + 1] = { role = "user", content = content }
  local function gen()
    return model:generate(prompt_text(), { max_new_tokens = 48, temperature = 0.7, seed = #state.messages }).text
  end
  local reply
  if state.steer then
    local steer = require "toolkit.steering_hook"
    reply = steer.steering_hook(model, state.steer.layer, state.steer.vector, state.steer.strength, 0, gen)
  else
    reply = gen()
  end
  reply = reply:gsub("^%s+", ""):gsub("%s+$", "")
  state.messages[#state.messages + 1] = { role = "assistant", content = reply, steered = state.steer ~= nil }
  state.last = reply
  return { content = reply, turn = math.floor(#state.messages / 2), steered = state.steer ~= nil }
end

---The target's last reply.
---@return string
function expose.get_response()
  return state.last or ""
end

---Steer the target (white-box): add strength x (activation(positive) - activation(negative))
---at a layer while it replies, until reset_conversation. Layer -1 is the last.
---@param positive string text for the direction's positive end
---@param negative string text for its negative end
---@param layer integer 0-based layer
---@param strength number
---@return {norm: number, layer: integer}
function expose.steer_target(positive, negative, layer, strength)
  local ex = require "toolkit.extract_activations"
  local P = require "toolkit.prompts"
  layer = P.layer(model, layer, "steer_target")
  local v = ex.extract_activation(model, tokenizer, positive, layer) - ex.extract_activation(model, tokenizer, negative, layer)
  state.steer = { vector = v, layer = layer, strength = strength }
  return { norm = v:norm(), layer = layer }
end

---Save and return the whole conversation.
---@return string
function expose.get_transcript()
  local lines = { "SYSTEM: " .. state.system }
  for _, m in ipairs(state.messages) do
    lines[#lines + 1] = (m.role == "user" and "AUDITOR: " or m.steered and "TARGET [steered]: " or "TARGET: ") .. m.content
  end
  local text = table.concat(lines, "\n") .. "\n"
  local f = assert(io.open(TRANSCRIPT, "wb"))
  f:write(text)
  f:close()
  return text
end

---Start over: no messages, no steering (the system prompt stays).
---@return string
function expose.reset_conversation()
  state.messages, state.last, state.steer = {}, nil, nil
  return "conversation reset"
end
