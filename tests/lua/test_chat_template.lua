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

-- The work budget (docs/chat_template.md, "Limits"). The iteration cap bounds how often a loop
-- body runs, not what one run costs: `{% if 'b' in s %}` over a 60 MB string in each of the
-- permitted iterations took hours (one seer serve request held every client). Every operation
-- now charges a budget by what it costs; these cases all ran for seconds to hours before it.
local BUDGET_ERR = "limit: the render exceeded its work budget %(%d+ units%)"

T.test("chat_template: work budget: rescanning a long string in every iteration is refused quickly", function()
  for _, op in ipairs({ "'b' in s", "s.find('b') > 0", "s.count('b') > 0", "s == t", "s.replace('a', 'b') == ''",
                        "s.split('b')|length > 5", "s.startswith(s) and s.endswith(t)", "s.strip(t ~ 'b') == ''" }) do
    local t = "{% set s = 'a' * 1000000 %}{% set t = 'a' * 1000000 %}{% for i in range(100000) %}{% if " .. op ..
      " %}x{% endif %}{% endfor %}"
    local t0 = seer.now()
    local msg = T.raises(function() CT.render(t, {}) end)
    local dt = seer.now() - t0
    T.ok(msg:find(BUDGET_ERR), op .. ": " .. msg)
    T.contains(msg, "max_work", op)
    T.ok(dt < 1, ("%s: refused after %.2f s"):format(op, dt))
  end
end)

