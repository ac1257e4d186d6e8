-- Hostile chat templates and message contents (a model folder is untrusted input): resource
-- bombs end in a "limit: ..." error, message text is never template code, and numeric filters
-- answer what Python/Jinja2 answer or raise, never a silent wrong value.
local T = require "testing"
local CT = require "seer.chat_template"

local function render(t, vars) return (CT.render(t, vars or {})) end
local function raises(t, want, vars)
  local msg = T.raises(function() CT.render(t, vars or {}) end, nil)
  T.contains(msg, want, t)
end

T.test("chat_template hostile: time and memory bombs end in a named limit", function()
  raises("{% for i in range(10**9) %}x{% endfor %}", "limit: range too big")
  raises("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "limit: more than")
  raises("{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(0) }}", "limit: macro calls nested deeper")
  raises("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}", "limit: macro calls nested deeper")
  raises('{% set ns = namespace(x="x") %}{% for i in range(100) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}', "limit:")
  raises('{{ ("x" * 2**40)|length }}', "limit:")
  raises("{{ " .. string.rep("(", 100000) .. "1" .. string.rep(")", 100000) .. " }}", "nested")
  raises(string.rep("{% if true %}", 5000) .. string.rep("{% endif %}", 5000), "nested deeper than")
  raises('{{ ("a"*1000000)|replace("a", "b"*1000) }}', "limit: output longer")
  raises('{{ "a"|indent(1000000000) }}', "limit: indent width")
end)

T.test("chat_template hostile: message content is data, never template code", function()
  local c = "{{ 7*7 }}{% for x in y %}{% endfor %}{# c #}{% raw %}"
  T.eq(render("{% for m in messages %}{{ m.content }}|{{ m.content|tojson }}{% endfor %}",
    { messages = { { role = "user", content = c } } }), c .. '|"' .. c .. '"')
  raises('{{ raise_exception("bad role") }}', "raise_exception: bad role")
  T.eq(render("{{ messages.__class__ }}{{ ''.__len__ }}{{ self }}", { messages = {} }), "")
end)

T.test("chat_template hostile: integer overflow and division by zero are errors", function()
  raises("{{ 2**63 }}", "integer overflow")
  raises("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow")
  raises("{{ 5 % 0 }}", "zero division")
  raises("{{ 5 / 0 }}", "zero division")
end)

T.test("chat_template hostile: int and float filters answer what Python answers or raise", function()
  -- Python: int('0x1A') and float('0x1A') are ValueErrors (the default); strtod read hex
  T.eq(render('{{ "0x1A"|int }}|{{ "0x10"|float }}|{{ "nan(1)"|float }}'), "0|0.0|0.0")
  T.eq(render('{{ "1_000"|int }}|{{ "ff"|int(base=16) }}|{{ "0xff"|int(0, 16) }}|{{ "4.9"|int }}|{{ "x"|int(7) }}'),
    "1000|255|255|4|7")
  -- a value beyond 64 bits was a silent 0; Python has big ints, so this is an error
  raises('{{ "99999999999999999999"|int }}', "limit: integer overflow in int")
  raises("{{ 1e19|int }}", "limit: integer overflow in int")
  raises('{{ "inf"|int }}', "cannot convert float infinity to integer")
end)

T.test("chat_template hostile: round keeps ints ints and is exact at extreme precisions", function()
  -- Python round(3, 0) is 3, round(15, -1) 20 (ties to even), round(1e300, 400) 1e300
  T.eq(render("{{ 3|round }}|{{ 15|round(-1) }}|{{ 25|round(-1) }}|{{ true|round }}|{{ 9200000000000000000|round(-18) }}"),
    "3|20|20|1|9000000000000000000")
  T.eq(render("{{ 1e300|round(400) }}|{{ 1e-320|round(322) }}|{{ 1.5|round(-400) }}|{{ 2.675|round(2) }}|{{ 2.5|round }}"),
    "1e+300|1e-320|0.0|2.67|2.0")
  raises("{{ 9000000000000000000|round(-19) }}", "limit: integer overflow in round")
end)
