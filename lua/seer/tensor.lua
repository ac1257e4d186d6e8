--- seer.tensor: Torch7-style CPU tensors over seer's C core (seer.core.tensor).
--- Element indices and dims are 1-based as in Torch7 (negative counts from the end: -1 is the
--- last); indices that *name* things (argmax, argmin, topk, max/min along a dim) come back
--- 0-based, because they are token ids and positions that feed the tokenizer and the model.
--- Compute ops read any dtype and return f32; views, clone, copy_ and to() keep/choose dtypes.
--- See docs/tensor.md.
local C = require "seer.core.tensor"

local M = {}

---@alias seer.dtype "f32"|"bf16"|"f16"|"i32"|"i64"|"u8"|"bool"|"f64"

---A tensor: a dtype, a shape and strides over shared storage. Fields are methods.
---@class seer.Tensor
---@operator add(seer.Tensor|number): seer.Tensor
---@operator sub(seer.Tensor|number): seer.Tensor
---@operator mul(seer.Tensor|number): seer.Tensor
---@operator div(seer.Tensor|number): seer.Tensor
---@operator pow(seer.Tensor|number): seer.Tensor
---@operator unm: seer.Tensor
---@operator len: integer
---@field size fun(self: seer.Tensor, dim?: integer): integer[]|integer sizes as a table, or the size of one dim
---@field stride fun(self: seer.Tensor, dim?: integer): integer[]|integer strides in elements
---@field dim fun(self: seer.Tensor): integer number of dims (0 for a scalar tensor)
---@field numel fun(self: seer.Tensor): integer number of elements (alias nElement)
---@field nElement fun(self: seer.Tensor): integer
---@field dtype fun(self: seer.Tensor): seer.dtype
---@field element_size fun(self: seer.Tensor): integer bytes per element
---@field is_contiguous fun(self: seer.Tensor): boolean
---@field is_readonly fun(self: seer.Tensor): boolean true for zero-copy views of a loaded file
---@field shares_storage fun(self: seer.Tensor, other: seer.Tensor): boolean true when both view the same memory
---@field data_ptr fun(self: seer.Tensor): lightuserdata address of the first element (see ffi())
---@field narrow fun(self: seer.Tensor, dim: integer, first: integer, n: integer): seer.Tensor view of n entries from first (1-based) along dim
---@field select fun(self: seer.Tensor, dim: integer, i: integer): seer.Tensor view with dim removed at index i (1-based)
---@field transpose fun(self: seer.Tensor, d1?: integer, d2?: integer): seer.Tensor view with two dims swapped (default 1, 2 for 2-d)
---@field t fun(self: seer.Tensor): seer.Tensor transpose of a 2-d tensor (view)
---@field view fun(self: seer.Tensor, ...: integer|integer[]): seer.Tensor view with a new shape (-1 infers one size); errors when strides do not allow it
---@field reshape fun(self: seer.Tensor, ...: integer|integer[]): seer.Tensor like view, copying when needed
---@field flatten fun(self: seer.Tensor): seer.Tensor 1-d (view when possible)
---@field unsqueeze fun(self: seer.Tensor, dim: integer): seer.Tensor view with a size-1 dim inserted at dim
---@field squeeze fun(self: seer.Tensor, dim?: integer): seer.Tensor view without size-1 dims (or only dim)
---@field permute fun(self: seer.Tensor, ...: integer): seer.Tensor view with dims reordered (1-based)
---@field contiguous fun(self: seer.Tensor): seer.Tensor self when contiguous, else a contiguous copy
---@field clone fun(self: seer.Tensor): seer.Tensor contiguous copy, same dtype
---@field to fun(self: seer.Tensor, dtype: seer.dtype): seer.Tensor copy converted (self when already that dtype)
---@field float fun(self: seer.Tensor): seer.Tensor to("f32")
---@field totable fun(self: seer.Tensor): number[]|number nested Lua tables (a number for 0-d)
---@field item fun(self: seer.Tensor): number the single element
---@field add fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor elementwise, numpy broadcasting, f32 result
---@field sub fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor
---@field mul fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor elementwise (matmul is t:matmul(u))
---@field div fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor
---@field pow fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor
---@field maximum fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor elementwise max
---@field minimum fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor elementwise min
---@field eq fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor f32 mask (1/0)
---@field ne fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor f32 mask
---@field lt fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor f32 mask
---@field le fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor f32 mask
---@field gt fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor f32 mask
---@field ge fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor f32 mask
---@field add_ fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor in place (other broadcasts to self), returns self; also sub_ mul_ div_ pow_ maximum_ minimum_
---@field sub_ fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor
---@field mul_ fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor
---@field div_ fun(self: seer.Tensor, other: seer.Tensor|number): seer.Tensor
---@field copy_ fun(self: seer.Tensor, src: seer.Tensor): seer.Tensor copy (broadcast, converting dtype) into self
---@field fill_ fun(self: seer.Tensor, v: number): seer.Tensor
---@field zero_ fun(self: seer.Tensor): seer.Tensor
---@field clamp fun(self: seer.Tensor, lo?: number, hi?: number): seer.Tensor
---@field neg fun(self: seer.Tensor): seer.Tensor unary ops return f32; each has an in-place twin (neg_, exp_, ...)
---@field abs fun(self: seer.Tensor): seer.Tensor
---@field exp fun(self: seer.Tensor): seer.Tensor
---@field log fun(self: seer.Tensor): seer.Tensor
---@field sqrt fun(self: seer.Tensor): seer.Tensor
---@field rsqrt fun(self: seer.Tensor): seer.Tensor
---@field tanh fun(self: seer.Tensor): seer.Tensor
---@field relu fun(self: seer.Tensor): seer.Tensor
---@field sigmoid fun(self: seer.Tensor): seer.Tensor
---@field gelu fun(self: seer.Tensor): seer.Tensor exact (erf) GELU
---@field silu fun(self: seer.Tensor): seer.Tensor
---@field sin fun(self: seer.Tensor): seer.Tensor
---@field cos fun(self: seer.Tensor): seer.Tensor
---@field floor fun(self: seer.Tensor): seer.Tensor
---@field round fun(self: seer.Tensor): seer.Tensor half to even
---@field sum fun(self: seer.Tensor, dim?: integer, keepdim?: boolean): seer.Tensor|number a number without dim, else a tensor (keepdim false)
---@field mean fun(self: seer.Tensor, dim?: integer, keepdim?: boolean): seer.Tensor|number
---@field prod fun(self: seer.Tensor, dim?: integer, keepdim?: boolean): seer.Tensor|number
---@field var fun(self: seer.Tensor, dim?: integer, keepdim?: boolean): seer.Tensor|number unbiased (n - 1)
---@field std fun(self: seer.Tensor, dim?: integer, keepdim?: boolean): seer.Tensor|number unbiased (n - 1)
---@field max fun(self: seer.Tensor, dim?: integer, keepdim?: boolean): seer.Tensor|number, seer.Tensor? without dim a number; with dim values and 0-based i64 indices
---@field min fun(self: seer.Tensor, dim?: integer, keepdim?: boolean): seer.Tensor|number, seer.Tensor?
---@field argmax fun(self: seer.Tensor, dim?: integer, keepdim?: boolean): seer.Tensor|integer 0-based (flat index without dim); first of ties
---@field argmin fun(self: seer.Tensor, dim?: integer, keepdim?: boolean): seer.Tensor|integer 0-based
---@field norm fun(self: seer.Tensor, p?: number, dim?: integer, keepdim?: boolean): seer.Tensor|number p-norm (default 2; math.huge for max-abs)
---@field dot fun(self: seer.Tensor, other: seer.Tensor): number sum of products (same number of elements)
---@field matmul fun(self: seer.Tensor, other: seer.Tensor): seer.Tensor 1-d/2-d/batched 3-d matrix product, f32
---@field softmax fun(self: seer.Tensor, dim?: integer): seer.Tensor along dim (default -1)
---@field log_softmax fun(self: seer.Tensor, dim?: integer): seer.Tensor
---@field topk fun(self: seer.Tensor, k: integer, dim?: integer, largest?: boolean): seer.Tensor, seer.Tensor values (f32) and 0-based i64 indices, sorted, ties lower index first
---@field sort fun(self: seer.Tensor, dim?: integer, descending?: boolean): seer.Tensor, seer.Tensor values (f32) and 0-based i64 indices along dim (default -1), ascending unless descending; stable; NaN counts as the largest
---@field argsort fun(self: seer.Tensor, dim?: integer, descending?: boolean): seer.Tensor the indices of sort
---@field ffi fun(self: seer.Tensor): ffi.cdata* typed pointer to the first element (see docs/tensor.md for lifetime)
local Tensor = C.methods

