--- seer.process: child processes for the parts of seer that run as their own process (the
--- notebook server, kernels). posix_spawn through LuaJIT's ffi: an argv (no shell), extra
--- environment, a working directory, stdout/stderr to a pipe, a file or nowhere, and
--- non-blocking status checks, so a caller can notice at once that a child died and why.
---@class seerprocess
local M = {}

local ffi = require "ffi"
local C = ffi.C

ffi.cdef [[
typedef int pid_t;
typedef struct { int __allocated; int __used; void *__actions; int __pad[16]; } seer_spawn_fa_t;
int posix_spawn_file_actions_init(seer_spawn_fa_t *fa);
int posix_spawn_file_actions_destroy(seer_spawn_fa_t *fa);
int posix_spawn_file_actions_adddup2(seer_spawn_fa_t *fa, int fd, int newfd);
int posix_spawn_file_actions_addclose(seer_spawn_fa_t *fa, int fd);
int posix_spawn_file_actions_addopen(seer_spawn_fa_t *fa, int fd, const char *path, int oflag, unsigned mode);
int posix_spawn_file_actions_addchdir_np(seer_spawn_fa_t *fa, const char *path);
typedef struct { long __opaque[42]; } seer_spawn_attr_t; /* glibc's is 336 bytes */
int posix_spawnattr_init(seer_spawn_attr_t *a);
int posix_spawnattr_destroy(seer_spawn_attr_t *a);
int posix_spawnattr_setflags(seer_spawn_attr_t *a, short flags);
int posix_spawnattr_setpgroup(seer_spawn_attr_t *a, pid_t pgroup);
int posix_spawnp(pid_t *pid, const char *file, const seer_spawn_fa_t *fa, const seer_spawn_attr_t *attr,
                 char *const argv[], char *const envp[]);
pid_t waitpid(pid_t pid, int *status, int options);
int kill(pid_t pid, int sig);
int pipe2(int fds[2], int flags);
int close(int fd);
long read(int fd, void *buf, size_t n);
struct seer_pollfd { int fd; short events; short revents; };
int poll(struct seer_pollfd *fds, unsigned long n, int timeout);
char *strerror(int errnum);
extern char **environ;
int prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4, unsigned long a5);
pid_t getppid(void);
pid_t getpid(void);
char *mkdtemp(char *template);
int mkdir(const char *path, unsigned mode);
]]

local O_WRONLY, O_CREAT, O_APPEND, O_CLOEXEC = 1, 64, 1024, 524288
local WNOHANG = 1
local POLLIN = 1
M.SIGTERM, M.SIGKILL, M.SIGINT = 15, 9, 2

local function errno_msg()
  return ffi.string(C.strerror(ffi.errno()))
end

local function signal_name(sig)
  local names = { [1] = "SIGHUP", [2] = "SIGINT", [6] = "SIGABRT", [9] = "SIGKILL", [11] = "SIGSEGV",
                  [13] = "SIGPIPE", [15] = "SIGTERM", [7] = "SIGBUS", [8] = "SIGFPE" }
  return names[sig] or ("signal " .. sig)
end
M.signal_name = signal_name

---@class seerprocess.child
---@field pid integer
---@field argv string[]
---@field exit_code integer|nil set once the child has exited normally
---@field exit_signal integer|nil set once a signal killed the child
local Child = {}
Child.__index = Child

---@class seerprocess.spawn_opts
---@field argv string[] program and arguments (the program is looked up on PATH unless it has a '/')
---@field env? table<string, string|false> added to (or, with false, removed from) this process's environment
---@field cwd? string working directory of the child
---@field stdout? "inherit"|"pipe"|"null"|string where the child's stdout goes (a string is a file path, appended to)
---@field stderr? "inherit"|"pipe"|"null"|string the same for stderr
---@field pgroup? boolean run it in a process group of its own: a terminal's Ctrl-C (sent to the
---foreground group) reaches this process, which decides, and not the child
---@field die_with_parent? boolean a seer child (`seer serve`, `seer -e`, any seer command) gets SIGTERM when this process ends, even by kill -9 (SEER_DIE_WITH_PARENT; engine/main.c); other programs ignore it