T.test("chat_template: work budget: |length of a long string is computed once, so the probe renders at once", function()
  -- the reported probe at a smaller size: 2000 x |length over 4 MB took ~25 s (a code-point walk each time)
  local t = "{% set s = 'a' * 4000000 %}{% for i in range(2000) %}{% if s|length > 5 %}x{% endif %}{% endfor %}"
  local t0 = seer.now()
  local out, work = CT.render(t, {})
  local dt = seer.now() - t0
  T.eq(#out, 2000)
  T.ok(type(work) == "number" and work < 20e6, "work " .. tostring(work))
  T.ok(dt < 1, ("rendered in %.2f s"):format(dt))
  -- the count stays right for non-ASCII text, cached or not, and string indexing walks code points
  T.eq(CT.render("{% set s = '\\u00e9' * 300 %}{{ s|length }} {{ s|length }} {{ (s ~ 'x')|length }} {{ s|count }}", {}),
    "300 300 301 300")
  T.eq(CT.render("{% set s = 'h\\u00e9llo' %}{{ s[1] }}|{{ s[-4] }}|{{ s[-1] }}|{{ s[5] is defined }}|{{ s[-6] is defined }}|{{ s.find('l') }}", {}),
    "é|é|o|False|False|2")
  T.eq(CT.render("[{{ '' * 5 }}|{{ [] * 3 }}|{{ 'ab' * 3 }}|{{ 'ab' * 0 }}|{{ 'ab' * -1 }}|{{ (1, 2) * 2 }}]", {}),
    "[|[]|ababab|||(1, 2, 1, 2)]")
end)

T.test("chat_template: work budget: a macro that calls itself twice per level is refused, not left to run", function()
  -- no loop at all, so the iteration cap never fires; 2^40 calls
  local t = "{% macro m(n) %}{% if n < 40 %}{{ m(n + 1) }}{{ m(n + 1) }}{% endif %}{% endmacro %}{{ m(0) }}"
  local msg = T.raises(function() CT.render(t, {}, { max_work = 1000000 }) end)
  T.ok(msg:find(BUDGET_ERR), msg)
  T.contains(msg, "(1000000 units)") -- no variables, so no allowance on top
  -- a node-heavy loop inside the iteration cap
  local e = ("(i + 1) * 2 - i // 3 + "):rep(40) .. "0"
  msg = T.raises(function()
    CT.render("{% for i in range(900) %}{% for j in range(1000) %}{% set x = " .. e .. " %}{% endfor %}{% endfor %}", {})
  end)
  T.ok(msg:find(BUDGET_ERR), msg)
end)

T.test("chat_template: work budget: opts.max_work and limits.max_work raise or lower it", function()
  local t = "{% set s = 'a' * 100000 %}{% for i in range(50) %}{% if 'b' in s %}x{% endif %}{% endfor %}ok"
  T.eq(CT.render(t, {}), "ok")
  T.raises(function() CT.render(t, {}, { max_work = 100000 }) end, "exceeded its work budget (100000 units)", true)
  CT.limits.max_work = 100000
  local ok, err = pcall(CT.render, t, {})
  CT.limits.max_work = nil
  T.ok(not ok and err:find(BUDGET_ERR), tostring(err))
  T.eq(CT.render(t, {}, { max_work = 1e9 }), "ok")
  T.raises(function() CT.render(t, {}, { max_work = -1 }) end, "max_work")
  -- the variables earn an allowance: a long conversation has room a short one does not
  local long = { s = ("a"):rep(1000000) }
  T.eq(CT.render("{% for i in range(20) %}{% if 'b' in s %}{% endif %}{% endfor %}ok", long, { max_work = 100000 }), "ok")
end)

T.test("chat_template: work budget: real templates spend a tiny fraction of it", function()
  local DEFAULT = 250000000
  local worst, worst_long = 0, 0
  for _, fam in ipairs(FAMILIES) do
    local template, tokens = CT.load_template(root .. fam)
    for _, c in ipairs(json.decode(seer.read_file(root .. fam .. "/golden-cases.json")).chat) do
      if not c.error then
        local opts = { add_generation_prompt = c.add_generation_prompt }
        for k, v in pairs(c.template_kwargs or {}) do opts[k] = v end
        local _, work = CT.apply(template, tokens, c.messages, opts)
        worst = math.max(worst, work)
      end
    end
    -- 200 turns of 2 KB: ~400 KB of output
    local msgs = {}
    for i = 1, 200 do msgs[i] = { role = i % 2 == 1 and "user" or "assistant", content = ("word "):rep(400) .. i } end
    local _, work = CT.apply(template, tokens, msgs, { add_generation_prompt = true })
    worst_long = math.max(worst_long, work)
  end
  T.ok(worst > 0 and worst < DEFAULT / 1000, "golden renders: worst " .. worst .. " units")
  T.ok(worst_long < DEFAULT / 50, "400 KB conversations: worst " .. worst_long .. " units")
end)

T.test("chat_template: a hostile model folder's template cannot hold the host (end to end, in a child)", function()
  local dir = T.tmpdir()
  local stories = seer.script_dir() .. "/../fixtures/models/stories260K"
  assert(os.execute(("cp '%s/tokenizer.json' '%s/'"):format(stories, dir)) == 0)
  local cfg = json.decode(seer.read_file(stories .. "/tokenizer_config.json"))
  local script = dir .. "/victim.lua"
  seer.write_file(script, [[
local json = require "seer.json"
local tmpls = {
  rescan = "{% set s = 'a' * 6000000 %}{% for i in range(100000) %}{% if 'b' in s %}{% endif %}{% endfor %}hi",
  length = "{% set s = 'a' * 6000000 %}{% for i in range(100000) %}{% if s|length > 5 %}{% endif %}{% endfor %}hi",
  empty_times = "{{ '' * 1000000000000000 }}{{ [] * 1000000000000000 }}hi",
}
local cfg = json.decode(io.open(arg[2]):read("*a"))
for _, name in ipairs({ "rescan", "length", "empty_times" }) do
  cfg.chat_template = tmpls[name]
  local f = io.open(arg[1] .. "/tokenizer_config.json", "wb"); f:write(json.encode(cfg)); f:close()
  local tok = require("seer.tokenizer").load(arg[1])
  local t0 = seer.now()
  local ok, out = pcall(tok.apply_chat_template, tok, { { role = "user", content = "hi" } },
    { add_generation_prompt = true, tokenize = false })
  print(("%s\t%s\t%.2f\t%s"):format(name, tostring(ok), seer.now() - t0, tostring(out):gsub("\n", " ")))
end
]])
  seer.write_file(dir .. "/base_config.json", json.encode(cfg))
  local ok, out = T.sh(("timeout 60 '%s' '%s' '%s' '%s/base_config.json'"):format(arg[-1], script, dir, dir))
  T.ok(ok, out)
  local got = {}
  for name, rok, secs, msg in out:gmatch("(%w+_?%w*)\t(%a+)\t([%d.]+)\t([^\n]*)") do got[name] = { rok == "true", tonumber(secs), msg } end
  T.ok(got.rescan and not got.rescan[1], out)
  T.ok(got.rescan[3]:find(BUDGET_ERR), got.rescan[3])
  T.ok(got.rescan[2] < 1, "rescan refused after " .. got.rescan[2] .. " s")
  T.ok(got.length and got.length[1] and got.length[3] == "hi" and got.length[2] < 1, out)
  T.ok(got.empty_times and got.empty_times[1] and got.empty_times[3] == "[]hi" and got.empty_times[2] < 1, out)
end)

T.test("chat_template: a slice inside a subscript of several parts is a syntax error, not a crash (found by the fuzzer)", function()
  -- messages[1, :] made a tuple holding a slice with no object: evaluating it read a NULL node
  local CT = require "seer.chat_template"
  for _, src in ipairs({ "{{ messages[1, :] }}", "{{ messages[:, 1] }}", "{{ messages[0, 1:2:3] }}" }) do
    local ok, err = pcall(CT.render, src, { messages = { 1, 2, 3 } })
    T.ok(not ok, src)
    T.contains(tostring(err), "a slice inside a subscript of several parts", src)
  end
  -- a plain slice and a tuple subscript of a dict still work
  T.eq((CT.render("{{ messages[1:] }}", { messages = { 1, 2, 3 } })), "[2, 3]")
end)
