--- `seer model ...`: look at and run a model from the shell.
---   seer model info PATH
---   seer model info --devices
---   seer model generate PATH "prompt" [--max-new-tokens N] [--temperature T] [--seed S]
---                                      [--top-k K] [--top-p P] [--threads N] [--precision P]
local M = {}

M.usage = [[
usage: seer model info PATH
       seer model info --devices
       seer model generate PATH PROMPT [--max-new-tokens N] [--temperature T] [--seed S]
                                       [--top-k K] [--top-p P] [--min-p P] [--threads N]
                                       [--device cpu|cuda|cuda:N] [--precision exact|fast]

PATH is a model directory (config.json + safetensors) or a hub id in the Hugging Face cache.
info prints the architecture, dimensions, parameter count, dtypes and what a KV cache takes
(--devices: the CUDA GPUs, their memory and compute capability, or why there are none);
generate streams the continuation of PROMPT (greedy unless --temperature > 0) and then prints
timing on stderr;
--precision fast rounds activations to bf16 to meet bf16 weights (docs/model.md).
]]

local function die(msg)
  io.stderr:write("seer model: ", msg, "\n")
  os.exit(2)
end

local function commas(n)
  local s = tostring(math.floor(n))
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

local function size(bytes)
  if bytes >= 1024 ^ 3 then return ("%.1f GiB"):format(bytes / 1024 ^ 3) end
  if bytes >= 1024 ^ 2 then return ("%.1f MiB"):format(bytes / 1024 ^ 2) end
  return ("%.1f KiB"):format(bytes / 1024)
end

-- What a KV cache takes on the CPU: a token's keys and values over every layer, and the full
-- context's, f32 (bf16 where precision = "fast" changes the linear layers: bf16 weights on a CPU
-- with AVX512_BF16 or AMX; docs/model.md).
local function kv_cache(c)
  local per = c.num_hidden_layers * 2 * c.num_key_value_heads * c.head_dim
  local line = ("%s a token, %s for the %d-token context (f32)"):format(size(per * 4),
    size(per * 4 * c.max_position_embeddings), c.max_position_embeddings)
  if c.dtype == "bf16" and require("seer.core.model").fast_kind() then
    line = line .. (("; %s, %s in bf16 with --precision fast"):format(size(per * 2), size(per * 2 * c.max_position_embeddings)))
  end
  return line
end

local function info(path)
  local model = seer.model.load(path, { weights = "mapped" }) -- metadata only: nothing to read in
  local c = model.config
  local rows = {
    { "path", model.path },
    { "architecture", (c.architecture ~= "" and c.architecture or c.model_type) .. " (model_type " .. c.model_type .. ")" },
    { "layers", c.num_hidden_layers },
    { "hidden size", c.hidden_size },
    { "intermediate size", c.intermediate_size },
    { "attention heads", ("%d query, %d key/value, head_dim %d"):format(c.num_attention_heads, c.num_key_value_heads, c.head_dim) },
    { "vocabulary", c.vocab_size },
    { "context", c.max_position_embeddings },
    { "rope theta", c.rope_theta },
    { "tied embeddings", tostring(c.tie_word_embeddings) },
    { "parameters", commas(c.num_parameters) },
    { "weights", ("%s, %.1f MiB"):format(c.dtype, c.weight_bytes / 1048576) },
    { "decode reads", ("%.1f MiB of weights per token%s"):format(c.decode_bytes / 1048576,
      c.decode_bytes < c.weight_bytes and " (not read: the embedding rows a token does not look up, tensors the model does not use)" or "") },
    { "KV cache", kv_cache(c) },
    { "tokenizer", model.tokenizer and "tokenizer.json" or "none" },
  }
  -- a model folder's files are not to be trusted: its names are shown, not obeyed, by a terminal
  local safe = require("seer.terminal").safe
  for _, r in ipairs(rows) do io.write(("%-18s %s\n"):format(r[1] .. ":", safe(r[2]))) end
end

local function devices()
  local list, why = seer.model.devices()
  if #list == 0 then
    io.write("no CUDA devices: ", why, "\n")
    return
  end
  for _, d in ipairs(list) do
    io.write(("cuda:%d  %s  compute capability %s  %d SMs  %.1f GiB (%.1f GiB free)  %.0f GB/s theoretical\n")
      :format(d.index, d.name, d.compute_capability, d.sm_count, d.memory_bytes / 2^30, d.free_bytes / 2^30,
        d.bandwidth_gbs))
  end
end

