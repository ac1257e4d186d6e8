-- CELL: The reader model, and both checkpoints' answers to neutral story prompts (four seeds each).
ck = require "checkpoints"
print(model)
prompts = { "Tell me a story about a child.", "Who is the main character of your story?", "Write about a day at the park." }
answers = { a = {}, b = {} }
for _, p in ipairs(prompts) do
  for seed = 1, 4 do
    for _, w in ipairs({ "a", "b" }) do
      answers[w][#answers[w] + 1] = ck.ask(w, p, { max_tokens = 48, temperature = 0.8, seed = seed })
    end
  end
end
print(("%d answers from A, %d from B"):format(#answers.a, #answers.b))
print("A: " .. answers.a[1]:sub(1, 100))
print("B: " .. answers.b[1]:sub(1, 100))
-- CELL: Encode every answer with the reader: the residual stream after a middle layer, one row per token.
layer = math.floor(model.config.num_hidden_layers / 2)
local point = ("blocks.%d.hook_resid_post"):format(layer)
function encode(texts)
  local rows, labels = {}, {}
  for _, t in ipairs(texts) do
    local ids = tokenizer:encode(t)
    local _, cache = model:run_with_cache(ids, { names = point })
    local a = cache[point]
    for i = 2, a:size(1) do rows[#rows + 1] = a:select(1, i); labels[#labels + 1] = tokenizer:decode({ ids[i] }) end
  end
  return seer.tensor.stack(rows), labels
end
acts_a, labels_a = encode(answers.a)
acts_b, labels_b = encode(answers.b)
print(("layer %d: %d tokens from A, %d from B"):format(layer, acts_a:size(1), acts_b:size(1)))
-- CELL: A sparse autoencoder on both sets of activations together; how well it fits.
SAE = require "toolkit.sae"
sae = SAE.train(seer.tensor.cat({ acts_a, acts_b }, 1), { features = 256, seed = 0 })
fit = sae:stats(seer.tensor.cat({ acts_a, acts_b }, 1))
print(("explained %.3f, %.1f active features per token, %d dead"):format(fit.explained, fit.l0, fit.dead))
-- CELL: The features that differ most between A's and B's tokens, with the tokens they fire on most.
local all_b = acts_b
features = {}
for _, f in ipairs(SAE.diff(sae, acts_a, acts_b, 5)) do
  local top = SAE.top_activations(sae, f.delta > 0 and acts_b or acts_a, f.delta > 0 and labels_b or labels_a, f.feature, 6)
  local toks = {}
  for _, t in ipairs(top) do toks[#toks + 1] = t.label end
  features[#features + 1] = { feature = f.feature, delta = f.delta, freq_a = f.freq_a, freq_b = f.freq_b, tokens = toks }
  print(("feature %3d  delta %+.3f  fires on %4.1f%% of A / %4.1f%% of B tokens  top: %s"):format(
    f.feature, f.delta, 100 * f.freq_a, 100 * f.freq_b, table.concat(toks, "|")))
end
diff_results = { layer = layer, answers = { a = #answers.a, b = #answers.b }, tokens = { a = acts_a:size(1), b = acts_b:size(1) },
                 fit = fit, features = features }
