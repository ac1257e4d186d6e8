--- seer.safe_fs: file operations of the host in a folder the sandbox can write (the workspace,
--- the run and log folders, an output folder inside one of them). Paths are relative to a root
--- and resolved beneath it without following any symlink (openat2 RESOLVE_BENEATH |
--- RESOLVE_NO_SYMLINKS, or an O_NOFOLLOW walk); only regular files are read, reads are
--- bounded, writes are atomic (engine/sandbox/safe_fs.c; docs/sandbox.md "Host-side file
--- operations").
---
---   local fs = require("seer.safe_fs").root(sandbox.workspace_dir, "the sandbox's workspace")
---   fs:write("lib/tools.lua", code, { mkdirs = true })
---   local text = fs:read("notes.txt", { max = 65536 })
---
--- Every method returns its result, or nil, a message naming the path and the reason, and a
--- code: "symlink", "notregular", "toobig", "outside", "notdir", "notfound", "exists",
--- "invalid" or "io". `must` raises the message instead.
---@class seersafe_fs
local M = {}

local sb = require "seer.core.sandbox"

---@class seersafe_fs.Root
---@field path string the root on the host
---@field what string how errors name the tree ("the sandbox's workspace")
local Root = {}
Root.__index = Root
M.Root = Root

---@alias seersafe_fs.code "symlink"|"notregular"|"toobig"|"outside"|"notdir"|"notfound"|"exists"|"invalid"|"io"

---A root: a directory on the host whose own path is trusted (followed) and below which nothing
---is. opts.walk forces the per-component walk (tests the fallback); opts.cross_mounts allows
---other file systems below (a root of "/" for an absolute path).
---@param path string
---@param what? string
---@param opts? {walk?: boolean, cross_mounts?: boolean}
---@return seersafe_fs.Root
function M.root(path, what, opts)
  if type(path) ~= "string" or path == "" then error("safe_fs.root(path, what): path must be a directory", 2) end
  opts = opts or {}
  return setmetatable({ path = path, what = what or "a folder the sandbox can write",
                        walk = opts.walk, cross_mounts = opts.cross_mounts }, Root)
end

function Root:_opts(extra)
  local o = { what = self.what, walk = self.walk, cross_mounts = self.cross_mounts }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

---The path of abs relative to this root, or nil when abs is not below it.
---@param abs string
---@return string|nil
function Root:rel(abs)
  local root = self.path:gsub("/+$", "")
  if abs == root then return "" end
  if abs:sub(1, #root + 1) == root .. "/" then return abs:sub(#root + 2) end
  return nil
end

---Reads a regular file: at most opts.max bytes (default 1 MiB; more is an error "toobig"),
---from opts.offset; with opts.tail the last max bytes. Returns the data and the file's size.
---@param rel string
---@param opts? {max?: integer, offset?: integer, tail?: boolean}
---@return string|nil data, string|number size_or_message, seersafe_fs.code? code
function Root:read(rel, opts) return sb.fs_read(self.path, rel, self:_opts(opts)) end

---Writes a file atomically (a link or file at rel is replaced, never written through).
---@param rel string
---@param data string
---@param opts? {mode?: integer, mkdirs?: boolean, exclusive?: boolean} exclusive: fail with code "exists" when anything is at rel
---@return true|nil ok, string? message, seersafe_fs.code? code
function Root:write(rel, data, opts) return sb.fs_write(self.path, rel, data, self:_opts(opts)) end

---Streams a host file (trusted, followed) to rel atomically, without holding it in memory.
---@param rel string
---@param src string
---@param opts? {mode?: integer, mkdirs?: boolean}
function Root:copy_in(rel, src, opts) return sb.fs_copy_in(self.path, rel, src, self:_opts(opts)) end

---mkdir -p beneath the root.
---@param rel string
---@param opts? {mode?: integer}
function Root:mkdirs(rel, opts) return sb.fs_mkdirs(self.path, rel, self:_opts(opts)) end

---lstat: {type = "file"|"dir"|"link"|"fifo"|"socket"|"other", size, mtime, mode}.
---@param rel string
---@return table|nil, string?, seersafe_fs.code?
function Root:stat(rel) return sb.fs_stat(self.path, rel, self:_opts()) end

---The entries of a directory ({name, type, size, mtime, mode} sorted by name), at most
---opts.max (default 100000).
---@param rel? string default the root
---@param opts? {max?: integer}
---@return table[]|nil, string?, seersafe_fs.code?
function Root:list(rel, opts) return sb.fs_list(self.path, rel or "", self:_opts(opts)) end

function Root:unlink(rel) return sb.fs_unlink(self.path, rel, self:_opts()) end
function Root:rename(from, to) return sb.fs_rename(self.path, from, to, self:_opts()) end
---Creates a symlink at rel holding target (which is never followed by these functions).
function Root:symlink(target, rel) return sb.fs_symlink(self.path, target, rel, self:_opts()) end
---rm -rf of rel ("" empties the root); links are removed, never followed.
function Root:remove_tree(rel) return sb.fs_remove_tree(self.path, rel, self:_opts()) end

---Is rel a directory (not a link to one)?
---@param rel string
---@return boolean
function Root:is_dir(rel)
  local st = self:stat(rel)
  return st ~= nil and st.type == "dir"
end

---Does rel exist (a link counts, and is not followed)?
---@param rel string
---@return boolean
function Root:exists(rel) return self:stat(rel) ~= nil end

---Raises the message of a failed call, at the caller's caller: `fs.must(root:write(...))`.
---@return any
function M.must(v, msg, ...)
  if v == nil then error(msg, 2) end
  return v, msg, ...
end

---Writes an absolute path that has no symlink in any component (the notebook writer's
---output folder may lie inside a sandbox's workspace): resolved from "/" with no link
---allowed on the way, the final component replaced atomically. Pass a realpath'd path.
---@param path string
---@param data string
---@param opts? {mode?: integer, mkdirs?: boolean, exclusive?: boolean, what?: string}
---@return true|nil, string?, seersafe_fs.code?
function M.write_nofollow(path, data, opts)
  if type(path) ~= "string" or path == "" then
    return nil, ("safe_fs.write_nofollow: %s is not a path"):format(tostring(path)), "invalid"
  end
  if path:sub(1, 1) ~= "/" then path = require("seer.core.host").cwd() .. "/" .. path end
  opts = opts or {}
  local r = M.root("/", opts.what or "the output folder", { cross_mounts = true })
  return r:write(path:sub(2), data, opts)
end

-- dirname and basename of a path ("." for a bare name).
local function split_path(path)
  local dir, base = path:match("^(.*)/([^/]+)/*$")
  if not dir then return ".", path end
  return dir == "" and "/" or dir, base
end

---lstat of a host path without opening it (its directories are followed; the final
---component is not): {type, size, mtime, mode} or nil. A fifo there is never opened.
---@param path string
---@return table|nil
function M.lstat(path)
  if type(path) ~= "string" or path == "" then return nil end
  if path:match("^/+$") then return sb.fs_stat("/", "", { cross_mounts = true }) end
  local dir, base = split_path(path)
  if base == "." or base == ".." then dir, base = path, "." end
  return sb.fs_stat(dir, base, { cross_mounts = true })
end

---mkdir -p of a path with no symlink allowed in any component (the notebook server's folders,
---which may lie in a sandbox's workspace). Pass a realpath'd path.
---@param path string
---@return true|nil, string?, seersafe_fs.code?
function M.mkdirs_nofollow(path)
  if type(path) ~= "string" or path == "" then return nil, "safe_fs.mkdirs_nofollow: no path", "invalid" end
  if path:sub(1, 1) ~= "/" then path = require("seer.core.host").cwd() .. "/" .. path end
  return M.root("/", "the notebook's folder", { cross_mounts = true }):mkdirs(path:sub(2))
end

---Reads an absolute path with no symlink in any component (see write_nofollow).
---@param path string
---@param opts? {max?: integer, tail?: boolean, offset?: integer, what?: string}
function M.read_nofollow(path, opts)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then
    return nil, ("safe_fs.read_nofollow: %s is not an absolute path"):format(tostring(path)), "invalid"
  end
  opts = opts or {}
  local r = M.root("/", opts.what or "a folder the sandbox can write", { cross_mounts = true })
  return r:read(path:sub(2), opts)
end

return M
