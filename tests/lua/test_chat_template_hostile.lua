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
  -- round at hundreds of places prints and reads back hundreds of digits: a million of them took
  -- 2 s (common) and 8.7 s (floor, 309-digit floors) before the loop limit; each digit is charged
  for _, e in ipairs { "1.2345e-300|round(323)", "1.2345e-300|round(308, 'floor')", "1.7e8|round(300, 'ceil')" } do
    local t0 = seer.now()
    raises("{% for i in range(100000) %}{% for j in range(10) %}{% set y = " .. e .. " %}{% endfor %}{% endfor %}",
      "limit: the render exceeded its work budget")
    T.ok(seer.now() - t0 < 2, ("%s: %.2f s (0.15-0.4 s here)"):format(e, seer.now() - t0))
  end
end)

T.test("chat_template hostile: message content is data, never template code", function()
  local c = "{{ 7*7 }}{% for x in y %}{% endfor %}{# c #}{% raw %}"
  T.eq(render("{% for m in messages %}{{ m.content }}|{{ m.content|tojson }}{% endfor %}",
    { messages = { { role = "user", content = c } } }), c .. '|"' .. c .. '"')
  raises('{{ raise_exception("bad role") }}', "raise_exception: bad role")
  -- without a message the error ended at "raise_exception: ", saying nothing
  raises("{{ raise_exception() }}", "raise_exception: the template raised an error with no message")
  raises("{{ raise_exception('') }}", "raise_exception: the template raised an error with an empty message")
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

T.test("chat_template hostile: round with method floor or ceil is Jinja2's, errors included, never nan", function()
  -- Jinja2 computes math.floor(value * 10**precision) / 10**precision: the expected values and
  -- errors below are jinja2 3.1.6's (ImmutableSandboxedEnvironment, as transformers renders).
  -- A huge precision gave nan (pow(10, 400) is inf, inf/inf); a value past the largest float inf.
  raises("{{ 1.5|round(precision=400, method='floor') }}", "overflow error: int too large to convert to float")
  raises("{{ 1.5|round(400, 'ceil') }}", "overflow error: int too large to convert to float")
  raises("{{ 1.25|round(309, 'floor') }}", "308 is the largest precision a float allows")
  raises("{{ 1e300|round(10, 'floor') }}", "overflow error: cannot convert float infinity to integer")
  raises("{{ 1.25|round(-400, 'floor') }}", "zero division error: float division by zero")
  raises("{{ 125|round(-324, 'ceil') }}", "zero division error: float division by zero")
  -- an int is exact integer arithmetic in Python: float(x) at any precision; 1 / 10**-323 is
  -- past the largest float, and Python's float division gives inf there
  T.eq(render("{{ 3|round(400, 'floor') }}|{{ true|round(400, 'ceil') }}|{{ 1.25|round(308, 'floor') }}|{{ 125|round(-323, 'ceil') }}"),
    "3.0|1.0|1.25|inf")
  -- Python's floor is an int, so zero is 0.0, not -0.0; and past 22 digits 10**precision is
  -- not a float: Python divides the exact ints, rounding once
  T.eq(render("{{ (-30.599)|round(-8, 'ceil') }}|{{ (-83.0443)|round(25, 'floor') }}|{{ 248.13279487563636|round(284, 'ceil') }}"),
    "0.0|-83.04430000000002|248.1327948756364")
  T.eq(render("{{ 2.675|round(2, 'floor') }}|{{ (-2.675)|round(2, 'ceil') }}|{{ 125.0|round(-2, 'ceil') }}|{{ 0.1|round(25, 'floor') }}"),
    "2.67|-2.67|200.0|0.1")
end)
