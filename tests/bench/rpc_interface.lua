--- The interface `make bench` serves (tests/bench/rpc.lua): a trivial call and a 1 MB argument.

---Returns its argument.
---@param x any
---@return any
function expose.ping(x) return x end

---The length of a string.
---@param data string
---@return integer
function expose.size(data) return #data end