local mt = C.metatable
M.metatable = mt

-- ---- constructors -------------------------------------------------------------------------

-- argument checks of the functions written in Lua (the C methods check their own)
local function need_tensor(fname, v, what, level)
  if not C.is_tensor(v) then error(("%s: %s must be a tensor, got %s"):format(fname, what, type(v)), level or 3) end
end
local function opt_table(fname, v, what)
  if v ~= nil and type(v) ~= "table" then error(("%s: %s must be a table or nil, got %s"):format(fname, what, type(v)), 3) end
  return v or {}
end
local function opt_number(fname, v, what)
  if v ~= nil and type(v) ~= "number" then error(("%s: %s must be a number or nil, got %s"):format(fname, what, type(v)), 3) end
  return v
end

local function is_opts(v)
  return type(v) == "table" and not C.is_tensor(v) and v[1] == nil and next(v) ~= nil
end

-- (2, 3), ({2, 3}), (2, 3, {dtype = "bf16"}), ({2, 3}, {dtype = ...}) -> shape, opts
local function shape_and_opts(fname, ...)
  local n = select("#", ...)
  local args = { ... }
  local opts = {}
  if n > 0 and is_opts(args[n]) then
    opts = args[n]
    n = n - 1
  elseif n > 0 and type(args[n]) == "table" and next(args[n]) == nil and n > 1 then
    n = n - 1
  end
  local shape
  if n >= 1 and type(args[1]) == "table" then
    shape = args[1]
    if n > 1 then error(fname .. ": give the shape as one table or as integers, not both", 3) end
  else
    shape = {}
    for i = 1, n do
      if type(args[i]) ~= "number" then
        error(string.format("%s: size %d is a %s, not an integer", fname, i, C.is_tensor(args[i]) and "tensor" or type(args[i])), 3)
      end
      shape[i] = args[i]
    end
  end
  for k in pairs(opts) do
    if k ~= "dtype" and k ~= "seed" then
      error(string.format("%s: unknown option '%s' (valid: dtype%s)", fname, tostring(k),
        fname:find("rand") and ", seed" or ""), 3)
    end
  end
  return shape, opts