local flags = {
  ["--max-new-tokens"] = "max_new_tokens", ["--temperature"] = "temperature", ["--seed"] = "seed",
  ["--top-k"] = "top_k", ["--top-p"] = "top_p", ["--min-p"] = "min_p", ["--threads"] = "threads",
}

local function generate(args)
  local path, prompt = args[1], args[2]
  if not path or not prompt then die("generate needs PATH and PROMPT\n\n" .. M.usage) end
  local opts = { max_new_tokens = 64 }
  local threads, device, precision
  local i = 3
  while i <= #args do
    if args[i] == "--device" then
      device = args[i + 1]
      if not device then die("--device needs cpu, cuda or cuda:N") end
      i = i + 2
      goto continue
    end
    if args[i] == "--precision" then
      precision = args[i + 1]
      if precision ~= "exact" and precision ~= "fast" then die("--precision needs exact or fast") end
      i = i + 2
      goto continue
    end
    local key = flags[args[i]]
    if not key then die(("unknown option '%s'\n\n%s"):format(args[i], M.usage)) end
    local v = tonumber(args[i + 1])
    if not v then die(("%s needs a number"):format(args[i])) end
    if key == "threads" then threads = v else opts[key] = v end
    i = i + 2
    ::continue::
  end
  local t0 = seer.now()
  local model = seer.model.load(path, { threads = threads, device = device, precision = precision })
  local t1 = seer.now()
  if not model.tokenizer then die(model.path .. " has no tokenizer.json; generate needs one to read PROMPT") end
  -- Prompt and continuation are shown as one decoded text, as transformers' TextStreamer does
  -- (skip_prompt = False): the continuation's pieces decoded alone lose the space a
  -- SentencePiece tokenizer puts in front of the first new word ("Once" + "upon" printed
  -- "Onceupon"). Each step prints what the text gained, and holds back an unfinished UTF-8
  -- character. Nothing is printed before generation starts, so an option that generate
  -- refuses is the only line.
  local tok = model.tokenizer
  local all = tok:encode(prompt, { add_special_tokens = true })
  local shown, n = "", 0
  -- On a terminal the text's escape sequences (a model's vocabulary can hold any bytes) are
  -- shown, not obeyed (seer.terminal); into a pipe or a file it goes as generated.
  local out_fn = require("seer.core.host").isatty(1) and require("seer.terminal").safe or tostring
  local function show(final)
    local text = tok:decode(all, { skip_special_tokens = true })
    if not final and text:sub(-3) == "\239\191\189" then return end -- U+FFFD: a character is unfinished
    io.write(out_fn(text:sub(#shown + 1)))
    io.flush()
    shown = text
  end
  opts.stream = function(_, id)
    n = n + 1
    all[#all + 1] = id
    show(false)
  end
  local out = model:generate(prompt, opts)
  show(true)
  local t2 = seer.now()
  io.write("\n")
  io.stdout:flush()
  io.stderr:write(("[%d prompt + %d new tokens; load %.1f ms, generate %.1f ms, %.1f tokens/s]\n")
    :format(#out.prompt_ids, n, (t1 - t0) * 1000, (t2 - t1) * 1000, n / math.max(t2 - t1, 1e-9)))
end

-- Errors from loading or generating are the user's problem to fix, not a bug: one line, no
-- traceback, exit 1.
local function run(fn, ...)
  local ok, err = pcall(fn, ...)
  if not ok then
    io.stderr:write("seer model: ", require("seer.terminal").safe((tostring(err):gsub("^[^:\n]+:%d+: ", ""))), "\n")
    os.exit(1)
  end
end

function M.main(...)
  local args = { ... }
  local sub = table.remove(args, 1)
  if sub == "info" then
    if not args[1] then die("info needs PATH or --devices\n\n" .. M.usage) end
    -- one PATH (or --devices): a second argument was ignored without a word
    if args[2] then die(("info takes one PATH (or --devices); unexpected argument '%s'\n\n%s"):format(args[2], M.usage)) end
    if args[1] == "--devices" then run(devices) else run(info, args[1]) end
  elseif sub == "generate" then
    run(generate, args)
  elseif sub == nil then -- no subcommand: a usage error (exit 2)
    io.stderr:write(M.usage)
    os.exit(2)
  elseif sub == "help" or sub == "--help" or sub == "-h" then
    io.write(M.usage)
  else
    die(("unknown subcommand '%s'; subcommands: info, generate\n\n%s"):format(sub, M.usage))
  end
end

return M
