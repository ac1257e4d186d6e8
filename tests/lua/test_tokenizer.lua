-- seer.tokenizer against Hugging Face's own encodings (tests/fixtures golden files), the
-- error paths, special tokens inside text and decoding options.
local T = require "testing"
local tokenizer = require "seer.tokenizer"
local json = require "seer.json"

local root = seer.script_dir() .. "/../fixtures"
local GPT2 = root .. "/tokenizers/gpt2"
local MISTRAL = root .. "/tokenizers/mistral-v0.3"
local STORIES = root .. "/models/stories260K"

local function read_json(path) return json.decode(seer.read_file(path)) end

local cache = {}
local function load(path)
  cache[path] = cache[path] or tokenizer.load(path)
  return cache[path]
end

-- Decoding what was encoded gives the text back (the byte-level and SentencePiece decoders
-- are lossless for valid UTF-8; SentencePiece drops the one prepended space).
local function check_cases(tok, cases, field, opts, label)
  local n = 0
  for i, c in ipairs(cases) do
    local ids = tok:encode(c.text, opts)
    T.eq(ids, c[field], string.format("%s case %d %q", label, i, c.text))
    n = n + 1
  end
  return n
end

T.test("gpt2 tokenizer.json: golden encodings and round trip", function()
  local tok = load(GPT2)
  local cases = read_json(GPT2 .. "/golden-cases.json")
  T.ok(#cases > 5)
  check_cases(tok, cases, "ids", nil, "gpt2")
  for _, c in ipairs(cases) do
    T.eq(tok:decode(tok:encode(c.text), { clean_up_tokenization_spaces = false }), c.text)
  end
end)

T.test("gpt2 vocab.json + merges.txt gives the same ids", function()
  local dir = T.tmpdir()
  os.execute(string.format("cp '%s/vocab.json' '%s/merges.txt' '%s/'", GPT2, GPT2, dir))
  local tok = tokenizer.load(dir)
  T.eq(tok.vocab_size, 50257)
  local cases = read_json(GPT2 .. "/golden-cases.json")
  check_cases(tok, cases, "ids", nil, "gpt2 (vocab+merges)")
  T.eq(tok:encode("a<|endoftext|>b"), { 64, 50256, 65 })
end)

T.test("gpt2: special token inside text, skip_special_tokens, clean-up", function()
  local tok = load(GPT2)
  T.eq(tok.bos_token_id, 50256)
  T.eq(tok.eos_token, "<|endoftext|>")
  T.eq(tok:encode("a<|endoftext|>b"), { 64, 50256, 65 })
  T.eq(tok:decode({ 64, 50256, 65 }), "a<|endoftext|>b")
  T.eq(tok:decode({ 64, 50256, 65 }, { skip_special_tokens = true }), "ab")
  T.eq(tok:tokenize("Hello world"), { "Hello", "Ġworld" })
  T.eq(tok.clean_up_tokenization_spaces, true)
  T.eq(tok:decode(tok:encode("a , b")), "a, b")
  T.eq(tok:decode(tok:encode("a , b"), { clean_up_tokenization_spaces = false }), "a , b")
  T.eq(tok:token_to_id("Ġworld"), 995)
  T.eq(tok:id_to_token(995), "Ġworld")
  T.eq(tok:token_to_id("no such token"), nil)
  T.eq(tok:id_to_token(10 ^ 7), nil)
  T.eq(tok:decode(995), " world")
end)

T.test("stories260K: golden tokenizer cases (with BOS) and decode", function()
  local tok = load(STORIES)
  local g = read_json(STORIES .. "/golden/golden.json")
  T.ok(#g.tokenizer_cases > 5)
  check_cases(tok, g.tokenizer_cases, "ids_with_bos", nil, "stories260K")
  T.eq(tok:encode(g.prompt), g.prompt_ids_with_bos)
  for _, c in ipairs(g.tokenizer_cases) do
    T.eq(tok:decode(c.ids_with_bos, { skip_special_tokens = true }), c.text)
  end
  T.eq(tok.bos_token_id, 1)
  T.eq(tok.eos_token_id, 2)
  T.eq(tok.unk_token_id, 0)
  T.eq(tok.vocab_size, 512)
end)

T.test("stories260K: greedy continuation decodes to the golden text", function()
  local tok = load(STORIES)
  local g = read_json(STORIES .. "/golden/golden.json")
  local new = g.greedy_new_ids
  if type(new) == "string" then new = json.decode(new) end
  local ids = {}
  for _, id in ipairs(g.prompt_ids_with_bos) do ids[#ids + 1] = id end
  for _, id in ipairs(new) do ids[#ids + 1] = id end
  T.eq(tok:decode(ids, { skip_special_tokens = true }), g.greedy_text_including_prompt)
end)

T.test("stories260K: byte fallback for characters outside the vocabulary", function()
  local tok = load(STORIES)
  local ids = tok:encode("日", { add_special_tokens = false })
  -- ▁ then the three UTF-8 bytes of 日 (E6 97 A5) as <0xNN> tokens (ids 3 + byte)
  T.eq(#ids, 4)
  T.eq({ ids[2], ids[3], ids[4] }, { 3 + 0xE6, 3 + 0x97, 3 + 0xA5 })
  T.eq(tok:decode(ids), "日")
  -- a lone byte token cannot be decoded to UTF-8: U+FFFD, as Hugging Face does
  T.eq(tok:decode({ 3 + 0xE6 }), "\xEF\xBF\xBD")
end)

T.test("mistral v0.3: golden encodings (with and without special tokens)", function()
  local tok = load(MISTRAL)
  local g = read_json(MISTRAL .. "/golden-cases.json")
  T.ok(#g.encode >= 20)
  check_cases(tok, g.encode, "ids", { add_special_tokens = false }, "mistral")
  check_cases(tok, g.encode, "ids_with_special_tokens", nil, "mistral (special)")
end)

T.test("mistral v0.3: decode round trip of plain texts", function()
  local tok = load(MISTRAL)
  local g = read_json(MISTRAL .. "/golden-cases.json")
  for _, c in ipairs(g.encode) do
    local has_special = false
    for _, id in ipairs(c.ids) do has_special = has_special or tok:is_special(id) end
    if not has_special and c.text:sub(1, 1) ~= " " then
      T.eq(tok:decode(c.ids_with_special_tokens, { skip_special_tokens = true }), c.text)
    end
  end
  T.eq(tok:decode(tok:encode("[INST] Hi [/INST]")), "<s>[INST] Hi [/INST]")
  -- the Strip decoder removes the first space, as in Hugging Face
  T.eq(tok:decode(tok:encode("[INST] Hi [/INST]"), { skip_special_tokens = true }), "Hi ")
  T.eq(tok.chat_template ~= nil, true)
end)

T.test("mistral v0.3: chat renders tokenize to the golden ids (needs seer.chat_template)", function()
  local ok = pcall(require, "seer.chat_template")
  if not ok then T.skip("seer.chat_template is not available") end
  local tok = load(MISTRAL)
  local g = read_json(MISTRAL .. "/golden-cases.json")
  local by_id = {}
  for _, c in ipairs(g.chat) do by_id[c.id .. ":add_generation_prompt=" .. tostring(c.add_generation_prompt)] = c end
  local n = 0
  for _, e in ipairs(g.encode) do
    local c = e.source and by_id[e.source:gsub("^chat:", "")]
    if c and not c.error then
      local opts = { add_generation_prompt = c.add_generation_prompt, tokenize = true }
      for k, v in pairs(c.template_kwargs or {}) do opts[k] = v end
      T.eq(tok:apply_chat_template(c.messages, opts), e.ids, e.source)
      n = n + 1
    end
  end
  T.ok(n > 0)
end)

T.test("encode/decode: misspelt options, non-strings and lists with holes are refused at the caller", function()
  local tok = load(GPT2)
  local here = "test_tokenizer%.lua:%d+: "
  T.raises(function() tok:encode("hi", { add_special_token = false }) end,
           here .. "encode: unknown option 'add_special_token'; valid options: add_special_tokens")
  T.raises(function() tok:encode("hi", { add_special_tokens = "no" }) end, "option 'add_special_tokens' must be a boolean, got string")
  T.raises(function() tok:encode(nil) end, here .. "encode: text must be a string, got nil")
  T.raises(function() tok:decode({ [1] = 1, [3] = 2 }) end, here .. "decode: id 2 is missing")
  T.raises(function() tok:decode({ 1 }, { skip_special = true }) end, "decode: unknown option 'skip_special'")
  T.eq(tok:decode({ 15496, 995 }, { skip_special_tokens = true, clean_up_tokenization_spaces = false }), "Hello world")
  T.eq(tok:encode("Hello world", { add_special_tokens = false }), { 15496, 995 })
end)

T.test("apply_chat_template: clear errors without a template or the renderer", function()
  local tok = load(GPT2)
  T.raises(function() tok:apply_chat_template({ { role = "user", content = "hi" } }) end, "no chat template")
  local saved = package.loaded["seer.chat_template"]
  local saved_preload = package.preload["seer.chat_template"]
  package.loaded["seer.chat_template"] = nil
  package.preload["seer.chat_template"] = function() error("missing for the test") end
  local ok, err = pcall(function()
    load(MISTRAL):apply_chat_template({ { role = "user", content = "hi" } })
  end)
  package.preload["seer.chat_template"] = saved_preload
  package.loaded["seer.chat_template"] = saved
  T.eq(ok, false)
  T.contains(tostring(err), "needs the module seer.chat_template")
end)

T.test("apply_chat_template passes variables and continue_final_message cuts the text", function()
  local tok = load(MISTRAL)
  local seen
  local saved = package.loaded["seer.chat_template"]
  package.loaded["seer.chat_template"] = {
    render = function(template, vars)
      seen = vars
      local out = { vars.bos_token }
      for _, m in ipairs(vars.messages) do out[#out + 1] = "<" .. m.role .. ">" .. m.content .. "</" .. m.role .. ">" end
      if vars.add_generation_prompt then out[#out + 1] = "<assistant>" end
      return table.concat(out)
    end,
  }
  local ok, err = pcall(function()
    local msgs = { { role = "user", content = "Hi" }, { role = "assistant", content = "Hello th" } }
    T.eq(tok:apply_chat_template(msgs, { date_string = "x" }), "<s><user>Hi</user><assistant>Hello th</assistant>")
    T.eq(seen.date_string, "x")
    T.eq(seen.eos_token, "</s>")
    T.eq(seen.add_generation_prompt, false)
    T.eq(tok:apply_chat_template(msgs, { continue_final_message = true }), "<s><user>Hi</user><assistant>Hello th")
    local ids = tok:apply_chat_template({ { role = "user", content = "Hi" } }, { tokenize = true })
    T.eq(ids, tok:encode("<s><user>Hi</user>", { add_special_tokens = false }))
    T.eq(ids[1], 1)
    T.ne(ids[2], 1) -- BOS from the template only, not added again
  end)
  package.loaded["seer.chat_template"] = saved
  if not ok then error(err, 0) end
end)

T.test("errors: missing path, bad JSON, unknown component types", function()
  T.raises(function() tokenizer.load("/nonexistent/tokenizer") end, "no such file or directory")
  local dir = T.tmpdir()
  T.raises(function() tokenizer.load(dir) end, "neither tokenizer.json nor vocab.json")
  local function write(name, text)
    local f = assert(io.open(dir .. "/" .. name, "wb"))
    f:write(text)
    f:close()
    return dir .. "/" .. name
  end
  T.raises(function() tokenizer.load(write("bad.json", "{\"model\": ")) end, "malformed JSON")
  T.raises(function() tokenizer.load(write("arr.json", "[]")) end, "top level must be an object")
  local base = [[{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}%s}]]
  local t = tokenizer.load(write("ok.json", base:format("")))
  T.eq(t:encode("abab"), { 2, 2 })
  T.raises(function() tokenizer.load(write("pt.json", base:format(', "pre_tokenizer": {"type": "Foo"}'))) end,
    "pre_tokenizer type 'Foo' is not supported (supported: Sequence", true)
  T.raises(function()
    tokenizer.load(write("pt2.json", base:format(
      ', "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Bar"}]}')))
  end, "pre_tokenizer.pretokenizers[1] type 'Bar' is not supported", true)
  T.raises(function() tokenizer.load(write("n.json", base:format(', "normalizer": {"type": "Lowercase"}'))) end,
    "normalizer type 'Lowercase' is not supported", true)
  T.raises(function() tokenizer.load(write("d.json", base:format(', "decoder": {"type": "WordPiece"}'))) end,
    "decoder type 'WordPiece' is not supported", true)
  T.raises(function() tokenizer.load(write("p.json", base:format(', "post_processor": {"type": "Baz"}'))) end,
    "post_processor type 'Baz' is not supported", true)
  T.raises(function() tokenizer.load(write("m.json", [[{"model": {"type": "Unigram", "vocab": []}}]])) end,
    "model type 'Unigram' is not supported", true)
  T.raises(function()
    tokenizer.load(write("mg.json", [[{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a c"]}}]]))
  end, "model.merges[0]: token 'c' is not in the vocabulary", true)
  T.raises(function()
    tokenizer.load(write("re.json", base:format(
      ', "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated"}')))
  end, "cannot compile regex")
  T.raises(function() t:decode({ 0, 99 }) end, "id 99 at position 1 is not in the vocabulary")
  T.raises(function() t:encode("\xff") end, "not valid UTF-8", true)
end)

T.test("components: Split behaviours, Metaspace split, merges as pairs, added-token flags", function()
  local dir = T.tmpdir()
  local function make(extra)
    local vocab = { ["▁"] = 0, a = 1, b = 2, ["-"] = 3, ["▁a"] = 4, ["<x>"] = 5, ["▁b"] = 6, [" "] = 7, ab = 8 }
    local text = json.encode({
      model = { type = "BPE", vocab = vocab, merges = { { "▁", "a" }, { "▁", "b" }, { "a", "b" } } },
      pre_tokenizer = extra.pre_tokenizer, added_tokens = extra.added_tokens, normalizer = extra.normalizer,
      decoder = extra.decoder,
    })
    local path = dir .. "/t" .. tostring(math.random(1, 1e9)) .. ".json"
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
    return tokenizer.load(path)
  end
  local function split(behavior, invert)
    return make({ pre_tokenizer = { type = "Split", pattern = { String = "-" }, behavior = behavior, invert = invert } })
  end
  -- "ab-ab" with Removed: ab, ab ; Isolated: ab, -, ab ; MergedWithPrevious: ab-, ab (ab- has no token: a b - )
  T.eq(split("Removed"):encode("ab-ab"), { 8, 8 })
  T.eq(split("Isolated"):encode("ab-ab"), { 8, 3, 8 })
  T.eq(split("MergedWithPrevious"):encode("ab-ab"), { 8, 3, 8 })
  T.eq(split("MergedWithNext"):encode("a-b"), { 1, 3, 2 })
  T.eq(split("Contiguous"):encode("a--b"), { 1, 3, 3, 2 })
  T.eq(split("Removed", true):encode("a-b-"), { 3, 3 })
  local ms = make({ pre_tokenizer = { type = "Metaspace", replacement = "▁", prepend_scheme = "always", split = true },
    decoder = { type = "Metaspace", replacement = "▁", prepend_scheme = "always" } })
  T.eq(ms:encode("a b"), { 4, 6 })
  T.eq(ms:decode({ 4, 6 }), "a b")
  local never = make({ pre_tokenizer = { type = "Metaspace", replacement = "▁", prepend_scheme = "never", split = false } })
  T.eq(never:encode("a b"), { 1, 6 })
  -- added tokens: rstrip eats the spaces after, lstrip those before; single_word needs word boundaries
  local function added(flags)
    local tokdef = { id = 5, content = "<x>", special = true, normalized = false }
    for k, v in pairs(flags) do tokdef[k] = v end
    return make({ added_tokens = { tokdef } })
  end
  T.eq(added({}):encode("a <x> b"), { 1, 7, 5, 7, 2 })
  T.eq(added({ rstrip = true }):encode("a <x> b"), { 1, 7, 5, 2 })
  T.eq(added({ lstrip = true }):encode("a <x> b"), { 1, 5, 7, 2 })
  -- inside a word it is not the token; its characters are not in this vocabulary (no unk): dropped
  -- (so a and b meet and merge)
  T.eq(added({ single_word = true }):encode("a<x>b"), { 8 })
  T.eq(added({ single_word = true }):encode("a <x> b"), { 1, 7, 5, 7, 2 })
end)

T.test("Llama 3 style: Split with Llama 3's regex (case-insensitive contractions) + ByteLevel without regex", function()
  local pattern = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
  local vocab = { Hello = 0, ["Ġworld"] = 1, ["'s"] = 2, ["Ġ"] = 3, ["123"] = 4, ["4"] = 5, IT = 6, ["'S"] = 7,
    ["Ċ"] = 8, ["ĊĊ"] = 9, ["!"] = 10 }
  local text = json.encode({
    model = { type = "BPE", vocab = vocab, merges = json.array({}), ignore_merges = true },
    pre_tokenizer = { type = "Sequence", pretokenizers = {
      { type = "Split", pattern = { Regex = pattern }, behavior = "Isolated", invert = false },
      { type = "ByteLevel", add_prefix_space = false, trim_offsets = true, use_regex = false } } },
    decoder = { type = "ByteLevel" },
  })
  local path = T.tmpdir() .. "/tokenizer.json"
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  local tok = tokenizer.load(path)
  T.eq(tok:encode("Hello world's 1234"), { 0, 1, 2, 3, 4, 5 })
  T.eq(tok:encode("IT'S\n\n"), { 6, 7, 9 })
  T.eq(tok:encode("!\n"), { 10, 8 }) -- one piece "!\n" (punctuation takes the newlines), not in vocab
  T.eq(tok:decode({ 0, 1, 2, 3, 4, 5 }), "Hello world's 1234")
end)

T.test("gpt2: long input without spaces does not rescan (heap merge)", function()
  local tok = load(GPT2)
  local text = string.rep("abcdefghij", 2000)
  local t0 = os.clock()
  local ids = tok:encode(text)
  T.ok(os.clock() - t0 < 2, "20,000 characters in one word took too long")
  T.eq(tok:decode(ids), text)
end)

T.test("normalizers NFC, NFD, NFKC, NFKD (alone and in a Sequence)", function()
  local dir = T.tmpdir()
  local function load(norm)
    local path = dir .. "/t.json"
    local f = assert(io.open(path, "wb"))
    f:write(([[{"model": {"type": "BPE", "vocab": {"e": 0, "\u00e9": 1, "\u0301": 2, "f": 3, "i": 4, "\ufb01": 5},
      "merges": []}, "normalizer": %s}]]):format(norm))
    f:close()
    return tokenizer.load(path)
  end
  T.eq(load([[{"type": "NFC"}]]):encode("e\u{301}\u{e9}"), { 1, 1 })
  T.eq(load([[{"type": "NFD"}]]):encode("e\u{301}\u{e9}"), { 0, 2, 0, 2 })
  T.eq(load([[{"type": "NFC"}]]):encode("\u{fb01}"), { 5 })
  T.eq(load([[{"type": "NFKC"}]]):encode("\u{fb01}\u{e9}"), { 3, 4, 1 })
  T.eq(load([[{"type": "NFKD"}]]):encode("\u{fb01}\u{e9}"), { 3, 4, 0, 2 })
  T.eq(load([[{"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "NFC"}]}]]):encode("e\u{301}"), { 1 })
end)

T.test("apply_chat_template: a variable the template never names is said once on stderr, with the option it resembles", function()
  local seer_bin = require("seer.jupyter").seer_binary()
  local script = os.tmpname()
  seer.write_file(script, ([[
local tok = seer.tokenizer.load(%q)
local tmpl = "{%% for m in messages %%}<{{ m.role }}>{{ m.content }}{%% endfor %%}{%% if add_generation_prompt %%}<assistant>{%% endif %%}{{ date_string }}"
local msgs = { { role = "user", content = "Hi" } }
for _ = 1, 2 do io.write(tok:apply_chat_template(msgs, { chat_template = tmpl, add_generation = true }), "\n") end
io.write(tok:apply_chat_template(msgs, { chat_template = tmpl, add_generation_prompt = true, date_string = "today" }), "\n")
io.write(tok:apply_chat_template(msgs, { chat_template = tmpl, enable_thinking = false }), "\n")
]]):format(seer.script_dir() .. "/../fixtures/models/stories260K"))
  local errf = os.tmpname()
  local p = io.popen(("'%s' %s 2>%s"):format(seer_bin, script, errf))
  local out = p:read("*a")
  p:close()
  local err = seer.read_file(errf)
  os.remove(script)
  os.remove(errf)
  T.eq(out, "<user>Hi\n<user>Hi\n<user>Hi<assistant>today\n<user>Hi\n")
  T.eq(err, table.concat({
    "seer.tokenizer: apply_chat_template: 'add_generation' is not an option and this chat template has no variable of that name, so it changes nothing; did you mean add_generation_prompt?",
    "seer.tokenizer: apply_chat_template: 'enable_thinking' is not an option and this chat template has no variable of that name, so it changes nothing",
    "" }, "\n"))
end)

---------------------------------------------------------------------------------------------
-- A model folder's files are hostile (docs/security.md): their JSON values are counted before
-- a tree is built (tokenizer.json and vocab.json in C, the configs through json.decode's
-- max_values), so millions of tiny values are refused at the cost of reading the text.

-- Runs code in a fresh seer process; its output, then its peak memory in MiB (VmHWM) and seconds.
local function child_peak(code)
  local script = T.tmpdir() .. "/child.lua"
  seer.write_file(script, code .. [[

local hwm = tonumber(seer.read_file("/proc/self/status"):match("VmHWM:%s*(%d+)"))
io.write(("\npeak_kib %d\n"):format(hwm))]])
  local t0 = seer.now()
  local p = io.popen(("'%s' '%s' 2>&1"):format(arg[-1], script))
  local out = p:read("*a")
  p:close()
  return out, tonumber(out:match("peak_kib (%d+)") or "0") / 1024, seer.now() - t0
end

-- A JSON array text of n empty arrays: 3 bytes a value.
local function empties(n) return "[" .. string.rep("[],", n - 1) .. "[]]" end

T.test("a tokenizer.json or vocab.json of 9 million values is refused before it is parsed, naming file, count and limit", function()
  local dir = T.tmpdir()
  local junk = '{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"junk":' .. empties(9000000) .. "}"
  seer.write_file(dir .. "/tokenizer.json", junk)
  local vdir = T.tmpdir()
  seer.write_file(vdir .. "/vocab.json", '{"a":0,"junk":' .. empties(9000000) .. "}")
  seer.write_file(vdir .. "/merges.txt", "#version: 0.2\n")
  local out, peak, secs = child_peak(([[
local T = require "seer.tokenizer"
print(pcall(T.load, %q))
print(pcall(T.load, %q))]]):format(dir, vdir))
  print(("    two 26 MiB files of 9M values: refused in %.2f s, child peak %.0f MiB"):format(secs, peak))
  T.contains(out, "tokenizer.json: holds 9000013 JSON values, more than the 8000000 allowed for a tokenizer")
  T.contains(out, "vocab.json: holds 9000005 JSON values, more than the 8000000 allowed for a vocabulary")
  -- parsed, 9 million nodes take 700+ MiB; refused, the process holds the text
  T.ok(peak > 0 and peak < 200, ("the child peaked at %.0f MiB"):format(peak))
end)

T.test("tokenizer_config.json of 3 million values is refused before it is decoded; the real files fit their limits", function()
  local dir = T.tmpdir()
  assert(os.execute(("cp '%s'/tokenizer.json '%s'/"):format(STORIES, dir)) == 0)
  seer.write_file(dir .. "/tokenizer_config.json", '{"bos_token":"<s>","junk":' .. empties(3000000) .. "}")
  local out, peak, secs = child_peak(("print(pcall(require('seer.tokenizer').load, %q))"):format(dir))
  print(("    a 9 MiB tokenizer_config.json of 3M values: refused in %.2f s, child peak %.0f MiB"):format(secs, peak))
  T.contains(out, "tokenizer_config.json: json.decode: the text holds 3000005 values, more than max_values = 1000000")
  T.ok(peak > 0 and peak < 100, ("the child peaked at %.0f MiB"):format(peak))
  -- the largest real files: a fixture's configs under the config limit, tokenizers under theirs
  for _, f in ipairs({ "/tokenizers/gemma3/tokenizer_config.json", "/tokenizers/mistral-v0.3/tokenizer_config.json" }) do
    T.ok(json.decode(seer.read_file(root .. f), { max_values = json.MODEL_MAX_VALUES.config }), f)
  end
  for _, f in ipairs({ "/tokenizers/gpt2/tokenizer.json", "/tokenizers/mistral-v0.3/tokenizer.json", "/tokenizers/gpt2/vocab.json" }) do
    T.ok(json.decode(seer.read_file(root .. f), { max_values = json.MODEL_MAX_VALUES.tokenizer }), f)
  end
  T.eq(tokenizer.load(GPT2 .. "/tokenizer.json"):encode("Hello world"), { 15496, 995 })
  T.eq(#tokenizer.load(MISTRAL):encode("Hello world"), 3)
end)
