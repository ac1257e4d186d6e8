-- Hidden-model fixtures for tests/lua/test_attack_hidden.lua: stories260K copied under a secret
-- id, with the id planted everywhere real checkpoints carry it (and a few places they do not):
-- README.md, NOTICE, LICENSE, notes.txt, a file named after the model, a sub-folder, JSON name
-- fields, free-text JSON values and keys, a \u-escaped copy, the chat template, the safetensors
-- __metadata__, the host path in tokenizer_file. Each model comes in two layouts: a local
-- folder and a Hugging Face cache (models--ORG--NAME/snapshots/REV/* -> ../../blobs/*), and
-- with a LoRA adapter (PEFT layout) made here whose files name it and its base.
local tensor = require "seer.tensor"
local json = require "seer.json"

local M = {}

local function sh(cmd) assert(os.execute(cmd) == 0, "command failed: " .. cmd) end
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end
local function read(path)
  local f = assert(io.open(path, "rb"))
  local t = f:read("*a")
  f:close()
  return t
end

local function rand_hex(n)
  local t = {}
  for i = 1, n do t[i] = string.format("%x", math.random(0, 15)) end
  return table.concat(t)
end

-- A JSON string with every letter of s written as a \u escape (a reader decoding the JSON
-- gets s back; a byte search for s does not find it).
local function u_escaped(s)
  return '"' .. s:gsub("%a", function(c) return string.format("\\u%04x", c:byte()) end) .. '"'
end

---The secret names of one fixture set. Random per run, distinctive, and not words.
---@return table ids {org, name, adapter, parent, rev, adapter_rev}
function M.ids()
  math.randomseed(os.time() + math.floor(os.clock() * 1e6))
  local tag = rand_hex(4)
  return {
    org = "qz7-acme-secret-lab-" .. tag,
    name = "wv3-sneaky-llm-" .. tag,
    adapter = "ry8-covert-adapter-" .. tag,
    parent = "jh5-private-ckpts-" .. tag,
    rev = rand_hex(40),
    adapter_rev = rand_hex(40),
  }
end

-- Plants the id in a copy of stories260K at dir. who: "org/name" as the files would name it;
-- host: the model's own path on this machine (tokenizer_file, notes).
local function plant_model(src, dir, who, host)
  sh(("mkdir -p %s && cp %s/config.json %s/generation_config.json %s/special_tokens_map.json %s/tokenizer.json "
    .. "%s/tokenizer_config.json %s/tokenizer.model %s/LICENSE %s/"):format(q(dir), q(src), q(src), q(src), q(src), q(src),
    q(src), q(src), q(dir)))
  local org, name = who:match("^(.-)/(.*)$")
  write(dir .. "/README.md", "---\nbase_model: " .. who .. "\n---\n# " .. who .. "\n\nFine-tuned by " .. org:upper() .. ".\n")
  write(dir .. "/NOTICE", "Copyright " .. org .. ". The " .. name .. " weights are not public.\n")
  sh(("printf '\\nModel: %%s\\n' %s >> %s/LICENSE"):format(q(who), q(dir)))
  write(dir .. "/notes.txt", "trained at " .. host .. "\n")
  write(dir .. "/" .. name .. ".txt", "x\n")
  sh(("mkdir -p %s/original && printf '{\"name\": \"%%s\"}' %s > %s/original/params.json"):format(q(dir), q(who), q(dir)))
  write(dir .. "/training_args.json", json.encode{ output_dir = host, hub_model_id = who })
  local cfg = json.decode(read(dir .. "/config.json"))
  cfg._name_or_path = who
  cfg.description = "An instruction-tuned " .. name .. " from " .. org .. " (" .. who:upper() .. ")"
  cfg.task_specific_params = { [who] = { note = "per-model settings" } }
  write(dir .. "/config.json", json.encode(cfg, { indent = 2 }))
  -- tokenizer_config.json: the name escaped letter by letter, and the host path
  local tc = read(dir .. "/tokenizer_config.json")
  tc = tc:gsub("^%s*{", function()
    return '{\n  "name_or_path": ' .. u_escaped(who) .. ',\n  "tokenizer_file": ' .. json.encode(host .. "/tokenizer.json")
      .. ',\n  "chat_template": ' .. json.encode("{# " .. who .. " chat format #}{% for m in messages %}{{ m.content }}\n{% endfor %}") .. ','
  end, 1)
  write(dir .. "/tokenizer_config.json", tc)
  write(dir .. "/chat_template.jinja", "{# template of " .. who .. " #}{% for m in messages %}{{ m.content }}{% endfor %}")
  local gen = json.decode(read(dir .. "/generation_config.json"))
  gen._commit_hash = "deadbeef"
  gen.comment = "defaults from " .. name
  write(dir .. "/generation_config.json", json.encode(gen))
  local t = tensor.load(src .. "/model.safetensors", { copy = true })
  tensor.save(dir .. "/model.safetensors", t, { format = "pt", base_model = who, source = host })
end

-- A LoRA adapter (q_proj and v_proj of every layer, r = 2) for stories260K at dir, naming its
-- base and itself.
local function plant_adapter(dir, who, base_who, host)
  sh("mkdir -p " .. q(dir))
  local t = {}
  for l = 0, 4 do
    for _, mod in ipairs({ "q_proj", "v_proj" }) do
      local p = ("base_model.model.model.layers.%d.self_attn.%s."):format(l, mod)
      local out = mod == "q_proj" and 64 or 32
      t[p .. "lora_A.weight"] = tensor.randn(2, 64) * 0.05
      t[p .. "lora_B.weight"] = tensor.randn(out, 2) * 0.05
    end
  end
  tensor.save(dir .. "/adapter_model.safetensors", t, { format = "pt", adapter_of = base_who, trained_as = who })
  write(dir .. "/adapter_config.json", json.encode({
    peft_type = "LORA", r = 2, lora_alpha = 4, target_modules = { "q_proj", "v_proj" }, task_type = "CAUSAL_LM",
    base_model_name_or_path = base_who, revision = json.null, inference_mode = true,
    description = "adapter " .. who .. " on " .. base_who,
  }, { indent = 2 }))
  write(dir .. "/README.md", "# " .. who .. "\nA LoRA for " .. base_who .. " (" .. host .. ")\n")
end

---Local folders: root/<parent>/<name> (the model) and root/<parent>/<adapter>.
---@return {model: string, adapter: string}
function M.local_layout(src, root, ids)
  local model = root .. "/" .. ids.parent .. "/" .. ids.name
  local adapter = root .. "/" .. ids.parent .. "/" .. ids.adapter
  plant_model(src, model, ids.org .. "/" .. ids.name, model)
  plant_adapter(adapter, ids.org .. "/" .. ids.adapter, ids.org .. "/" .. ids.name, adapter)
  return { model = model, adapter = adapter }
end

-- Turns a folder into a cache repo: blobs named by (random) hashes, snapshot symlinks, refs/main.
local function to_cache(folder, hub, org, name, rev)
  local repo = hub .. "/models--" .. org .. "--" .. name
  local snap = repo .. "/snapshots/" .. rev
  sh(("mkdir -p %s/blobs %s %s/refs"):format(q(repo), q(snap), q(repo)))
  write(repo .. "/refs/main", rev)
  local blobs = {}
  local p = io.popen("cd " .. q(folder) .. " && find . -type f | sed 's|^./||'")
  for rel in p:lines() do
    local sha = rand_hex(64)
    blobs[#blobs + 1] = sha
    local depth = select(2, rel:gsub("/", ""))
    sh(("mv %s/%s %s/blobs/%s"):format(q(folder), q(rel), q(repo), sha))
    sh(("mkdir -p \"$(dirname %s/%s)\" && ln -s %s %s/%s"):format(q(snap), q(rel), q(("../"):rep(depth + 2) .. "blobs/" .. sha),
      q(snap), q(rel)))
  end
  p:close()
  sh("rm -rf " .. q(folder))
  return snap, blobs
end

---A Hugging Face cache under hf_home/hub with ORG/NAME and ORG/ADAPTER.
---@return {hub: string, model_snapshot: string, adapter_snapshot: string, blobs: string[]}
function M.cache_layout(src, hf_home, ids)
  local hub = hf_home .. "/hub"
  local stage = hf_home .. "/tmp-build"
  local model_snap = hub .. "/models--" .. ids.org .. "--" .. ids.name .. "/snapshots/" .. ids.rev
  local adapter_snap = hub .. "/models--" .. ids.org .. "--" .. ids.adapter .. "/snapshots/" .. ids.adapter_rev
  plant_model(src, stage .. "/m", ids.org .. "/" .. ids.name, model_snap)
  plant_adapter(stage .. "/a", ids.org .. "/" .. ids.adapter, ids.org .. "/" .. ids.name, adapter_snap)
  local _, b1 = to_cache(stage .. "/m", hub, ids.org, ids.name, ids.rev)
  local _, b2 = to_cache(stage .. "/a", hub, ids.org, ids.adapter, ids.adapter_rev)
  sh("rm -rf " .. q(stage))
  local blobs = {}
  for _, b in ipairs(b1) do blobs[#blobs + 1] = b end
  for _, b in ipairs(b2) do blobs[#blobs + 1] = b end
  return { hub = hub, model_snapshot = model_snap, adapter_snapshot = adapter_snap, blobs = blobs }
end

---The strings that must not be readable inside the sandbox: the ids' parts, the cache's repo
---folder names, revisions and blob hashes, the local parent folder's name.
---@return string[]
function M.fragments(ids, blobs)
  local f = { ids.org, ids.name, ids.adapter, ids.parent, ids.rev, ids.adapter_rev,
              "models--" .. ids.org .. "--" .. ids.name, "models--" .. ids.org .. "--" .. ids.adapter }
  for _, b in ipairs(blobs or {}) do f[#f + 1] = b end
  return f
end

---Where in `text` a fragment occurs (compared as-is lowercased, and letters-and-digits only
---lowercased, so "QZ7 acme", "qz7--acme" and "qz7acme" all count): "fragment N near ...", or nil.
---Written independently of the sandbox's own matcher, so a bug there cannot hide here.
function M.find(text, frags)
  local low = text:lower()
  for i, fr in ipairs(frags) do
    local a = low:find(fr:lower(), 1, true)
    if a then return ("fragment %d (%s) near %q"):format(i, fr, text:sub(math.max(1, a - 60), a + #fr + 40)) end
  end
  local folded = low:gsub("[^%w]", "")
  for i, fr in ipairs(frags) do
    local ff = fr:lower():gsub("[^%w]", "")
    if #ff >= 4 and folded:find(ff, 1, true) then return ("fragment %d (%s), letters and digits only"):format(i, fr) end
  end
  return nil
end

return M
