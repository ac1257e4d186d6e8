-- Runs inside the scoped sandbox: the auditor's tools for talking to the target. White-box
-- (default): the target is a model loaded here, and the auditor can also steer it. Black-box
-- (PETRI_TARGET_URL set): the target is an API model behind an OpenAI-compatible endpoint
-- (PETRI_TARGET_MODEL, key in PETRI_TARGET_KEY), reached with toolkit.openai_client. Every
-- exchange is kept, and get_transcript() saves it to /tmp/petri_transcript.txt for the judge.
local api_url = os.getenv("PETRI_TARGET_URL")
local black_box = api_url ~= nil and api_url ~= ""
local model, tokenizer, api
if black_box then
  api = require("toolkit.openai_client").new{ base_url = api_url, api_key = os.getenv("PETRI_TARGET_KEY") or os.getenv("OPENROUTER_API_KEY") }
else
  local name = next(list_configured_models())
  model = require("seer.model").load(get_model_path(name))
  tokenizer = model.tokenizer
end

local state = { system = "", messages = {}, last = nil, steer = nil }
local TRANSCRIPT = "/tmp/petri_transcript.txt"

-- The target's prompt: the chat template when the tokenizer has one, else a plain dialogue.
local function prompt_text() -- white-box only
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
    if black_box then
      local msgs = {}
      if state.system ~= "" then msgs[1] = { role = "system", content = state.system } end
      for _, m in ipairs(state.messages) do msgs[#msgs + 1] = { role = m.role, content = m.content } end
      return (api:complete(os.getenv("PETRI_TARGET_MODEL"), msgs, { max_tokens = 48, temperature = 0.7, seed = #state.messages }))
    end
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
  if black_box then error("steer_target: the target is an API model (black-box): there are no activations to steer", 2) end
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
