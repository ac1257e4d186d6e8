-- A model folder is hostile (docs/security.md: a downloaded model, or a folder a sandbox could
-- write): loading one, or a LoRA adapter, gives an error naming the problem, never a hang, a
-- crash, undefined behaviour, an allocation or read of absurd size, or a read of a file outside
-- the folder. Every folder here is generated under a temporary directory: a tiny Llama (or
-- Mistral) with hand-written safetensors, then one field, file or byte made hostile.
local T = require "testing"
local json = seer.json

-- the policy on links is the default one here, whatever the environment says
T.setenv("SEER_MODEL_FOLLOW_LINKS", nil)

local SEER = arg[-1]
local DT = { F32 = 4, BF16 = 2, F16 = 2, U8 = 1 }

-- A safetensors file from entries {name, dtype ("F32"), shape, offsets = {b, e} (else packed)};
-- data bytes are 0x3c (small finite numbers); extra_bytes are appended after the data.
local function st_write(path, entries, extra_bytes)
  local hdr, off, blobs = {}, 0, {}
  for _, e in ipairs(entries) do
    local n = DT[e.dtype or "F32"]
    for _, s in ipairs(e.shape) do n = n * s end
    local b, en = off, off + n
    if e.offsets then b, en = e.offsets[1], e.offsets[2] end
    off = math.max(off, en)
    hdr[e.name] = { dtype = e.dtype or "F32", shape = e.shape, data_offsets = { b, en } }
  end
  local h = json.encode(hdr)
  h = h .. string.rep(" ", (8 - #h % 8) % 8)
  local len, lenb = #h, {}
  for i = 1, 8 do lenb[i] = string.char(len % 256); len = math.floor(len / 256) end
  local f = assert(io.open(path, "wb"))
  f:write(table.concat(lenb), h, string.rep("\60", off), extra_bytes or "")
  f:close()
end

local BASE = {
  model_type = "llama", hidden_size = 8, intermediate_size = 16, vocab_size = 32, num_hidden_layers = 1,
  num_attention_heads = 2, num_key_value_heads = 1, max_position_embeddings = 64, rms_norm_eps = 1e-5,
  tie_word_embeddings = false, eos_token_id = 2,
}

-- The tensors of a Llama config (head_dim from the config, else hidden_size / heads).
local function llama_entries(c)
  local D, I, V = c.hidden_size, c.intermediate_size, c.vocab_size
  local hd = c.head_dim or math.floor(D / c.num_attention_heads)
  local qd, kvd = c.num_attention_heads * hd, c.num_key_value_heads * hd
  local e = {}
  local function add(n, s) e[#e + 1] = { name = n, shape = s } end
  add("model.embed_tokens.weight", { V, D })
  add("model.norm.weight", { D })
  add("lm_head.weight", { V, D })
  for i = 0, c.num_hidden_layers - 1 do
    local p = "model.layers." .. i .. "."
    add(p .. "input_layernorm.weight", { D })
    add(p .. "post_attention_layernorm.weight", { D })
    add(p .. "self_attn.q_proj.weight", { qd, D })
    add(p .. "self_attn.k_proj.weight", { kvd, D })
    add(p .. "self_attn.v_proj.weight", { kvd, D })
    add(p .. "self_attn.o_proj.weight", { D, qd })
    add(p .. "mlp.gate_proj.weight", { I, D })
    add(p .. "mlp.up_proj.weight", { I, D })
    add(p .. "mlp.down_proj.weight", { D, I })
  end
  return e
end

-- A model folder: config = BASE with `over` applied ("nil" removes a field); mutate(entries, cfg)
-- may change the tensors before they are written. Returns the folder.
local function model(over, mutate, dir)
  if dir then os.execute(("mkdir -p '%s'"):format(dir)) else dir = T.tmpdir() end
  local c = {}
  for k, v in pairs(BASE) do c[k] = v end
  for k, v in pairs(over or {}) do c[k] = v end
  for k, v in pairs(over or {}) do if v == "nil" then c[k] = nil end end
  seer.write_file(dir .. "/config.json", json.encode(c))
  local e = llama_entries(c)
  if mutate then mutate(e, c) end
  st_write(dir .. "/model.safetensors", e)
  return dir
end

local function load(d, opts)
  opts = opts or {}
  opts.tokenizer = false
  return seer.model.load(d, opts)
end

local function find(entries, pat)
  for _, x in ipairs(entries) do if x.name:find(pat, 1, true) then return x end end
end

T.test("the generated model loads and runs (the control for every case below)", function()
  local m = load(model())
  T.eq(m:forward({ 1, 2, 3 }):size(2), 32)
end)

T.test("a FIFO planted as config.json, generation_config.json, the shard index or adapter_config.json is refused, not waited on", function()
  -- in a child with a deadline: before, each open blocked forever waiting for a writer
  local root = T.tmpdir()
  local names = {}
  for _, f in ipairs({ "config.json", "generation_config.json", "model.safetensors.index.json" }) do
    local d = model(nil, nil, root .. "/" .. f:gsub("%.", "_"))
    os.remove(d .. "/" .. f)
    T.eq(os.execute(("mkfifo '%s/%s'"):format(d, f)), 0)
    names[#names + 1] = d
  end
  local ad = root .. "/adapter"
  T.eq(os.execute(("mkdir '%s' && mkfifo '%s/adapter_config.json' && : > '%s/adapter_model.safetensors'"):format(ad, ad, ad)), 0)
  seer.write_file(root .. "/child.lua", ([[
    local out = {}
    for _, d in ipairs({ %q, %q, %q }) do
      local _, e = pcall(seer.model.load, d, { tokenizer = false })
      out[#out + 1] = tostring(e):match("^[^\n]*")
    end
    local m = seer.model.load(%q, { tokenizer = false })
    local _, e = pcall(m.load_adapter, m, %q)
    out[#out + 1] = tostring(e):match("^[^\n]*")
    io.write(table.concat(out, "\n"))
  ]]):format(names[1], names[2], names[3], model(), ad))
  local ok, out = T.sh(("timeout 10 '%s' '%s/child.lua'"):format(SEER, root))
  T.ok(ok, "the loads finished within 10 s (a FIFO was waited on?): " .. out)
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  T.eq(#lines, 4, out)
  T.contains(lines[1], "config.json: not a regular file")
  T.contains(lines[2], "generation_config.json: not a regular file")
  T.contains(lines[3], "model.safetensors.index.json: not a regular file")
  T.contains(lines[4], "adapter_config.json: not a regular file")
end)

T.test("a directory named config.json is refused as not a regular file", function()
  local d = model()
  os.remove(d .. "/config.json")
  os.execute(("mkdir '%s/config.json'"):format(d))
  T.raises(function() load(d) end, "config.json: not a regular file", true)
end)

T.test("a link that leads out of the model folder is not followed: shards, config.json, adapter files", function()
  local outside = T.tmpdir()
  -- a file of the researcher's that the folder's maker wants read: a secret, or another model's weights
  seer.write_file(outside .. "/secret", "root:x:0:0:root:/root:/bin/bash\n")
  local other = model(nil, nil, outside .. "/other_model")
  local d = model()
  os.remove(d .. "/model.safetensors")
  os.execute(("ln -s '%s/model.safetensors' '%s/model.safetensors'"):format(other, d))
  local msg = T.raises(function() load(d) end, "model.safetensors is a symbolic link that leads out of its folder", true)
  T.contains(msg, "SEER_MODEL_FOLLOW_LINKS")
  -- a relative link climbing out
  os.remove(d .. "/model.safetensors")
  os.execute(("ln -s '../%s/other_model/model.safetensors' '%s/model.safetensors'"):format(outside:match("[^/]+$"), d))
  T.raises(function() load(d) end, "leads out of its folder", true)
  -- config.json pointing at the secret: before, its first bytes came back in the error
  local d2 = model()
  os.remove(d2 .. "/config.json")
  os.execute(("ln -s '%s/secret' '%s/config.json'"):format(outside, d2))
  msg = T.raises(function() load(d2) end, "config.json is a symbolic link that leads out of its folder", true)
  T.ok(not msg:find("root", 1, true), msg)
  local d3 = model()
  os.execute(("ln -s '%s/secret' '%s/generation_config.json'"):format(outside, d3))
  T.raises(function() load(d3) end, "generation_config.json is a symbolic link that leads out of its folder", true)
  -- the researcher may opt out for folders of their own
  T.setenv("SEER_MODEL_FOLLOW_LINKS", "1")
  local ok, m = pcall(load, d)
  T.setenv("SEER_MODEL_FOLLOW_LINKS", nil)
  T.ok(ok, tostring(m))
end)

T.test("links inside the folder, and a Hugging Face cache snapshot's links into its blobs, are followed", function()
  local d = model()
  os.execute(("mv '%s/model.safetensors' '%s/weights.bin' && ln -s weights.bin '%s/model.safetensors'"):format(d, d, d))
  T.eq(load(d):forward({ 1 }):size(2), 32)
  local home = T.tmpdir()
  local repo = home .. "/hub/models--org--tiny"
  os.execute(("mkdir -p '%s/refs' '%s/snapshots/abc' '%s/blobs'"):format(repo, repo, repo))
  local src = model()
  for i, f in ipairs({ "config.json", "model.safetensors" }) do
    os.execute(("cp '%s/%s' '%s/blobs/b%d' && ln -s ../../blobs/b%d '%s/snapshots/abc/%s'"):format(src, f, repo, i, i, repo, f))
  end
  T.eq(load(repo .. "/snapshots/abc"):forward({ 1 }):size(2), 32)
  -- but not out of the repository folder
  os.remove(repo .. "/snapshots/abc/model.safetensors")
  os.execute(("ln -s '%s/model.safetensors' '%s/snapshots/abc/model.safetensors'"):format(src, repo))
  T.raises(function() load(repo .. "/snapshots/abc") end, "leads out of its folder", true)
end)

T.test("an adapter whose files link out of its folder is refused", function()
  local m = load(model())
  local outside = T.tmpdir()
  local ad = T.tmpdir()
  seer.write_file(outside .. "/adapter_config.json", json.encode({ peft_type = "LORA", r = 2, lora_alpha = 4, target_modules = { "q_proj" } }))
  local P = "base_model.model.model.layers.0.self_attn.q_proj."
  st_write(outside .. "/adapter_model.safetensors", { { name = P .. "lora_A.weight", shape = { 2, 8 } }, { name = P .. "lora_B.weight", shape = { 8, 2 } } })
  os.execute(("cp '%s/adapter_config.json' '%s/' && ln -s '%s/adapter_model.safetensors' '%s/adapter_model.safetensors'"):format(outside, ad, outside, ad))
  T.raises(function() m:load_adapter(ad) end, "adapter_model.safetensors is a symbolic link that leads out of its folder", true)
  os.execute(("rm '%s/adapter_model.safetensors' '%s/adapter_config.json' && cp '%s/adapter_model.safetensors' '%s/' && ln -s '%s/adapter_config.json' '%s/adapter_config.json'"):format(ad, ad, outside, ad, outside, ad))
  T.raises(function() m:load_adapter(ad) end, "adapter_config.json is a symbolic link that leads out of its folder", true)
  os.execute(("rm '%s/adapter_config.json' && cp '%s/adapter_config.json' '%s/'"):format(ad, outside, ad))
  m:load_adapter(ad) -- the control: the same files, copied in
end)

T.test("more heads than hidden dims without head_dim (heads of 0 dimensions) is refused", function()
  -- zero-sized q/k/v and a 1-d o_proj matched the shapes config.json implied; the model loaded
  -- and ran attention over 0-dimensional heads
  local d = model({ num_attention_heads = 16, num_key_value_heads = 16 }, function(e) find(e, "o_proj").shape = { 8 } end)
  T.raises(function() load(d) end, "num_attention_heads (16) is larger than hidden_size (8)", true)
end)

T.test("tensor data off its element boundary is refused (it was read in place: undefined behaviour)", function()
  for _, dt in ipairs({ "F32", "BF16" }) do
    local d = model(nil, function(e)
      for _, x in ipairs(e) do x.dtype = dt end
      table.insert(e, 1, { name = "a_pad", dtype = "U8", shape = { 1 } }) -- every tensor after it starts at an odd byte
    end)
    T.raises(function() load(d) end, "data is not aligned to its", true)
  end
end)

T.test("token ids in eos_token_id must be integers from 0 (config.json and generation_config.json)", function()
  for _, v in ipairs({ -5, 2.5, 1e300 }) do
    T.raises(function() load(model({ eos_token_id = v })) end, "config.json: \"eos_token_id\" must be a token id", true)
    T.raises(function() load(model({ eos_token_id = { 2, v } })) end, "\"eos_token_id\"[1] must be a token id", true)
    local d = model()
    seer.write_file(d .. "/generation_config.json", json.encode({ eos_token_id = v }))
    T.raises(function() load(d) end, "generation_config.json: \"eos_token_id\" must be a token id", true)
  end
  local d = model()
  seer.write_file(d .. "/generation_config.json", '{"eos_token_id": 1e400}') -- infinity
  T.raises(function() load(d) end, "must be a token id", true)
  T.eq(load(model({ eos_token_id = { 2, 31 } })).config.eos_token_ids, { 2, 31 })
end)

T.test("sliding_window must be a whole number of tokens (or null)", function()
  for _, v in ipairs({ -3, 2.5, 1e300, "4096" }) do
    T.raises(function() load(model({ model_type = "mistral", sliding_window = v })) end,
      "\"sliding_window\" must be a number of tokens", true)
  end
  T.eq(load(model({ model_type = "mistral", sliding_window = 4 })).config.sliding_window, 4)
  local d = model({ model_type = "mistral" })
  seer.write_file(d .. "/config.json", (seer.read_file(d .. "/config.json"):gsub("}%s*$", ', "sliding_window": null}')))
  T.eq(load(d).config.sliding_window, nil)
end)

T.test("rope_theta must be positive and rms_norm_eps not negative (they gave NaN logits)", function()
  T.raises(function() load(model({ rope_theta = 0 })) end, "\"rope_theta\" must be a positive number", true)
  T.raises(function() load(model({ rope_theta = -10 })) end, "\"rope_theta\" must be a positive number", true)
  T.raises(function() load(model({ rope_parameters = { rope_type = "default", rope_theta = -1 } })) end,
    "\"rope_theta\" must be a positive number", true)
  T.raises(function() load(model({ rms_norm_eps = -1 })) end, "\"rms_norm_eps\" must be a number >= 0", true)
  T.raises(function() load(model({ rms_norm_eps = 1e300 })) end, "\"rms_norm_eps\" must be a finite number", true) -- not a float
end)

T.test("a key given twice in config.json or adapter_config.json is refused (seer read the first, transformers the last)", function()
  local d = model()
  seer.write_file(d .. "/config.json", (seer.read_file(d .. "/config.json"):gsub("^{", '{"hidden_size": 4096, ')))
  T.raises(function() load(d) end, "config.json: the key \"hidden_size\" appears twice", true)
  local d2 = model() -- nested, in rope_parameters
  local cfg = seer.read_file(d2 .. "/config.json"):gsub("}%s*$",
    ', "rope_parameters": {"rope_type": "default", "rope_theta": 1, "rope_theta": 10000}}')
  seer.write_file(d2 .. "/config.json", cfg)
  T.raises(function() load(d2) end, "the key \"rope_theta\" appears twice", true)
  local m = load(model())
  local ad = T.tmpdir()
  seer.write_file(ad .. "/adapter_config.json", '{"peft_type": "LORA", "r": 2, "r": 4, "lora_alpha": 4}')
  local P = "base_model.model.model.layers.0.self_attn.q_proj."
  st_write(ad .. "/adapter_model.safetensors", { { name = P .. "lora_A.weight", shape = { 2, 8 } }, { name = P .. "lora_B.weight", shape = { 8, 2 } } })
  T.raises(function() m:load_adapter(ad) end, "the key \"r\" appears twice", true)
end)

-- A two-shard version of the model: embeddings, norm and head in a.safetensors, the layer in
-- b.safetensors; edit(weight_map, a_entries, b_entries) before they are written.
local function sharded(edit)
  local d = model()
  local c = json.decode(seer.read_file(d .. "/config.json"))
  local a, b, wm = {}, {}, {}
  for _, x in ipairs(llama_entries(c)) do
    if x.name:find("layers", 1, true) then b[#b + 1] = x; wm[x.name] = "b.safetensors"
    else a[#a + 1] = x; wm[x.name] = "a.safetensors" end
  end
  if edit then edit(wm, a, b) end
  os.remove(d .. "/model.safetensors")
  st_write(d .. "/a.safetensors", a)
  st_write(d .. "/b.safetensors", b)
  seer.write_file(d .. "/model.safetensors.index.json", json.encode({ metadata = {}, weight_map = wm }))
  return d
end

T.test("shards: a tensor stored in two shards, or not in the shard weight_map names, is refused", function()
  T.eq(load(sharded()):forward({ 1 }):size(2), 32)
  T.raises(function()
    load(sharded(function(_, _, b) b[#b + 1] = { name = "model.norm.weight", shape = { 8 } } end))
  end, "tensor model.norm.weight is stored in two shards, a.safetensors and b.safetensors", true)
  T.raises(function() load(sharded(function(wm) wm["model.norm.weight"] = "b.safetensors" end)) end,
    "weight_map puts tensor model.norm.weight in b.safetensors, which does not hold it", true)
  for _, bad in ipairs({ "../a.safetensors", "/etc/passwd", "sub/a.safetensors", "..", "" }) do
    T.raises(function() load(sharded(function(wm) wm["model.norm.weight"] = bad end)) end, "leaves the model directory", true)
  end
end)

T.test("safetensors data must be exactly its tensors: no gap, nothing after the last one (a sparse file is refused unread)", function()
  local d = model(nil, function(e)
    local packed = 0 -- the bytes of every tensor but the last, which goes 64 bytes after them
    for i = 1, #e - 1 do packed = packed + 4 * e[i].shape[1] * (e[i].shape[2] or 1) end
    local last = e[#e]
    last.offsets = { packed + 64, packed + 64 + 4 * last.shape[1] * last.shape[2] }
  end)
  T.raises(function() load(d) end, "the tensors must cover the data without gaps", true)
  local d2 = model()
  -- a sparse GiB after the tensors: costs its maker nothing; read into memory it took a second
  -- and a GiB before (a TiB: the OOM killer)
  T.eq(os.execute(("truncate -s 1G '%s/model.safetensors'"):format(d2)), 0)
  local t0 = os.clock()
  T.raises(function() load(d2, { weights = "memory" }) end, "bytes past the last tensor", true)
  T.raises(function() load(d2, { weights = "mapped" }) end, "bytes past the last tensor", true)
  T.ok(os.clock() - t0 < 0.5, "refused before the data was read")
end)

T.test("weights read into memory that would not fit in the available memory are refused before reading", function()
  local d = model()
  if os.execute(("truncate -s 8T '%s/model.safetensors' 2>/dev/null"):format(d)) ~= 0 then
    T.skip("this file system cannot hold an 8 TiB sparse file")
  end
  T.raises(function() load(d, { weights = "memory" }) end, "cannot be read into memory (weights = \"mapped\" maps them instead)", true)
end)

T.test("a config.json over 64 MiB is refused from its size; a config claiming 4096 layers gets a bounded list of what is missing", function()
  local d = model()
  T.eq(os.execute(("truncate -s 65M '%s/config.json'"):format(d)), 0)
  T.raises(function() load(d) end, "larger than the 64 MiB", true)
  -- 36,855 missing names (it took ASan builds minutes to list them, quadratically)
  local d2 = T.tmpdir()
  model(nil, nil, d2)
  local c = json.decode(seer.read_file(d2 .. "/config.json"))
  c.num_hidden_layers = 4096
  seer.write_file(d2 .. "/config.json", json.encode(c))
  local msg = T.raises(function() load(d2) end, "the checkpoint lacks tensors that config.json requires: model.layers.1.", true)
  T.ok(#msg < 5000 and msg:find(", ...", 1, true), "the list stops after some 4,000 characters: " .. #msg)
end)

T.test("LoRA: an alpha whose scale is not a finite f32, and adapter tensors off their element boundary, are refused", function()
  local m = load(model())
  local P = "base_model.model.model.layers.0.self_attn.q_proj."
  local ad = T.tmpdir()
  seer.write_file(ad .. "/adapter_config.json", json.encode({ peft_type = "LORA", r = 2, lora_alpha = 1e308 }))
  st_write(ad .. "/adapter_model.safetensors", { { name = P .. "lora_A.weight", shape = { 2, 8 } }, { name = P .. "lora_B.weight", shape = { 8, 2 } } })
  T.raises(function() m:load_adapter(ad) end, "which is not a finite f32", true)
  -- hidden 5 (head_dim 2 x 2 heads = 4 q rows): a BF16 lora_A [1, 5] is 10 bytes, so lora_B
  -- (F32) starts at byte 10
  local m5 = load(model({ hidden_size = 5, head_dim = 2, intermediate_size = 6 }))
  local ad5 = T.tmpdir()
  seer.write_file(ad5 .. "/adapter_config.json", json.encode({ peft_type = "LORA", r = 1, lora_alpha = 2 }))
  st_write(ad5 .. "/adapter_model.safetensors", { { name = P .. "lora_A.weight", dtype = "BF16", shape = { 1, 5 } }, { name = P .. "lora_B.weight", shape = { 4, 1 } } })
  T.raises(function() m5:load_adapter(ad5) end, "lora_B.weight\"'s data is not aligned to its 4-byte F32 elements", true)
end)

T.test("tokenizer files: a FIFO is refused, not waited on; a link out of the folder is refused; a side file over 64 MiB is refused", function()
  -- tokenizer.json, tokenizer_config.json and chat_template.jinja were opened with fopen/io.open:
  -- a FIFO hung the load, a link was followed wherever it led (a host file read as the template)
  local root = T.tmpdir()
  local src = seer.script_dir() .. "/../fixtures/models/stories260K"
  local function folder(name)
    local d = root .. "/" .. name
    T.eq(os.execute(("mkdir -p '%s' && cp '%s/tokenizer.json' '%s/tokenizer_config.json' '%s/special_tokens_map.json' '%s'/")
      :format(d, src, src, src, d)), 0)
    return d
  end
  local fifo_tok, fifo_cfg = folder("fifo_tok"), folder("fifo_cfg")
  os.remove(fifo_tok .. "/tokenizer.json")
  os.remove(fifo_cfg .. "/tokenizer_config.json")
  T.eq(os.execute(("mkfifo '%s/tokenizer.json' '%s/tokenizer_config.json'"):format(fifo_tok, fifo_cfg)), 0)
  seer.write_file(root .. "/child.lua", ([[
    local out = {}
    for _, d in ipairs({ %q, %q }) do
      local _, e = pcall(require("seer.tokenizer").load, d)
      out[#out + 1] = tostring(e):match("^[^\n]*")
    end
    io.write(table.concat(out, "\n"))
  ]]):format(fifo_tok, fifo_cfg))
  local ok, out = T.sh(("timeout 10 '%s' '%s/child.lua'"):format(SEER, root))
  T.ok(ok, "the loads finished within 10 s (a FIFO was waited on?): " .. out)
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  T.eq(#lines, 2, out)
  T.contains(lines[1], "tokenizer.json: not a regular file")
  T.contains(lines[2], "tokenizer_config.json: not a regular file")
  -- links: out of the folder refused (the tokenizer, the template), inside followed
  local secret = root .. "/host-secret.txt"
  seer.write_file(secret, "HOST SECRET {{ 1 }}")
  local tpl = folder("tpl_out")
  T.eq(os.execute(("ln -s '%s' '%s/chat_template.jinja'"):format(secret, tpl)), 0)
  local cfg = json.decode(seer.read_file(tpl .. "/tokenizer_config.json"))
  cfg.chat_template = nil
  seer.write_file(tpl .. "/tokenizer_config.json", json.encode(cfg))
  T.raises(function() require("seer.tokenizer").load(tpl) end, "chat_template.jinja is a symbolic link that leads out of its folder", true)
  local tok = folder("tok_out")
  os.remove(tok .. "/tokenizer.json")
  T.eq(os.execute(("ln -s '%s/tokenizer.json' '%s/tokenizer.json'"):format(src, tok)), 0)
  T.raises(function() require("seer.tokenizer").load(tok) end, "tokenizer.json is a symbolic link that leads out of its folder", true)
  local inside = folder("tok_in")
  T.eq(os.execute(("mv '%s/tokenizer.json' '%s/real.json' && ln -s real.json '%s/tokenizer.json'"):format(inside, inside, inside)), 0)
  T.eq(require("seer.tokenizer").load(inside).vocab_size, 512)
  -- a 65 MiB tokenizer_config.json (sparse): refused from its size, not read
  local big = folder("big_cfg")
  T.eq(os.execute(("truncate -s 65M '%s/tokenizer_config.json'"):format(big)), 0)
  T.raises(function() require("seer.tokenizer").load(big) end, "more than such a file may be", true)
end)

T.test("phi3 longrope: original_max_position_embeddings outside 2 .. 2^24 or not whole, and a factor that is not positive, are refused", function()
  -- (int) of 1e300 was undefined behaviour, and 1 made the attention factor infinite (log 1 = 0)
  local src = seer.script_dir() .. "/../parity/models/phi3"
  local cfg = json.decode(seer.read_file(src .. "/config.json"))
  for _, case in ipairs({ { "original_max_position_embeddings", 1e300, "must be a whole number from 2 to 16777216" },
                          { "original_max_position_embeddings", 1, "must be a whole number from 2 to 16777216" },
                          { "original_max_position_embeddings", 16.5, "must be a whole number from 2 to 16777216" },
                          { "factor", -2, "\"factor\" must be a positive number" },
                          { "attention_factor", 0, "\"attention_factor\" must be a positive finite number" } }) do
    local d = T.tmpdir() .. "/phi3"
    T.eq(os.execute(("mkdir -p '%s' && cp '%s/model.safetensors' '%s/generation_config.json' '%s'/"):format(d, src, src, d)), 0)
    local c = json.decode(json.encode(cfg))
    c.rope_parameters[case[1]] = case[2]
    seer.write_file(d .. "/config.json", json.encode(c))
    T.raises(function() seer.model.load(d, { tokenizer = false }) end, case[3], true)
  end
  -- the unchanged config loads
  local d = T.tmpdir() .. "/phi3ok"
  T.eq(os.execute(("mkdir -p '%s' && cp '%s'/*.json '%s/model.safetensors' '%s'/"):format(d, src, src, d)), 0)
  T.eq(seer.model.load(d, { tokenizer = false }).config.model_type, "phi3")
end)

T.test("llama3 RoPE scaling whose frequencies come out NaN (low_freq_factor == high_freq_factor at a wavelength) is refused, llama and gemma", function()
  -- old / low_freq_factor equal to the first pair's wavelength (2 pi in f32) made the smoothing
  -- 0 / 0: every logit was NaN (transformers computes the same NaN and only warns)
  for _, case in ipairs({ { seer.script_dir() .. "/../fixtures/models/stories260K", "llama" },
                          { seer.script_dir() .. "/../parity/models/gemma", "gemma" } }) do
    local src = case[1]
    local d = T.tmpdir() .. "/" .. case[2]
    T.eq(os.execute(("mkdir -p '%s' && cp '%s/model.safetensors' '%s'/"):format(d, src, d)), 0)
    local cfg = json.decode(seer.read_file(src .. "/config.json"))
    cfg.rope_scaling = { rope_type = "llama3", factor = 8, low_freq_factor = 40.7436638, high_freq_factor = 40.7436638,
                         original_max_position_embeddings = 256 }
    seer.write_file(d .. "/config.json", json.encode(cfg))
    T.raises(function() seer.model.load(d, { tokenizer = false }) end, "the RoPE scaling gives inverse frequency", true)
    -- a well-formed llama3 scaling on the same model loads and gives finite logits
    cfg.rope_scaling.high_freq_factor = 4
    cfg.rope_scaling.low_freq_factor = 1
    seer.write_file(d .. "/config.json", json.encode(cfg))
    local logits = seer.model.load(d, { tokenizer = false }):forward({ 1, 5, 9 })
    local row = logits[#logits]
    for i = 1, #row do T.ok(row[i] == row[i] and math.abs(row[i]) < math.huge, "logit " .. i .. " finite") end
  end
end)

T.test("seer.model.load of a hub id reads the cache's ref through the hub (a FIFO ref hung the load, a path in it was followed)", function()
  local process = require("seer.process")
  local src = seer.script_dir() .. "/../fixtures/models/stories260K"
  local function cache_with(ref_cmd)
    local cache = T.tmpdir()
    local repo = cache .. "/models--org--m"
    T.eq(os.execute(("mkdir -p '%s/refs' '%s/snapshots/0123456789abcdef0123456789abcdef01234567' '%s/elsewhere' && cp '%s'/*.json '%s/model.safetensors' '%s/snapshots/0123456789abcdef0123456789abcdef01234567/' && cp '%s'/*.json '%s/model.safetensors' '%s/elsewhere/'")
      :format(repo, repo, cache, src, src, repo, src, src, cache)), 0)
    T.eq(os.execute(ref_cmd:format(repo .. "/refs/main")), 0)
    return cache
  end
  -- in a child: a FIFO opened by path blocks until a writer comes
  local function load_in_child(cache)
    local dir = T.tmpdir()
    local code = ([[
local ok, r = pcall(require("seer.model").load, "org/m", { tokenizer = false })
local f = io.open(%q, "wb")
f:write(ok and ("ok " .. r.path) or ("err " .. tostring(r)))
f:close()
]]):format(dir .. "/out")
    local child = process.spawn{ argv = { require("seer.jupyter").seer_binary(), "-e", code },
      env = { HF_HUB_CACHE = cache, HF_HUB_OFFLINE = "1",
              SEER_LUA_DIR = os.getenv("SEER_LUA_DIR") or (seer.script_dir() .. "/../../lua") },
      stdout = "null", stderr = dir .. "/stderr" }
    if not child:wait(5000) then
      child:stop(0)
      return "hung"
    end
    local f = io.open(dir .. "/out", "rb")
    local out = f and f:read("*a")
    if f then f:close() end
    return out or "no answer"
  end
  local got = load_in_child(cache_with("mkfifo '%s'"))
  T.contains(got, "err ")
  T.contains(got, "refs/main is a FIFO, not a regular file")
  got = load_in_child(cache_with("printf '../../elsewhere' > '%s'"))
  T.contains(got, "err ")
  T.contains(got, "not a commit id")
  got = load_in_child(cache_with("printf '0123456789abcdef0123456789abcdef01234567' > '%s'"))
  T.contains(got, "ok ")
  T.contains(got, "/snapshots/0123456789abcdef0123456789abcdef01234567")
end)

-- A copy of a parity model (tests/parity/models/<name>) whose config.json edit(cfg) may change.
local function parity_model(name, edit)
  local src = seer.script_dir() .. "/../parity/models/" .. name
  local d = T.tmpdir() .. "/" .. name
  T.eq(os.execute(("mkdir -p '%s' && cp '%s/model.safetensors' '%s'/"):format(d, src, d)), 0)
  local cfg = json.decode(seer.read_file(src .. "/config.json"))
  if edit then edit(cfg) end
  seer.write_file(d .. "/config.json", json.encode(cfg))
  return d
end

T.test("config numbers that no float or int holds, or whose derived values do not fit one, are refused naming the field (found by tests/fuzz/fuzz_model_config)", function()
  -- each was converted first and checked after, or not at all: partial_rotary_factor x head_dim
  -- as an int was undefined behaviour (UBSan aborted); the others became infinite or 0 as floats,
  -- giving NaN logits, or frequencies, a scale or a soft-cap other than the config's, in silence
  local cases = {
    { "phi3", function(c) c.rope_parameters.partial_rotary_factor = 1e300 end,
      "\"partial_rotary_factor\" must be in (0, 1], got 1e+300" },
    { "phi3", function(c) c.rope_parameters.short_factor[2] = 1e300 end,
      "longrope \"short_factor\"[1] must be a positive number from 1.17549e-38 to 3.40282e+38 (a float), got 1e+300" },
    { "phi3", function(c) c.rope_parameters.long_factor[3] = 1e-300 end,
      "longrope \"long_factor\"[2] must be a positive number from 1.17549e-38 to 3.40282e+38 (a float), got 1e-300" },
    { "gemma2", function(c) c.final_logit_softcapping = 1e300 end,
      "\"final_logit_softcapping\" must be a finite number (a float: at most 3.40282e+38 in magnitude)" },
    { "gemma2", function(c) c.query_pre_attn_scalar = 1e-300 end,
      "1 / sqrt(query_pre_attn_scalar) overflows a float: 1e-300 gives 1e+150" },
    { "gemma3", function(c) c.rope_parameters.full_attention = { rope_type = "linear", rope_theta = 1000, factor = 1e300 } end,
      "\"factor\" must be a finite number (a float: at most 3.40282e+38 in magnitude)" },
    { "granite", function(c) c.embedding_multiplier = 1e300 end,
      "\"embedding_multiplier\" must be a positive number from 1.17549e-38 to 3.40282e+38 (a float), got 1e+300" },
    { "gpt_neox", function(c) c.rope_parameters.rope_theta = nil; c.rotary_emb_base = 1e300 end,
      "rope_theta 1e+300 must be positive and at most 3.40282e+38 (a float)" },
    { "llama", function(c)
        c.rope_parameters = { rope_type = "yarn", rope_theta = 500, factor = 1e6, original_max_position_embeddings = 16,
                              mscale = 3e38, mscale_all_dim = 1e-30 }
      end, "rope_scaling (yarn) gives the attention factor 4.14465e+38" },
  }
  for _, case in ipairs(cases) do
    T.raises(function() load(parity_model(case[1], case[2])) end, case[3], true)
  end
  -- the unchanged models load
  for _, name in ipairs({ "phi3", "gemma2", "gemma3", "granite", "gpt_neox", "llama" }) do
    T.eq(load(parity_model(name)).config.model_type, name == "gemma3" and "gemma3_text" or name)
  end
end)

T.test("RoPE frequencies that come out infinite or 0 are refused at load on every architecture and table (gemma3, gpt_neox and longrope's long factors went unchecked: NaN logits)", function()
  local cases = {
    -- a linear factor that is a denormal float: frequencies / 1e-40 are infinite
    { "gemma3", function(c) c.rope_parameters.sliding_attention = { rope_type = "linear", rope_theta = 100, factor = 1e-40 } end,
      "the RoPE scaling gives inverse frequency inf for rotary pair 0" },
    -- transformers 4's rope_local_base_freq (the sliding layers' theta) of 1e-300: 1 / theta^(2i/hd)
    -- past any float (found by tests/fuzz/fuzz_model_config with FUZZ_MODEL_NAN=1)
    { "gemma3", function(c) c.rope_parameters = nil; c.rope_theta = 1000; c.rope_local_base_freq = 1e-300 end,
      "the RoPE scaling gives inverse frequency inf for rotary pair 1" },
    -- a theta that is 0 as a float: 1 / 0^(2i/rot)
    { "gpt_neox", function(c) c.rope_parameters.rope_theta = nil; c.rotary_emb_base = 1e-300 end,
      "the RoPE scaling gives inverse frequency inf for rotary pair 1" },
    -- long factors are used past original_max_position_embeddings: 1 / (3e38 x base^(2i/rot)) is 0
    { "phi3", function(c) c.rope_parameters.long_factor = { 1, 3e38, 3e38 } end,
      "the RoPE scaling gives inverse frequency 0 for rotary pair 1" },
  }
  for _, case in ipairs(cases) do
    T.raises(function() load(parity_model(case[1], case[2])) end, case[3], true)
  end
end)

T.test("a granite multiplier too small for a float is refused (it became 0, read as \"not set\": a multiplier of 1 in silence)", function()
  for _, key in ipairs({ "embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling" }) do
    T.raises(function() load(parity_model("granite", function(c) c[key] = 1e-50 end)) end,
      "\"" .. key .. "\" must be a positive number from 1.17549e-38 to 3.40282e+38 (a float), got 1e-50", true)
  end
end)

T.test("a KV cache whose size (layers x key/value dims x tokens) wraps a size_t is refused (it was allocated at 0 bytes and written past: a crash)", function()
  -- 256 layers of 4096 x 4096 key/value dims, the weights a 32 GiB sparse file (nothing stored),
  -- and a generation of 2^30 tokens: 2^62 floats, 2^64 bytes, 0 as a size_t. In a child: the old
  -- code wrote 64 MiB of keys past a 0-byte cache on the first step.
  local d = T.tmpdir()
  local L, KV = 256, 4096 * 4096
  seer.write_file(d .. "/config.json", json.encode({ model_type = "llama", hidden_size = 1, intermediate_size = 1,
    vocab_size = 2, num_hidden_layers = L, num_attention_heads = 4096, num_key_value_heads = 4096, head_dim = 4096,
    max_position_embeddings = 64, tie_word_embeddings = true }))
  local hdr, off = {}, 0
  local function add(name, shape)
    local n = 2
    for _, s in ipairs(shape) do n = n * s end
    hdr[name] = { dtype = "BF16", shape = shape, data_offsets = { off, off + n } }
    off = off + n
  end
  add("model.embed_tokens.weight", { 2, 1 })
  add("model.norm.weight", { 1 })
  for i = 0, L - 1 do
    local p = "model.layers." .. i .. "."
    add(p .. "input_layernorm.weight", { 1 })
    add(p .. "post_attention_layernorm.weight", { 1 })
    add(p .. "self_attn.q_proj.weight", { KV, 1 })
    add(p .. "self_attn.k_proj.weight", { KV, 1 })
    add(p .. "self_attn.v_proj.weight", { KV, 1 })
    add(p .. "self_attn.o_proj.weight", { 1, KV })
    add(p .. "mlp.gate_proj.weight", { 1, 1 })
    add(p .. "mlp.up_proj.weight", { 1, 1 })
    add(p .. "mlp.down_proj.weight", { 1, 1 })
  end
  local h = json.encode(hdr)
  h = h .. string.rep(" ", (8 - #h % 8) % 8)
  local len, lenb = #h, {}
  for i = 1, 8 do lenb[i] = string.char(len % 256); len = math.floor(len / 256) end
  seer.write_file(d .. "/model.safetensors", table.concat(lenb) .. h)
  T.eq(os.execute(("truncate -s %d '%s/model.safetensors'"):format(8 + #h + off, d)), 0)
  seer.write_file(d .. "/child.lua", ([[
    local m = seer.model.load(%q, { tokenizer = false, weights = "mapped" })
    local ok, g = pcall(m._c.generator, m._c, { 1 }, { max_new_tokens = 2 ^ 30 - 1 })
    if ok then pcall(g.next, g) end
    io.write(ok and "made" or tostring(g))
  ]]):format(d))
  local ok, out = T.sh(("timeout 60 '%s' '%s/child.lua'"):format(SEER, d))
  T.ok(ok, "the child exited 0 (it crashed writing past the cache?): " .. out)
  T.contains(out, "cannot allocate a KV cache of 1073741824 tokens: that many tokens x 256 layers x 16777216 key/value dims")
end)
