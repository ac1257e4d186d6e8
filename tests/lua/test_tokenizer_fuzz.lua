-- Differential fuzz test against Hugging Face's `tokenizers` package: 5,000 random and
-- adversarial strings (tests/parity/tokenizer_fuzz.py) through every tokenizer.json the tests
-- have and three synthetic ones; for each string, the ids without and with special tokens and
-- the decoded text must fold to the number `tokenizers` gave (0 mismatches). The goldens are
-- stored (tests/parity/tokenizer_fuzz.json); SEER_TOKENIZER_FUZZ points at another file (`make
-- tokenizer-fuzz` makes one live with a fresh seed). Then the cases issue 22 names, by name.
local T = require "testing"
local Tok = require "seer.tokenizer"

local here = seer.script_dir()
local path = os.getenv("SEER_TOKENIZER_FUZZ") or (here .. "/../parity/tokenizer_fuzz.json")
local golden = seer.json.decode(seer.read_file(path))

-- tokenizer_fuzz.py's fold: exact in doubles (below 2^31 * 1000003 + 2^31 < 2^53)
local function fold(h, v) return (h * 1000003 + v + 7) % 2147483647 end

local function signature(tok, text)
  local plain = tok:encode(text, { add_special_tokens = false })
  local special = tok:encode(text, { add_special_tokens = true })
  local decoded = tok:decode(plain, { clean_up_tokenization_spaces = false }) -- tokenizers decodes raw
  local h = 0
  for _, id in ipairs(plain) do h = fold(h, id) end
  h = fold(h, -1)
  for _, id in ipairs(special) do h = fold(h, id) end
  h = fold(h, -2)
  for i = 1, #decoded do h = fold(h, decoded:byte(i)) end
  return h, plain, decoded
end

local names = {}
for name in pairs(golden.tokenizers) do names[#names + 1] = name end
table.sort(names)

T.test("the fuzz corpus is large and every tokenizer.json of the tests is in it", function()
  T.ok(#golden.strings >= 5000, "at least 5,000 strings, got " .. #golden.strings)
  local files = {}
  for _, g in pairs(golden.tokenizers) do files[g.file] = true end
  local p = io.popen("cd '" .. here .. "/..' && find fixtures parity -name tokenizer.json | sort")
  for f in p:lines() do T.ok(files[f], f .. " is a tokenizer.json of the tests but not in the fuzz goldens") end
  p:close()
end)

for _, name in ipairs(names) do
  local g = golden.tokenizers[name]
  T.test(("tokenizer fuzz: %s (%d strings, 0 mismatches)"):format(name, #golden.strings), function()
    local tok = Tok.load(here .. "/../" .. g.file)
    local bad = {}
    for i, s in ipairs(golden.strings) do
      local h, ids, decoded = signature(tok, s)
      if h ~= g.hash[i] then
        bad[#bad + 1] = ("#%d %s -> ids %s, decoded %s"):format(i, seer.json.encode(s), seer.json.encode(ids),
          seer.json.encode(decoded))
      end
    end
    T.eq(#bad, 0, name .. ": strings where seer and tokenizers " .. golden.tokenizers_version .. " differ:\n  " ..
      table.concat(bad, "\n  ", 1, math.min(#bad, 12)))
  end)
end

-- The cases issue 22 names, with the ids `tokenizers` gives.
local fixtures = here .. "/../fixtures/tokenizers"
local synth = here .. "/../parity/tokenizer_fuzz"

T.test("Metaspace prepend_scheme first: text already starting with ▁ gets no second ▁ (Mistral v0.3)", function()
  local tok = Tok.load(fixtures .. "/mistral-v0.3")
  local with = tok:encode("\u{2581}Hello", { add_special_tokens = false })
  local without = tok:encode("Hello", { add_special_tokens = false })
  T.eq(with, without) -- "Hello" gets the ▁ prepended; "▁Hello" has it already
  T.eq(tok:tokenize("\u{2581}Hello"), { "\u{2581}Hello" })
  local split = Tok.load(synth .. "/metaspace-first-split")
  T.eq(split:tokenize("\u{2581}Hello \u{2581}the"), { "\u{2581}Hello", "\u{2581}", "\u{2581}the" })
end)

T.test("U+180E is not white space for WhitespaceSplit, \\s or Strip (Unicode 6.3 and later)", function()
  local tok = Tok.load(synth .. "/wsplit-nul")
  T.eq(tok:tokenize("x\u{180E}x"), { "x\u{180E}", "x" }) -- one word: x+U+180E merges, then x
  T.eq(tok:tokenize("x\u{2003}x"), { "x", "x" })        -- U+2003 EM SPACE is white space
  T.eq(tok:tokenize("\u{3000}ab\u{85}"), { "a", "b" })  -- Strip takes Unicode white space
  -- the byte-level GPT-2 regex (\s+(?!\S)): U+180E is a symbol, not space (ids from tokenizers)
  local gpt2 = Tok.load(fixtures .. "/gpt2")
  T.eq(gpt2:encode("a \u{180E} b", { add_special_tokens = false }), { 64, 28053, 254, 236, 275 })
  T.eq(gpt2:encode("x\u{180E}\u{180E} y", { add_special_tokens = false }), { 87, 157, 254, 236, 157, 254, 236, 331 })
end)

T.test("a vocabulary entry containing NUL survives loading, encoding and decoding", function()
  local tok = Tok.load(synth .. "/wsplit-nul")
  local id = tok:token_to_id("a\0b")
  T.ok(id, "a\\0b is in the vocabulary")
  T.eq(tok:encode("a\0b", { add_special_tokens = false }), { id })
  T.eq(tok:id_to_token(id), "a\0b")
  T.eq(tok:decode({ id }), "a\0b")
  T.eq(tok:token_to_id("\0"), tok:encode("\0", { add_special_tokens = false })[1])
end)

T.test("normalizers use tokenizers' Unicode 9.0 data: U+07FD (Unicode 11) is not reordered", function()
  -- tokenizers leaves "x U+0301 U+07FD" alone (U+07FD has no combining class in its tables);
  -- Unicode 14 would put U+07FD (class 220) before U+0301 (230). Ids from tokenizers 0.23.3.
  local tok = Tok.load(fixtures .. "/nfc-bpe")
  T.eq(tok:encode("x\u{0301}\u{07FD}", { add_special_tokens = false }), { 87, 136, 223, 155, 121 })
  T.eq(tok:encode("x\u{07FD}\u{0301}", { add_special_tokens = false }), { 87, 155, 121, 136, 223 })
  -- control: a Unicode 9 mark (U+08D4, class 230) after U+0334 (class 1) is reordered as usual
  T.eq(tok:encode("x\u{08D4}\u{0334}", { add_special_tokens = false }),
    tok:encode("x\u{0334}\u{08D4}", { add_special_tokens = false }))
end)
