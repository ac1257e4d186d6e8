--- seer.harness.prices: list prices in US dollars per million tokens, used for the cost in
--- transcripts. A model matches the longest key that begins its name, so dated ids
--- ("claude-sonnet-4-5-20250929") find their family. Change a price, or add a model, by
--- assigning to this table (`require("seer.harness.prices")["my-model"] = {...}`) or per run
--- with run_agent{prices = {...}}. Prices change; these were the published list prices in
--- late 2025 and are not checked against any API.
---@class seerharness.price
---@field input number per million input tokens
---@field output number per million output tokens
---@field cache_write? number per million tokens written to the prompt cache (default 1.25 x input)
---@field cache_read? number per million tokens read from the prompt cache (default 0.1 x input)
return {
  ["claude-opus-4-5"] = { input = 5, output = 25, cache_write = 6.25, cache_read = 0.5 },
  ["claude-opus-4-1"] = { input = 15, output = 75, cache_write = 18.75, cache_read = 1.5 },
  ["claude-opus-4"] = { input = 15, output = 75, cache_write = 18.75, cache_read = 1.5 },
  ["claude-sonnet-4-5"] = { input = 3, output = 15, cache_write = 3.75, cache_read = 0.3 },
  ["claude-sonnet-4"] = { input = 3, output = 15, cache_write = 3.75, cache_read = 0.3 },
  ["claude-3-7-sonnet"] = { input = 3, output = 15, cache_write = 3.75, cache_read = 0.3 },
  ["claude-haiku-4-5"] = { input = 1, output = 5, cache_write = 1.25, cache_read = 0.1 },
  ["claude-3-5-haiku"] = { input = 0.8, output = 4, cache_write = 1, cache_read = 0.08 },
  ["gpt-4.1"] = { input = 2, output = 8, cache_write = 2, cache_read = 0.5 },
  ["gpt-4.1-mini"] = { input = 0.4, output = 1.6, cache_write = 0.4, cache_read = 0.1 },
  ["gpt-4.1-nano"] = { input = 0.1, output = 0.4, cache_write = 0.1, cache_read = 0.025 },
  ["gpt-4o"] = { input = 2.5, output = 10, cache_write = 2.5, cache_read = 1.25 },
  ["gpt-4o-mini"] = { input = 0.15, output = 0.6, cache_write = 0.15, cache_read = 0.075 },
  ["gpt-5"] = { input = 1.25, output = 10, cache_write = 1.25, cache_read = 0.125 },
  ["gpt-5-mini"] = { input = 0.25, output = 2, cache_write = 0.25, cache_read = 0.025 },
  ["gemini-2.5-pro"] = { input = 1.25, output = 10, cache_write = 1.25, cache_read = 0.31 },
  ["gemini-2.5-flash"] = { input = 0.3, output = 2.5, cache_write = 0.3, cache_read = 0.075 },
}
