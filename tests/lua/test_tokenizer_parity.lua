-- Tokenizer parity with Hugging Face's `tokenizers` package on a corpus of hard strings (made
-- by tests/parity/tokenizer_goldens.py): ids without and with special tokens, and decoding.
local T = require "testing"
local Tok = require "seer.tokenizer"

local here = seer.script_dir()
local golden = seer.json.decode(seer.read_file(os.getenv("SEER_TOKENIZER_PARITY") or (here .. "/../parity/tokenizers.json")))

local names = {}
for name in pairs(golden.tokenizers) do names[#names + 1] = name end
table.sort(names)

for _, name in ipairs(names) do
  local g = golden.tokenizers[name]
  T.test("tokenizer parity: " .. name .. " (" .. #g.cases .. " hard strings)", function()
    local tok = Tok.load(here .. "/../" .. g.file)
    for i, c in ipairs(g.cases) do
      local what = ("%s case %d %q"):format(name, i, c.text:sub(1, 40))
      T.eq(tok:encode(c.text, { add_special_tokens = false }), c.ids, what .. " ids")
      T.eq(tok:encode(c.text, { add_special_tokens = true }), c.ids_with_special, what .. " ids with special tokens")
      T.eq(tok:decode(c.ids), c.decoded, what .. " decode")
    end
  end)
end
