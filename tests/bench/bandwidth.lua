-- Copy bandwidth of this machine as make bench uses it for the decode bound: best of 5 copies of
-- a 512 MiB buffer (ffi.copy = memcpy, one thread), counting bytes read + bytes written.
-- Prints GB/s.
local ffi = require "ffi"
local n = 512 * 1024 * 1024
local a = ffi.new("uint8_t[?]", n)
local b = ffi.new("uint8_t[?]", n)
ffi.fill(a, n, 1)
ffi.fill(b, n, 2)
local best = math.huge
for _ = 1, 5 do
  local t = seer.now()
  ffi.copy(b, a, n)
  best = math.min(best, seer.now() - t)
end
print(("%.2f"):format(2 * n / best / 1e9))