---Starts a child process. Raises with the program name and the reason when it cannot start.
---@param opts seerprocess.spawn_opts
---@return seerprocess.child
function M.spawn(opts)
  assert(type(opts) == "table" and type(opts.argv) == "table" and #opts.argv > 0,
    "process.spawn: opts.argv must be a non-empty list of strings")
  local argv = ffi.new("char *[?]", #opts.argv + 1)
  local keep = {}
  for i, a in ipairs(opts.argv) do
    assert(type(a) == "string", "process.spawn: argv[" .. i .. "] must be a string")
    local s = ffi.new("char[?]", #a + 1, a)
    keep[#keep + 1] = s
    argv[i - 1] = s
  end
  -- The environment: ours, with opts.env applied.
  local envt, order = {}, {}
  local i = 0
  while C.environ[i] ~= nil do
    local kv = ffi.string(C.environ[i])
    local k = kv:match("^([^=]*)=")
    if k and envt[k] == nil then order[#order + 1] = k; envt[k] = kv:sub(#k + 2) end
    i = i + 1
  end
  local extra = opts.env or {}
  if opts.die_with_parent then
    -- a seer child ends when this process does, even killed with -9 (engine/main.c)
    extra = {}
    for k, v in pairs(opts.env or {}) do extra[k] = v end
    extra.SEER_DIE_WITH_PARENT = tostring(C.getpid())
  end
  for k, v in pairs(extra) do
    if envt[k] == nil and v then order[#order + 1] = k end
    envt[k] = v or nil
  end
  local envp = ffi.new("char *[?]", #order + 1)
  local n = 0
  for _, k in ipairs(order) do
    if envt[k] then
      local s = k .. "=" .. tostring(envt[k])
      local b = ffi.new("char[?]", #s + 1, s)
      keep[#keep + 1] = b
      envp[n] = b
      n = n + 1
    end
  end

  local fa = ffi.new("seer_spawn_fa_t")
  C.posix_spawn_file_actions_init(fa)
  local child_pipes, parent_fds = {}, {}
  local function route(fd, how)
    if how == nil or how == "inherit" then return end
    if how == "pipe" then
      local p = ffi.new("int[2]")
      if C.pipe2(p, O_CLOEXEC) ~= 0 then error("process.spawn: pipe: " .. errno_msg()) end
      C.posix_spawn_file_actions_adddup2(fa, p[1], fd)
      child_pipes[#child_pipes + 1] = p[1]
      parent_fds[fd] = p[0]
    elseif how == "null" then
      C.posix_spawn_file_actions_addopen(fa, fd, "/dev/null", O_WRONLY, 0)
    else
      C.posix_spawn_file_actions_addopen(fa, fd, how, O_WRONLY + O_CREAT + O_APPEND, tonumber("644", 8))
    end
  end
  route(1, opts.stdout)
  route(2, opts.stderr)
  if opts.cwd then C.posix_spawn_file_actions_addchdir_np(fa, opts.cwd) end
  local pid = ffi.new("pid_t[1]")
  local attr
  if opts.pgroup then
    attr = ffi.new("seer_spawn_attr_t")
    C.posix_spawnattr_init(attr)
    C.posix_spawnattr_setflags(attr, 0x02 --[[POSIX_SPAWN_SETPGROUP]])
    C.posix_spawnattr_setpgroup(attr, 0)
  end
  local rc = C.posix_spawnp(pid, argv[0], fa, attr, argv, envp)
  if attr then C.posix_spawnattr_destroy(attr) end
  C.posix_spawn_file_actions_destroy(fa)
  for _, fd in ipairs(child_pipes) do C.close(fd) end
  if rc ~= 0 then
    for _, fd in pairs(parent_fds) do C.close(fd) end
    error(("cannot start %s: %s"):format(opts.argv[1], ffi.string(C.strerror(rc))), 2)
  end
  return setmetatable({ pid = pid[0], argv = opts.argv, stdout_fd = parent_fds[1], stderr_fd = parent_fds[2],
                        _buf = "" }, Child)
end

---Reads one line from the child's piped stdout, waiting at most timeout_ms. Returns nil and
---"timeout" or "eof" when no full line came. A line longer than 1 MiB comes in pieces of 1 MiB
---(the buffer never holds more, whatever the child prints without a newline).
---@param timeout_ms integer
---@return string|nil line, string|nil why
function Child:read_line(timeout_ms)
  assert(self.stdout_fd, "read_line: the child's stdout is not a pipe")
  local deadline = M.now_ms() + timeout_ms
  local buf = ffi.new("char[4096]")
  while true do
    local nl = self._buf:find("\n", 1, true)
    if nl then
      local line = self._buf:sub(1, nl - 1)
      self._buf = self._buf:sub(nl + 1)
      return line
    end
    if #self._buf >= 1048576 then
      local piece = self._buf:sub(1, 1048576)
      self._buf = self._buf:sub(1048577)
      return piece
    end
    local left = deadline - M.now_ms()
    if left <= 0 then return nil, "timeout" end
    local pfd = ffi.new("struct seer_pollfd[1]")
    pfd[0].fd, pfd[0].events = self.stdout_fd, POLLIN
    local r = C.poll(pfd, 1, math.floor(left))
    if r > 0 then
      local got = C.read(self.stdout_fd, buf, 4096)
      if got <= 0 then return nil, "eof" end
      self._buf = self._buf .. ffi.string(buf, got)
    end
  end
end

---Whether the child still runs. Once it has ended, sets exit_code or exit_signal and returns
---false plus a description ("exited with status 1", "killed by SIGKILL").
---@return boolean alive, string|nil how_it_ended
function Child:alive()
  if self.exit_code or self.exit_signal then return false, self:describe_exit() end
  local st = ffi.new("int[1]")
  local r = C.waitpid(self.pid, st, WNOHANG)
  if r == 0 then return true end
  if r < 0 then -- not our child any more (reaped elsewhere): treat as gone
    self.exit_code = -1
    return false, "ended (status unknown)"
  end
  local s = st[0]
  if bit.band(s, 0x7f) == 0 then self.exit_code = bit.rshift(bit.band(s, 0xff00), 8)
  else self.exit_signal = bit.band(s, 0x7f) end
  return false, self:describe_exit()
end

---@return string
function Child:describe_exit()
  if self.exit_signal then return "killed by " .. signal_name(self.exit_signal) end
  if self.exit_code then return "exited with status " .. self.exit_code end
  return "running"
end

---Sends a signal (default SIGTERM). Returns false when the process is already gone.
---@param sig? integer
---@return boolean
function Child:kill(sig)
  if not self:alive() then return false end
  return C.kill(self.pid, sig or M.SIGTERM) == 0
end

---Waits up to timeout_ms for the child to end; returns true when it has.
---@param timeout_ms integer
---@return boolean
function Child:wait(timeout_ms)
  local deadline = M.now_ms() + timeout_ms
  while self:alive() do
    if M.now_ms() >= deadline then return false end
    M.sleep_ms(5)
  end
  return true
end

---Stops the child: SIGTERM, then SIGKILL after grace_ms (default 2000). Closes the pipes.
---@param grace_ms? integer
function Child:stop(grace_ms)
  if self:alive() then
    self:kill(M.SIGTERM)
    if not self:wait(grace_ms or 2000) then self:kill(M.SIGKILL); self:wait(2000) end
  end
  if self.stdout_fd then C.close(self.stdout_fd); self.stdout_fd = nil end
  if self.stderr_fd then C.close(self.stderr_fd); self.stderr_fd = nil end
end

---Starts a seer helper process: `seer -e <code>`, its settings as JSON in one environment
---variable (never on the command line, where other users can read them), its stderr appended to
---a log, and waits for its first stdout line. On no line it is stopped and the error carries its
---exit and the log's tail. Used by the detached sandboxes' sidecars and the RPC relay.
---@param opts {code: string, env: table<string,string>, log: string, ready_timeout_ms?: integer, what: string}
---@return seerprocess.child child, string first_line
function M.start_helper(opts)
  local child = M.spawn{
    argv = { require("seer.jupyter").seer_binary(), "-e", opts.code },
    env = opts.env, stdout = "pipe", stderr = opts.log,
  }
  local line, why = child:read_line(opts.ready_timeout_ms or 15000)
  if not line then
    child:stop(500)
    local f = io.open(opts.log, "rb")
    local log = f and f:read("*a") or ""
    if f then f:close() end
    error(("%s did not start (%s; %s); its log (%s):\n%s"):format(opts.what, why, child:describe_exit(),
      opts.log, log:sub(-2000)), 0)
  end
  return child, line
end

---Milliseconds on a monotonic clock.
---@return number
function M.now_ms()
  return require("seer.core.host").now() * 1000
end

---Sleeps ms milliseconds.
---@param ms number
function M.sleep_ms(ms)
  C.poll(nil, 0, math.max(0, math.floor(ms)))
end

---Makes this process receive sig (default SIGTERM) when its parent dies, and exits at once
---if the parent is already gone (the race prctl leaves open).
---@param sig? integer
function M.die_with_parent(sig)
  local parent = C.getppid()
  C.prctl(1 --[[PR_SET_PDEATHSIG]], sig or M.SIGTERM, 0, 0, 0)
  if C.getppid() ~= parent or parent == 1 then os.exit(1) end
end

---Creates a fresh private directory (mode 0700) named prefix + random suffix.
---@param prefix string e.g. "/tmp/seer-notebook-"
---@return string
function M.mkdtemp(prefix)
  local buf = ffi.new("char[?]", #prefix + 7, prefix .. "XXXXXX")
  if C.mkdtemp(buf) == nil then error(("cannot create a directory %sXXXXXX: %s"):format(prefix, errno_msg()), 2) end
  return ffi.string(buf)
end

---Creates a directory and its parents (like mkdir -p). Raises naming the path on failure.
---@param path string
function M.mkdir_p(path)
  local acc = path:sub(1, 1) == "/" and "" or "."
  for part in path:gmatch("[^/]+") do
    acc = acc .. "/" .. part
    if C.mkdir(acc, tonumber("755", 8)) ~= 0 and ffi.errno() ~= 17 --[[EEXIST]] then
      error(("cannot create directory %s: %s"):format(acc, errno_msg()), 2)
    end
  end
end

---@return integer
function M.getpid()
  return C.getpid()
end

return M
