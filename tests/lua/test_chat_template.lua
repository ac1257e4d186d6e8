-- Tests of seer.chat_template: every golden chat case of the tokenizer fixtures rendered
-- byte for byte (cases that must raise, raise with the expected message), load_template on the
-- fixture layouts, the Lua-to-variables conversion, and error reporting through Lua.
local T = require "testing"
local CT = require "seer.chat_template"
local json = require "seer.json"
local seer = require "seer"

local root = seer.script_dir() .. "/../fixtures/tokenizers/"
local FAMILIES = { "gemma2", "gemma3", "llama3", "qwen2.5", "smollm2", "mistral-v0.3" }

for _, fam in ipairs(FAMILIES) do
  T.test("chat_template: golden cases " .. fam, function()
    local template, tokens = CT.load_template(root .. fam)
    local cases = json.decode(seer.read_file(root .. fam .. "/golden-cases.json")).chat
    T.ok(#cases > 0, "no cases")
    local passed = 0
    for _, c in ipairs(cases) do
      local opts = { add_generation_prompt = c.add_generation_prompt }
      for k, v in pairs(c.template_kwargs or {}) do opts[k] = v end
      if c.error then
        local msg = T.raises(function() CT.apply(template, tokens, c.messages, opts) end, nil)
        T.contains(msg, "raise_exception: " .. c.error_message, fam .. "/" .. c.id)
      else
        T.eq(CT.apply(template, tokens, c.messages, opts), c.text, fam .. "/" .. c.id)
      end
      passed = passed + 1
    end
    T.eq(passed, #cases)
  end)
end

T.test("chat_template: load_template reads tokens as strings or {content=...}", function()
  local dir = T.tmpdir()
  seer.write_file(dir .. "/tokenizer_config.json", json.encode({
    chat_template = { { name = "tool_use", template = "T" }, { name = "default", template = "D{{ bos_token }}" } },
    bos_token = { content = "<s>", lstrip = false },
    eos_token = "</s>",
    pad_token = json.null,
  }))
  local t, toks = CT.load_template(dir)
  T.eq(t, "D{{ bos_token }}")
  T.eq(toks, { bos_token = "<s>", eos_token = "</s>" })
  local t2 = CT.load_template(dir .. "/tokenizer_config.json")
  T.eq(t2, t)
  T.eq(CT.render(t, toks), "D<s>")
end)

T.test("chat_template: load_template prefers chat_template.jinja", function()
  local t, toks = CT.load_template(root .. "smollm2")
  T.contains(t, "SmolLM")
  T.eq(toks, {})
  T.raises(function() CT.load_template(T.tmpdir()) end, "no chat template")
end)

T.test("chat_template: Lua values become Python values", function()
  local out = CT.render("{{ a }}|{{ b }}|{{ c }}|{{ d }}|{{ e }}|{{ f is none }}|{{ g is defined }}|{{ h }}|{{ i|tojson }}",
    { a = { 1, 2.5, "x" }, b = true, c = { k = "v" }, d = 3, e = 0.5, f = json.null, h = {}, i = json.object({}) })
  T.eq(out, "[1, 2.5, 'x']|True|{'k': 'v'}|3|0.5|True|False|[]|{}")
end)

T.test("chat_template: errors come back as Lua errors", function()
  T.raises(function() CT.render("{% if %}", {}) end, "syntax error at line 1, column 7", true)
  T.raises(function() CT.render("{{ raise_exception('boom') }}", {}) end, "chat_template: raise_exception: boom", true)
  T.raises(function() CT.render("{{ x.y }}", {}) end, "undefined: 'x' is undefined", true)
  T.raises(function() CT.render("{{ 'a' + 1 }}", {}) end, "type error", true)
  T.raises(function() CT.render("{{ a }}", { a = { 1, x = 2 } }) end, "cannot convert vars")
  T.raises(function() CT.render("{{ a }}", { a = print }) end, "cannot convert vars")
end)

T.test("chat_template: limits stop runaway templates", function()
  T.raises(function() CT.render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {}) end,
    "limit: more than", true)
  T.raises(function() CT.render("{% set s = 'x' * 100000 %}{% for i in range(100000) %}{{ s }}{% endfor %}", {}) end,
    "limit: output longer than", true)
  T.raises(function() CT.render("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", {}) end, "limit:", true)
end)
