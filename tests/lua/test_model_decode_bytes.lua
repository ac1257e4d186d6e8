-- config.decode_bytes / decode_parameters: what one decode step reads of the weights, the
-- denominator of `make bench`'s read bounds (engine/model/model.c count_decode_reads). The
-- expected values are worked out here from the safetensors headers by tensor names, the way a
-- reader of the checkpoint would: every tensor of the language model, once; a token-embedding
-- table counts one row unless it is also the LM head (no head tensor of its own, or a Gemma
-- whose config ties them); gpt2's position table one row; a multimodal checkpoint's vision tower
-- and projector nothing.
local T = require "testing"
local json = require "seer.json"

local parity = seer.script_dir() .. "/../parity/models"
local stories = seer.script_dir() .. "/../fixtures/models/stories260K"

-- { [name] = {dtype = "F32", shape = {...}} } of a model folder's model*.safetensors
local function header(dir)
  local files = {}
  local p = io.popen("ls '" .. dir .. "'")
  for name in p:lines() do
    if name:match("^model.*%.safetensors$") then files[#files + 1] = dir .. "/" .. name end
  end
  p:close()
  local tensors = {}
  for _, path in ipairs(files) do
    local fh = assert(io.open(path, "rb"))
    local b = fh:read(8)
    local n = 0
    for i = 8, 1, -1 do n = n * 256 + b:byte(i) end
    local h = json.decode(fh:read(n))
    fh:close()
    for k, v in pairs(h) do
      if k ~= "__metadata__" then tensors[k] = v end
    end
  end
  return tensors
end

local SIZE = { F32 = 4, BF16 = 2, F16 = 2 }

local function expected(dir)
  local cfg = json.decode(assert(io.open(dir .. "/config.json")):read("a"))
  local t = header(dir)
  local gemma = tostring(cfg.model_type):match("^gemma") ~= nil
  local head_of_own = false
  for name in pairs(t) do
    if name:match("lm_head%.weight$") or name:match("^embed_out%.weight$") then head_of_own = true end
  end
  if gemma then head_of_own = cfg.tie_word_embeddings == false end
  local params, bytes = 0, 0
  for name, v in pairs(t) do
    local n = 1
    for _, d in ipairs(v.shape) do n = n * d end
    local used = not (name:match("vision_tower") or name:match("multi_modal_projector"))
    if gemma and not head_of_own and name:match("lm_head%.weight$") then used = false end
    local token_table = name:match("embed_tokens%.weight$") or name:match("wte%.weight$") or name:match("embed_in%.weight$")
    if (token_table and head_of_own) or name:match("wpe%.weight$") then n = v.shape[2] end
    if used then
      params = params + n
      bytes = bytes + n * SIZE[v.dtype]
    end
  end
  return params, bytes
end

T.test("decode_bytes counts every tensor once and one row of an embedding table that is not the head", function()
  local p = io.popen("ls '" .. parity .. "'")
  local names = {}
  for name in p:lines() do names[#names + 1] = name end
  p:close()
  T.ok(#names >= 20, "the parity models are there")
  local untied, lookups = 0, 0
  for _, name in ipairs(names) do
    local dir = parity .. "/" .. name
    local m = seer.model.load(dir, { tokenizer = false, weights = "mapped" })
    local want_p, want_b = expected(dir)
    T.eq(m.config.decode_parameters, want_p, name .. ": decode_parameters")
    T.eq(m.config.decode_bytes, want_b, name .. ": decode_bytes")
    T.ok(m.config.decode_bytes <= m.config.weight_bytes, name)
    if m.config.decode_bytes < m.config.weight_bytes then lookups = lookups + 1 end
    if m.config.tie_word_embeddings == false then untied = untied + 1 end
  end
  T.ok(untied >= 5 and lookups >= 8, "untied heads, gpt2's positions and vision towers are among them")
end)

T.test("by hand: an untied Llama reads all but 96 of its embedding rows; stories260K (tied) reads all", function()
  -- tests/parity/models/llama: vocab 97, hidden 48, untied
  local m = seer.model.load(parity .. "/llama", { tokenizer = false })
  T.eq(m.config.vocab_size, 97)
  T.eq(m.config.hidden_size, 48)
  T.eq(m.config.decode_parameters, m.config.num_parameters - 96 * 48)
  T.eq(m.config.decode_bytes, m.config.weight_bytes - 96 * 48 * 4)
  local s = seer.model.load(stories, { tokenizer = false })
  T.eq(s.config.decode_bytes, 260032 * 4)
  T.eq(s.config.decode_parameters, 260032)
end)
