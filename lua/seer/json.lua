--- seer.json: JSON text to Lua values and back. The behaviour lives in C (engine/json/json.c,
--- the module seer.core.json, built on cJSON); this file documents it for the language server
--- and hands out the C functions themselves.
---
--- How values map:
---   JSON null    <-> json.null (a unique sentinel; tostring gives "json.null")
---   true/false   <-> booleans
---   numbers      <-> Lua numbers (integral values up to 2^63 print without a decimal point,
---                    others print as the shortest text that reads back exactly; -0 stays -0)
---   strings      <-> Lua strings, which must be valid UTF-8 (NUL bytes are fine: \u0000)
---   arrays       <-> tables with keys exactly 1..n, marked with json.array when decoded
---   objects      <-> tables with string keys only, marked with json.object when decoded
--- Object keys are written in sorted (byte) order, so the same value always gives the same text.
---
--- Errors are Lua errors whose message starts with "json.encode:" or "json.decode:". Encode
--- errors name the place in the value as a JSON path, "$" being the value itself, ".key" or
--- ["odd key"] an object member and [i] an array element, i counted from 1 as in Lua
--- (e.g. "$.users[2].name"). Decode errors give the 0-based byte offset, the 1-based line and
--- column (in characters) and the text near the problem.
---@class seerjson
---@field null seerjson.null the value of JSON null; compare with `v == json.null`
---@field MODEL_MAX_VALUES {safetensors_header: integer, config: integer, tokenizer: integer} the max_values that loaders give json.decode for a model folder's files, which may be hostile (the C loaders use the same limits, engine/json/json.h): a safetensors header (4 million), config.json and the other small JSON files (1 million), tokenizer.json and vocab.json (8 million)
local M = {}

---The json.null sentinel (a userdata). `tostring(json.null) == "json.null"`.
---@class seerjson.null: userdata

---@class seerjson.encode_opts
---@field indent? integer pretty-print with this many spaces per level (0 to 64): one member per line, `"key": value`; absent: compact, no spaces at all (`{"a":[1,2]}`)
---@field empty? "object"|"array" what an empty table without a json.array/json.object mark becomes (default "object": `{}`)

---@class seerjson.decode_opts
---@field null? any what JSON null decodes to instead of json.null (e.g. `false`); nil cannot be chosen, since a table cannot hold it
---@field max_values? integer refuse a text of more values than this (arrays, objects, strings and keys, numbers, literals), counted before anything is built: many tiny values cost tens of bytes each once decoded

---Encode a Lua value as JSON text.
---
---A table whose keys are exactly 1..n (n >= 1) becomes an array, a table whose keys are all
---strings an object; json.array/json.object decide for a marked table (and for an empty one).
---Any other table is an error naming the path and the key: mixed number and string keys,
---holes (use json.null for them), keys that are neither strings nor integers >= 1.
---A table or userdata with a `__tojson` metamethod is encoded as whatever `__tojson(v)`
---returns (each such call counts as one nesting level).
---
---Errors: NaN and +-inf (JSON has neither); functions, threads, userdata without __tojson,
---light userdata, cdata; cycles ("cycle at $.a.b (the table at $.a contains itself)");
---nesting deeper than 1000 levels; strings or keys that are not valid UTF-8 (the message gives
---the byte offset inside the string).
---@param value any nil encodes as `null`
---@param opts? seerjson.encode_opts
---@return string json
function M.encode(value, opts) end

---Decode JSON text into a Lua value.
---
---The text must be valid UTF-8 (checked first; a leading byte order mark is skipped) and hold
---exactly one JSON value, with nothing but white space around it. Errors read like
---`json.decode: invalid JSON at byte 7 (line 1, column 8): near 'x]'` (byte offsets from 0,
---lines and columns from 1), and an empty or blank text gives `json.decode: empty input`.
---Duplicate object keys: the last one wins. \u escapes (surrogate pairs included) become
---UTF-8 (\u0000 a NUL byte); unpaired surrogates are an error.
---Numbers become Lua numbers (out-of-range ones such as 1e400 become +-math.huge; number
---tokens longer than 63 characters are rejected). Arrays and objects come back marked, so
---`json.encode(json.decode("[]")) == "[]"`. Nesting deeper than 1000 levels is an error.
---@param text string
---@param opts? seerjson.decode_opts
---@return any value
function M.decode(text, opts) end

---Encode with indentation: the same as `json.encode(value, {indent = 2})`; opts may set
---another indent or `empty`.
---@param value any
---@param opts? seerjson.encode_opts
---@return string json
function M.pretty(value, opts) end

---Mark a table as a JSON array, so that it encodes as `[]` when empty (and a string key in it
---is an error). Returns t; with no argument, a new empty marked table. A table that already has
---a metatable of its own cannot be marked (give it a __tojson metamethod instead).
---@generic T: table
---@param t? T
---@return T
function M.array(t) end

---Mark a table as a JSON object, so that it encodes as `{}` when empty (and a number key in it
---is an error). Returns t; with no argument, a new empty marked table.
---@generic T: table
---@param t? T
---@return T
function M.object(t) end

---Whether v is a table marked by json.array (decoded arrays are).
---@param v any
---@return boolean
function M.is_array(v) end

---Whether v is a table marked by json.object (decoded objects are).
---@param v any
---@return boolean
function M.is_object(v) end

-- The stubs above carry the annotations; the C functions replace them, so that no Lua frame
-- sits between the caller and the C code and argument errors name the function.
local core = require "seer.core.json"
M.encode = core.encode
M.decode = core.decode
M.pretty = core.pretty
M.array = core.array
M.object = core.object
M.is_array = core.is_array
M.is_object = core.is_object
M.null = core.null
M.MODEL_MAX_VALUES = core.MODEL_MAX_VALUES

return M
