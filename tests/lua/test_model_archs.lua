-- The Llama-family architectures (llama, mistral, qwen2, qwen3) on the random-weight parity
-- models: greedy generation, which decodes one token at a time through the KV cache (and past
-- mistral's 5-token sliding window), picks at every step the argmax of one full forward over
-- the whole sequence. Parity with transformers itself is test_parity.lua.
local T = require "testing"

local dir = seer.script_dir() .. "/../parity/models"

for _, name in ipairs({ "llama", "mistral", "qwen2", "qwen3" }) do
  T.test("cached greedy decoding matches full forwards: " .. name, function()
    local model = seer.model.load(dir .. "/" .. name, { tokenizer = false })
    local prompt = { 1, 17, 88, 3, 44 } -- none of the four models stops early on it
    local out = model:generate(prompt, { max_new_tokens = 16 })
    T.eq(#out.ids, 16, name .. ": stopped early (eos), so the test would check less")
    local seq = {}
    for _, id in ipairs(prompt) do seq[#seq + 1] = id end
    for i = 1, #out.ids - 1 do seq[#seq + 1] = out.ids[i] end
    local want = model:forward(seq):argmax(2):totable() -- 0-based ids, one per position
    for i, id in ipairs(out.ids) do
      T.eq(id, want[#prompt + i - 1], ("%s: generated token %d"):format(name, i))
    end
  end)
end
