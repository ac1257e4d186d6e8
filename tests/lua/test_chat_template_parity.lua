-- Chat-template parity with transformers itself (render_jinja_template, what
-- apply_chat_template calls), goldens made by tests/parity/chat_goldens.py: every fixture
-- conversation of six families with add_generation_prompt both ways. Where transformers
-- raises, seer must raise with the same message.
local T = require "testing"
local CT = require "seer.chat_template"

local here = seer.script_dir()
local golden = seer.json.decode(seer.read_file(os.getenv("SEER_CHAT_PARITY") or (here .. "/../parity/chat_templates.json")))
local families = {}
for f in pairs(golden.families) do families[#families + 1] = f end
table.sort(families)

for _, family in ipairs(families) do
  local g = golden.families[family]
  T.test(("chat template parity: %s (%d renders)"):format(family, #g.cases), function()
    local template = CT.load_template(here .. "/../fixtures/tokenizers/" .. family)
    for _, c in ipairs(g.cases) do
      local opts = { add_generation_prompt = c.add_generation_prompt, tools = c.tools }
      for k, v in pairs(c.template_kwargs or {}) do opts[k] = v end
      if c.error then
        local msg = T.raises(function() CT.apply(template, g.tokens, c.messages, opts) end)
        T.contains(msg, c.error, family .. " " .. c.id)
      else
        local ok, text = pcall(CT.apply, template, g.tokens, c.messages, opts)
        T.ok(ok, family .. " " .. c.id .. ": " .. tostring(text))
        T.eq(text, c.text, family .. " " .. c.id)
      end
    end
  end)
end