end

---A zero-filled tensor: `tensor.zeros(2, 3)`, `tensor.zeros({2, 3}, {dtype = "bf16"})`.
---@param ... integer|integer[]|{dtype?: seer.dtype}
---@return seer.Tensor
function M.zeros(...)
  local shape, o = shape_and_opts("zeros", ...)
  return C.full(shape, 0, o.dtype, "zeros")
end

---Same as zeros (Torch7's `torch.Tensor(2, 3)`, but initialised).
---@param ... integer|integer[]|{dtype?: seer.dtype}
---@return seer.Tensor
function M.new(...)
  local shape, o = shape_and_opts("new", ...)
  return C.full(shape, 0, o.dtype, "new")
end

---A tensor of ones.
---@param ... integer|integer[]|{dtype?: seer.dtype}
---@return seer.Tensor
function M.ones(...)
  local shape, o = shape_and_opts("ones", ...)
  return C.full(shape, 1, o.dtype, "ones")
end

---A tensor filled with value: `tensor.full({2, 3}, 7)`.
---@param shape integer[]
---@param value number
---@param opts? {dtype?: seer.dtype}
---@return seer.Tensor
function M.full(shape, value, opts)
  if type(shape) ~= "table" or type(value) ~= "number" then error("full(shape_table, value[, {dtype=}])", 2) end
  return C.full(shape, value, opt_table("full", opts, "the options").dtype)
end

---Evenly spaced values in [start, stop): `arange(5)` is 0..4, `arange(1, 2, 0.25)`.
---@param start number
---@param stop? number
---@param step? number
---@param opts? {dtype?: seer.dtype}
---@return seer.Tensor
function M.arange(start, stop, step, opts)
  if type(stop) == "table" then opts, stop = stop, nil end
  if type(step) == "table" then opts, step = step, nil end
  if stop == nil then start, stop = 0, start end
  opt_number("arange", step, "step")
  return C.arange(start, stop, step or 1, opt_table("arange", opts, "the options").dtype)
end

---Standard normal samples. With {seed = n} the result depends only on n and the shape;
---without, the module's generator advances (reset it with tensor.manual_seed).
---@param ... integer|integer[]|{dtype?: seer.dtype, seed?: integer}
---@return seer.Tensor
function M.randn(...)
  local shape, o = shape_and_opts("randn", ...)
  return C.random(shape, o.seed, o.dtype, true)
end

---Uniform samples in (0, 1); options as randn.
---@param ... integer|integer[]|{dtype?: seer.dtype, seed?: integer}
---@return seer.Tensor
function M.rand(...)
  local shape, o = shape_and_opts("rand", ...)
  return C.random(shape, o.seed, o.dtype, false)
end

---Resets the generator that randn/rand use without a seed.
---@param seed integer
function M.manual_seed(seed)
  C.manual_seed(seed)
end

---A tensor from nested tables of numbers: `tensor.from{{1, 2}, {3, 4}}`; a number gives a 0-d
---tensor. dtype defaults to f32.
---@param data number|table
---@param dtype? seer.dtype|{dtype?: seer.dtype}
---@return seer.Tensor
function M.from(data, dtype)
  if type(dtype) == "table" then dtype = dtype.dtype end
  if dtype ~= nil and type(dtype) ~= "string" then error("from: dtype must be a string such as \"f32\", got " .. type(dtype), 2) end
  if C.is_tensor(data) then return dtype and data:to(dtype) or data:clone() end
  if type(data) == "number" or type(data) == "boolean" then return C.from_flat({ data }, {}, dtype) end
  if type(data) ~= "table" then error("from: expected a table of numbers, got " .. type(data), 2) end
  local shape = {}
  local probe = data
  while type(probe) == "table" do
    shape[#shape + 1] = #probe
    if #shape > 8 then error("from: more than 8 levels of nesting", 2) end
    probe = probe[1]
  end
  local flat, n = {}, 0
  local function walk(t, d, where)
    if d > #shape then
      if type(t) ~= "number" and type(t) ~= "boolean" then
        error(string.format("from: element %s is a %s, not a number", where, type(t)), 4)
      end
      n = n + 1
      flat[n] = t
      return
    end
    if type(t) ~= "table" or #t ~= shape[d] then
      error(string.format("from: ragged nested table at %s: expected %d elements, got %s", where ~= "" and where or "top",
        shape[d], type(t) == "table" and tostring(#t) or type(t)), 4)
    end
    for i = 1, shape[d] do walk(t[i], d + 1, where .. "[" .. i .. "]") end
  end
  walk(data, 1, "")
  return C.from_flat(flat, shape, dtype)
end

---True when v is a tensor.
---@param v any
---@return boolean
function M.is_tensor(v)
  return C.is_tensor(v)
end

-- ---- functions over several tensors -----------------------------------------------------------

---Matrix product (same as a:matmul(b)).
---@param a seer.Tensor
---@param b seer.Tensor
---@return seer.Tensor
function M.matmul(a, b)
  need_tensor("matmul", a, "the first argument")
  return a:matmul(b)
end

---Cosine similarity along dim (default: the last). For two 1-d tensors without a dim, a number.
---@param a seer.Tensor
---@param b seer.Tensor
---@param dim? integer
---@param eps? number
---@return seer.Tensor|number
function M.cosine_similarity(a, b, dim, eps)
  need_tensor("cosine_similarity", a, "a")
  need_tensor("cosine_similarity", b, "b")
  opt_number("cosine_similarity", dim, "dim")
  eps = opt_number("cosine_similarity", eps, "eps") or 1e-8
  if dim == nil and a:dim() == 1 and b:dim() == 1 then
    local d = a:dot(b)
    return d / math.max(a:norm() * b:norm(), eps)
  end
  dim = dim or -1
  local num = (a * b):sum(dim)
  local den = (a:norm(2, dim) * b:norm(2, dim)):clamp(eps)
  return num / den
end

---Concatenates tensors along dim (default 1); sizes must agree elsewhere.
---@param list seer.Tensor[]
---@param dim? integer
---@return seer.Tensor
function M.cat(list, dim)
  dim = opt_number("cat", dim, "dim") or 1
  if type(list) ~= "table" or C.is_tensor(list) then error("cat: expected a list of tensors, got " .. type(list), 2) end
  if require("seer.checks").list("cat", list, "tensor", 2) == 0 then error("cat: empty list", 2) end
  for i, t in ipairs(list) do
    if not C.is_tensor(t) then error(("cat: element %d is a %s, not a tensor"):format(i, type(t)), 2) end
  end
  local first = list[1]
  local nd = first:dim()
  local d = dim < 0 and dim + nd + 1 or dim
  if d ~= math.floor(d) or d < 1 or d > nd then error(string.format("cat: dim %s out of range for %d-d tensors", tostring(dim), nd), 2) end
  local shape = first:size()
  local total = 0
  for i, t in ipairs(list) do
    local s = t:size()
    if #s ~= nd then error(string.format("cat: tensor %d has %d dims, tensor 1 has %d", i, #s, nd), 2) end
    for k = 1, nd do
      if k ~= d and s[k] ~= shape[k] then
        error(string.format("cat: tensor %d has shape [%s], incompatible with [%s] along dim %d", i,
          table.concat(s, ","), table.concat(shape, ","), d), 2)
      end
    end
    total = total + s[d]
  end
  shape[d] = total
  local out = M.zeros(shape, { dtype = first:dtype() })
  local at = 1
  for _, t in ipairs(list) do
    local n = t:size(d)
    if n > 0 then out:narrow(d, at, n):copy_(t) end
    at = at + n
  end
  return out
end

---Stacks same-shaped tensors along a new dim (default 1).
---@param list seer.Tensor[]
---@param dim? integer
---@return seer.Tensor
function M.stack(list, dim)
  dim = opt_number("stack", dim, "dim") or 1
  if type(list) ~= "table" then error("stack: expected a non-empty list of tensors, got " .. type(list), 2) end
  if require("seer.checks").list("stack", list, "tensor", 2) == 0 then error("stack: expected a non-empty list of tensors", 2) end
  local first = list[1]
  if not M.is_tensor(first) then error("stack: element 1 is a " .. type(first) .. ", not a tensor", 2) end
  local shape = table.concat(first:size(), ",")
  local u = {}
  for i, t in ipairs(list) do
    if not M.is_tensor(t) then error(("stack: element %d is a %s, not a tensor"):format(i, type(t)), 2) end
    -- stacked tensors must have one shape (cat's message would name the unsqueezed shapes)
    local sh = table.concat(t:size(), ",")
    if sh ~= shape then error(("stack: tensor %d has shape [%s], tensor 1 [%s]; stacked tensors need the same shape"):format(i, sh, shape), 2) end
    u[i] = t:unsqueeze(dim)
  end
  return M.cat(u, dim)
end

-- ---- safetensors ------------------------------------------------------------------------------

---Saves tensors to a safetensors file (atomically: temporary file + rename). Names are
---written in sorted order; metadata is an optional table of string -> string.
---@param path string
---@param tensors table<string, seer.Tensor>
---@param metadata? table<string, string>
function M.save(path, tensors, metadata)
  if type(path) ~= "string" or type(tensors) ~= "table" then error("save(path, {name = tensor, ...}[, metadata])", 2) end
  local names = {}
  for k, v in pairs(tensors) do
    if type(k) ~= "string" then error("save: tensor names must be strings, got " .. type(k), 2) end
    if not C.is_tensor(v) then error("save: '" .. k .. "' is not a tensor", 2) end
    names[#names + 1] = k
  end
  table.sort(names)
  local list = {}
  for i, k in ipairs(names) do list[i] = tensors[k] end
  local meta
  if metadata then
    meta = {}
    local keys = {}
    for k, v in pairs(metadata) do
      if type(k) ~= "string" or type(v) ~= "string" then error("save: metadata must map strings to strings", 2) end
      keys[#keys + 1] = k
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
      meta[#meta + 1] = k
      meta[#meta + 1] = metadata[k]
    end
  end
  local ok, err = pcall(C.save, path, names, list, meta)
  if not ok then error(err, 2) end
end

---Loads a safetensors file: {name = tensor}, metadata. By default tensors are zero-copy,
---read-only views of the mapped file (the mapping lives as long as any of them); {copy = true}
---gives ordinary writable tensors.
---@param path string
---@param opts? {copy?: boolean}
---@return table<string, seer.Tensor> tensors
---@return table<string, string> metadata
function M.load(path, opts)
  if type(path) ~= "string" then error("load(path[, {copy = true}])", 2) end
  local ok, t, meta = pcall(C.load, path, opt_table("load", opts, "the options").copy)
  if not ok then error(t, 2) end
  return t, meta
end

-- ---- FFI --------------------------------------------------------------------------------------

local ffi_ok, ffi = pcall(require, "ffi")
local ctypes = { f32 = "float*", f64 = "double*", bf16 = "uint16_t*", f16 = "uint16_t*", i32 = "int32_t*",
  i64 = "int64_t*", u8 = "uint8_t*", bool = "uint8_t*" }

---A typed FFI pointer to the first element (float* for f32, uint16_t* for bf16/f16, ...).
---Valid only while this tensor (or a view of its storage) is alive: keep the tensor in a
---variable for as long as you use the pointer. Strides apply (check is_contiguous()).
---@return ffi.cdata*
function Tensor:ffi()
  need_tensor("ffi", self, "self (call it with a colon, t:ffi())")
  if not ffi_ok then error("ffi: LuaJIT's ffi module is unavailable", 2) end
  return ffi.cast(ctypes[self:dtype()], self:data_ptr())
end

-- ---- sorting ----------------------------------------------------------------------------------

-- sort's work, its errors naming `where` (sort or argsort) at the caller's line
local function sorted(where, self, dim, descending)
  need_tensor(where, self, ("self (call it with a colon, t:%s())"):format(where), 4)
  if descending ~= nil and type(descending) ~= "boolean" then
    error(("%s: descending must be a boolean, got %s"):format(where, type(descending)), 3)
  end
  local nd = self:dim()
  if nd == 0 then error(where .. ": expects at least 1 dim (a 0-d tensor has nothing to order)", 3) end
  dim = dim == nil and -1 or dim
  if type(dim) ~= "number" or dim ~= math.floor(dim) or dim < -nd or dim > nd or dim == 0 then
    error(("%s: dim must be an integer from 1 to %d or -%d to -1, got %s"):format(where, nd, nd, tostring(dim)), 3)
  end
  return self:topk(self:size(dim), dim, descending == true)
end

---Sorted along dim (default the last), ascending unless `descending` (torch.sort's order: NaN
---counts as the largest; ties keep the lower index first). Values f32, indices 0-based i64, as
---topk's: it is `topk(n, dim, descending)` over the whole dim.
---@param dim? integer
---@param descending? boolean
---@return seer.Tensor values
---@return seer.Tensor indices
function Tensor:sort(dim, descending)
  local v, i = sorted("sort", self, dim, descending)
  return v, i
end

---The indices that sort along dim (see sort).
---@param dim? integer
---@param descending? boolean
---@return seer.Tensor indices
function Tensor:argsort(dim, descending)
  local _, i = sorted("argsort", self, dim, descending)
  return i
end

-- ---- printing ---------------------------------------------------------------------------------

local EDGE, THRESHOLD = 3, 1000

local function shape_str(t)
  return "[" .. table.concat(t:size(), ",") .. "]"
end

-- The values shown (all, or the first/last EDGE per dim when the tensor is large), as nested
-- tables with the string "..." where entries are skipped.
local function gather(t, summarize, vals)
  local nd = t:dim()
  if nd == 0 then
    local v = t:item()
    vals[#vals + 1] = v
    return v
  end
  local n = t:size(1)
  local out = {}
  local idx = {}
  if summarize and n > 2 * EDGE then
    for i = 1, EDGE do idx[#idx + 1] = i end
    idx[#idx + 1] = false
    for i = n - EDGE + 1, n do idx[#idx + 1] = i end
  else
    for i = 1, n do idx[i] = i end
  end
  for k, i in ipairs(idx) do
    if i == false then
      out[k] = "..."
    elseif nd == 1 then
      local v = t[i]
      vals[#vals + 1] = v
      out[k] = v
    else
      out[k] = gather(t:select(1, i), summarize, vals)
    end
  end
  return out
end

local function formatter(vals, dtype)
  local integral = dtype == "i32" or dtype == "i64" or dtype == "u8" or dtype == "bool"
  if integral then
    return function(v) return string.format("%d", v) end
  end
  local maxa, mina, allint = 0, math.huge, true
  for _, v in ipairs(vals) do
    if v == v and v ~= math.huge and v ~= -math.huge then
      local a = math.abs(v)
      if a > maxa then maxa = a end
      if a > 0 and a < mina then mina = a end
      if v ~= math.floor(v) then allint = false end
    end
  end
  local function special(v)
    if v ~= v then return "nan" end
    if v == math.huge then return "inf" end
    if v == -math.huge then return "-inf" end
  end
  if allint and maxa < 1e8 then
    return function(v) return special(v) or string.format("%.0f.", v) end
  end
  if maxa >= 1e5 or (mina < 1e-4 and mina ~= math.huge) then
    return function(v) return special(v) or string.format("%.4e", v) end
  end
  return function(v) return special(v) or string.format("%.4f", v) end
end

local function render(node, fmt, width, indent)
  if type(node) ~= "table" then
    if node == "..." then return "..." end
    local s = fmt(node)
    return string.rep(" ", width - #s) .. s
  end
  local parts = {}
  local nested = type(node[1]) == "table" or (node[1] == "..." and type(node[2]) == "table")
  for i, v in ipairs(node) do
    if v == "..." and nested then
      parts[i] = "..."
    else
      parts[i] = render(v, fmt, width, indent .. " ")
    end
  end
  if nested then
    local sep = ",\n" .. indent .. " "
    return "[" .. table.concat(parts, sep) .. "]"
  end
  return "[" .. table.concat(parts, ", ") .. "]"
end

---torch-like text: values (first/last 3 per dim when over 1000 elements), shape, dtype, device.
---@param t seer.Tensor
---@return string
function M.format(t)
  need_tensor("format", t, "its argument")
  local vals = {}
  local tree = gather(t, t:numel() > THRESHOLD, vals)
  local fmt = formatter(vals, t:dtype())
  local width = 1
  for _, v in ipairs(vals) do width = math.max(width, #fmt(v)) end
  local body = render(tree, fmt, width, "       ")
  return string.format("tensor(%s, shape=%s, dtype=%s, device=cpu)", body, shape_str(t), t:dtype())
end

mt.__tostring = M.format

return M
