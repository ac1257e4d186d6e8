--- seer.backends.kubernetes: a sandbox in a Kubernetes Pod (docs/backends.md, Kubernetes).
---
--- The Pod is created through the API server (libcurl, seer.http; credentials from a
--- kubeconfig or the in-cluster service account). Its command is `seer sandbox curve-serve`,
--- which runs `seer sandbox remote-start` (an ordinary local sandbox: bubblewrap + sandboxd) and
--- carries its stdio and unix sockets over one CURVE connection (seer.backends.curve_tunnel) to
--- the Pod IP. The keys are made here per sandbox; the Pod's server secret key and the one client
--- public key it accepts reach the Pod in a Kubernetes Secret (a file, mode 0400), never in the
--- Pod spec. Everything from there on is the ssh backend's link (relay, kernel forwards,
--- sessions, workspace mirror), with the tunnel as its transport. `terminate` (or the script's
--- end or death) deletes the Pod and the Secret.
---
--- Three roles:
---   the handle side  (`start`, `teardown`): called by seer.sandbox for backend = "kubernetes";
---   the transport    (`seer sandbox k8s-transport FILE`): started by the link: creates the
---                    Secret and the Pod, waits for it, then is the tunnel's client;
---   `seer sandbox k8s-delete FILE`: the link's last word, however the sandbox ended.
---@class seerbackends.kubernetes
local M = {}

local json = require "seer.json"
local net = require "seer.net"
local process = require "seer.process"
local ssh = require "seer.backends.ssh"
local tunnel = require "seer.backends.curve_tunnel"
local safe_fs = require "seer.safe_fs"
local core = require "seer.core.host"

---SandboxConfig.kubernetes (docs/backends.md).
---@class seerbackends.kubernetes.Config
---@field image string the image with seer at seer_path, bubblewrap and seer's libraries (required)
---@field namespace? string default: the kubeconfig context's, the service account's, else "default"
---@field kubeconfig? string path (default $KUBECONFIG, else ~/.kube/config, else the in-cluster service account)
---@field context? string a kubeconfig context (default its current-context)
---@field in_cluster? boolean use the Pod's service account (/var/run/secrets/kubernetes.io/serviceaccount)
---@field api_server? string https://host:port instead of the kubeconfig's server
---@field node_selector? table<string, string>
---@field gpu_label? string a node label that must equal SandboxConfig.gpu (e.g. "nvidia.com/gpu.product")
---@field runtime_class? string runtimeClassName (e.g. "gvisor")
---@field service_account? string the Pod's serviceAccountName (default: none mounted)
---@field pvc? string a PersistentVolumeClaim for the model cache, mounted at pvc_mount
---@field pvc_mount? string default "/var/cache/seer-models" (HF_HUB_CACHE in the Pod)
---@field image_pull_policy? "Always"|"IfNotPresent"|"Never"
---@field image_pull_secret? string
---@field seer_path? string seer inside the image (default "/opt/seer/bin/seer")
---@field port? integer the tunnel's port in the Pod (default 7766)
---@field start_timeout? number seconds for the Pod to be scheduled, pulled and started (default 600)
---@field cpu? string resources.limits.cpu (e.g. "4")
---@field memory? string resources.limits.memory (e.g. "16Gi")

---The fields of SandboxConfig.kubernetes and their Lua types.
M.FIELDS = {
  image = "string", namespace = "string", kubeconfig = "string", context = "string", in_cluster = "boolean",
  api_server = "string", node_selector = "table", gpu_label = "string", runtime_class = "string",
  service_account = "string", pvc = "string", pvc_mount = "string", image_pull_policy = "string",
  image_pull_secret = "string", seer_path = "string", port = "number", start_timeout = "number",
  cpu = "string", memory = "string",
}

local SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
local CURVE_MOUNT = "/var/run/seer-curve"
local MAX_MSG = 500 -- the most of one message from the API server that is shown


-- RFC 1123 label / subdomain names, as the API server checks them.
local function dns_label(v)
  return type(v) == "string" and #v >= 1 and #v <= 63 and v:match("^[a-z0-9][a-z0-9-]*$") ~= nil and v:match("[a-z0-9]$") ~= nil
end
local function dns_subdomain(v)
  if type(v) ~= "string" or #v > 253 then return false end
  for part in (v .. "."):gmatch("([^.]*)%.") do if not dns_label(part) then return false end end
  return true
end
local function label_key(k)
  if type(k) ~= "string" or #k > 316 then return false end
  local prefix, name = k:match("^(.+)/([^/]+)$")
  name = name or k
  if prefix and not dns_subdomain(prefix) then return false end
  return #name >= 1 and #name <= 63 and name:match("^%w[%w._-]*$") ~= nil and name:match("%w$") ~= nil
end
local function label_value(v)
  return type(v) == "string" and #v <= 63 and (v == "" or (v:match("^%w[%w._-]*$") ~= nil and v:match("%w$") ~= nil))
end

---Checks SandboxConfig.kubernetes; returns the normalized table, or nil and what is wrong (the
---message starts with the field's name).
---@param t any
---@return table|nil kubernetes, string|nil why
function M.check_config(t)
  local s, why = ssh.check_fields("kubernetes", t, M.FIELDS, 'kubernetes = {image = "registry.lab.org/seer-sandbox:1", namespace = "research"}')
  if not s then return nil, why end
  if not s.image then return nil, 'kubernetes.image is required (an image with seer, bubblewrap and seer\'s libraries; docs/backends.md says how to build one)' end
  if #s.image > 512 or not s.image:match("^[%w][%w._:/@-]*$") then return nil, ("kubernetes.image %q is not an image reference"):format(s.image) end
  for _, k in ipairs({ "namespace" }) do
    if s[k] and not dns_label(s[k]) then return nil, ("kubernetes.%s %q is not a namespace name (lower-case letters, digits, '-')"):format(k, s[k]) end
  end
  for _, k in ipairs({ "runtime_class", "service_account", "pvc", "image_pull_secret" }) do
    if s[k] and not dns_subdomain(s[k]) then return nil, ("kubernetes.%s %q is not a Kubernetes object name (lower-case letters, digits, '-', '.')"):format(k, s[k]) end
  end
  if s.node_selector then
    local n = 0
    for k, v in pairs(s.node_selector) do
      n = n + 1
      if not label_key(k) then return nil, ("kubernetes.node_selector: %q is not a label key"):format(tostring(k)) end
      if not label_value(v) then return nil, ("kubernetes.node_selector[%q] must be a label value (a string of at most 63 letters, digits, '-', '_', '.')"):format(k) end
    end
    if n > 64 then return nil, "kubernetes.node_selector has more than 64 labels" end
  end
  if s.gpu_label and not label_key(s.gpu_label) then return nil, ("kubernetes.gpu_label %q is not a label key"):format(s.gpu_label) end
  if s.image_pull_policy and s.image_pull_policy ~= "Always" and s.image_pull_policy ~= "IfNotPresent" and s.image_pull_policy ~= "Never" then
    return nil, ("kubernetes.image_pull_policy must be \"Always\", \"IfNotPresent\" or \"Never\", not %q"):format(s.image_pull_policy)
  end
  for _, k in ipairs({ "seer_path", "pvc_mount" }) do
    if s[k] and (not s[k]:match("^/[%w._/-]+$") or s[k]:find("%.%.") or #s[k] > 200) then
      return nil, ("kubernetes.%s %q must be a plain absolute path"):format(k, s[k])
    end
  end
  for _, k in ipairs({ "kubeconfig" }) do
    if s[k] and (s[k] == "" or s[k]:find("%c")) then return nil, ("kubernetes.%s is not a usable path"):format(k) end
  end
  if s.context and (#s.context > 253 or s.context:find("%c")) then return nil, "kubernetes.context is not a context name" end
  if s.api_server and not s.api_server:match("^https://[%w.:%[%]-]+/?$") then
    return nil, ("kubernetes.api_server %q must be https://host[:port] (TLS is required)"):format(s.api_server)
  end
  if s.port and (s.port ~= math.floor(s.port) or s.port < 1024 or s.port > 65535) then
    return nil, "kubernetes.port must be an integer 1024..65535"
  end
  if s.start_timeout and (s.start_timeout <= 0 or s.start_timeout ~= s.start_timeout or s.start_timeout > 86400) then
    return nil, "kubernetes.start_timeout must be a positive number of seconds (at most a day)"
  end
  for _, k in ipairs({ "cpu", "memory" }) do
    if s[k] and not s[k]:match("^[0-9]+%.?[0-9]*[a-zA-Z]*$") then return nil, ("kubernetes.%s %q is not a Kubernetes quantity (e.g. \"4\", \"500m\", \"16Gi\")"):format(k, s[k]) end
  end
  if s.in_cluster and (s.kubeconfig or s.context) then return nil, "kubernetes.in_cluster and kubernetes.kubeconfig/context exclude each other" end
  s.seer_path = s.seer_path or "/opt/seer/bin/seer"
  s.pvc_mount = s.pvc_mount or "/var/cache/seer-models"
  s.port = s.port or tunnel.DEFAULT_PORT
  s.start_timeout = s.start_timeout or 600
  s.image_pull_policy = s.image_pull_policy or "IfNotPresent"
  return s
end

---------------------------------------------------------------------------------------------
-- base64 (Secret data, kubeconfig *-data fields)

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64D = {}
for i = 1, 64 do B64D[B64:byte(i)] = i - 1 end

---@param s string
---@return string
function M.b64encode(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local q = { math.floor(n / 262144) % 64, math.floor(n / 4096) % 64, math.floor(n / 64) % 64, n % 64 }
    out[#out + 1] = B64:sub(q[1] + 1, q[1] + 1) .. B64:sub(q[2] + 1, q[2] + 1)
      .. (b and B64:sub(q[3] + 1, q[3] + 1) or "=") .. (c and B64:sub(q[4] + 1, q[4] + 1) or "=")
  end
  return table.concat(out)
end

---@param s string
---@return string|nil
function M.b64decode(s)
  s = s:gsub("%s", "")
  if #s % 4 ~= 0 then return nil end
  local out = {}
  for i = 1, #s, 4 do
    local n, pad = 0, 0
    for j = 0, 3 do
      local ch = s:byte(i + j)
      local v = B64D[ch]
      if ch == 61 then pad = pad + 1; v = 0 elseif not v or pad > 0 then return nil end
      n = n * 64 + v
    end
    local bytes = string.char(math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
    out[#out + 1] = bytes:sub(1, 3 - pad)
  end
  return table.concat(out)
end

---------------------------------------------------------------------------------------------
-- kubeconfig: the YAML subset kubectl writes (block mappings and sequences, plain and quoted
-- scalars, comments)

local function scalar(v)
  v = v:gsub("%s+#.*$", ""):gsub("%s+$", "")
  if v:match('^".*"$') then
    return (v:sub(2, -2):gsub('\\(.)', function(c) return ({ n = "\n", t = "\t", ['"'] = '"', ["\\"] = "\\" })[c] or c end))
  end
  if v:match("^'.*'$") then return (v:sub(2, -2):gsub("''", "'")) end
  if v == "true" then return true elseif v == "false" then return false end
  if v == "null" or v == "~" or v == "" then return nil end
  if v == "{}" then return {} end
  if v == "[]" then return {} end
  return v
end

---Parses a kubeconfig (the YAML kubectl writes, or JSON). Raises with the line on what it cannot read.
---@param text string
---@param where string the file, for messages
---@return table
function M.parse_kubeconfig(text, where)
  if #text > 4 * 1048576 then error(where .. ": larger than 4 MiB", 0) end
  if text:match("^%s*{") then
    local ok, v = pcall(json.decode, text)
    if ok and type(v) == "table" then return v end
    error(where .. ": not valid JSON", 0)
  end
  local lines = {}
  local n = 0
  for raw in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local l = raw:gsub("\r$", "")
    if not l:match("^%s*#") and not l:match("^%s*$") and l ~= "---" then
      if l:find("\t") then error(("%s:%d: tabs are not YAML indentation"):format(where, n), 0) end
      lines[#lines + 1] = { indent = #l:match("^( *)"), text = l:match("^ *(.-)%s*$"), n = n }
    end
  end
  local pos = 1
  local parse_block
  local function parse_map_entries(t, indent, first)
    -- first: text of an entry that starts on a "- " line
    while true do
      local text, n2
      if first then text, n2 = first.text, first.n; first = nil
      else
        local l = lines[pos]
        if not l or l.indent ~= indent or l.text:sub(1, 2) == "- " or l.text == "-" then return t end
        text, n2 = l.text, l.n
        pos = pos + 1
      end
      local k, v = text:match("^([^:]+):%s*(.*)$")
      if not k then error(("%s:%d: expected \"key: value\""):format(where, n2), 0) end
      k = k:gsub('^"(.*)"$', "%1"):gsub("^'(.*)'$", "%1")
      if v == "" then
        local nl = lines[pos]
        if nl and (nl.indent > indent or (nl.indent == indent and nl.text:sub(1, 1) == "-")) then t[k] = parse_block(nl.indent)
        else t[k] = nil end
      else
        t[k] = scalar(v)
      end
    end
  end
  parse_block = function(indent)
    local l = lines[pos]
    if l.text:sub(1, 1) == "-" then
      local list = {}
      while lines[pos] and lines[pos].indent == indent and lines[pos].text:sub(1, 1) == "-" do
        local item = lines[pos]
        pos = pos + 1
        local rest = item.text:gsub("^%-%s*", "")
        if rest == "" then
          list[#list + 1] = lines[pos] and lines[pos].indent > indent and parse_block(lines[pos].indent) or nil
        elseif rest:match("^[^:'\"]+:%s") or rest:match("^[^:'\"]+:$") then
          local inner = indent + (#item.text - #rest)
          list[#list + 1] = parse_map_entries({}, inner, { text = rest, n = item.n })
        else
          list[#list + 1] = scalar(rest)
        end
      end
      return list
    end
    return parse_map_entries({}, indent)
  end
  if #lines == 0 then error(where .. ": empty", 0) end
  local root = parse_block(lines[1].indent)
  if pos <= #lines then error(("%s:%d: unexpected indentation"):format(where, lines[pos].n), 0) end
  return root
end

local function expand(p)
  if p and p:sub(1, 2) == "~/" then return (os.getenv("HOME") or "") .. p:sub(2) end
  return p
end

local function read_file(path, what, max)
  local f, err = io.open(path, "rb")
  if not f then error(("%s: cannot read %s: %s"):format(what, path, tostring(err)), 0) end
  local d = f:read((max or 1048576) + 1)
  f:close()
  if d and #d > (max or 1048576) then error(("%s: %s is larger than %d bytes"):format(what, path, max or 1048576), 0) end
  return d or ""
end

local function named(list, name, what, where)
  if type(list) ~= "table" then error(("%s: no %ss list"):format(where, what), 0) end
  for _, e in ipairs(list) do
    if type(e) == "table" and e.name == name then return e[what] or {} end
  end
  error(("%s: no %s named %q"):format(where, what, tostring(name)), 0)
end

---How to reach the API server for config k: {server, namespace, tls = {ca_pem, cert_pem?,
---key_pem?}, token?}. Raises naming what is missing.
---@param k table SandboxConfig.kubernetes (checked)
---@return table
function M.credentials(k)
  local path = k.kubeconfig and expand(k.kubeconfig) or os.getenv("KUBECONFIG")
  if path and path:find(":") then path = path:match("^([^:]+)") end
  if not path and not k.in_cluster then
    local home = expand("~/.kube/config")
    local st = safe_fs.lstat(home)
    if st then path = home end
  end
  if k.in_cluster or not path then
    -- the Pod's own service account
    local host, port = os.getenv("KUBERNETES_SERVICE_HOST"), os.getenv("KUBERNETES_SERVICE_PORT")
    local sa = os.getenv("SEER_K8S_SERVICEACCOUNT_DIR") or SA_DIR
    if not host or not port or not safe_fs.lstat(sa .. "/token") then
      error("SandboxConfig.kubernetes: no kubeconfig (kubernetes.kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a cluster (no KUBERNETES_SERVICE_HOST or " .. sa .. "/token)", 0)
    end
    if host:find(":") then host = "[" .. host .. "]" end
    local ns = k.namespace or (read_file(sa .. "/namespace", "the service account", 253):gsub("%s+$", ""))
    return { server = k.api_server or ("https://%s:%s"):format(host, port), namespace = ns ~= "" and ns or "default",
             token = (read_file(sa .. "/token", "the service account", 65536):gsub("%s+$", "")),
             tls = { ca_pem = read_file(sa .. "/ca.crt", "the service account", 1048576) } }
  end
  local where = path
  local cfg = M.parse_kubeconfig(read_file(path, "kubernetes.kubeconfig", 4 * 1048576), where)
  local base = path:match("^(.*)/[^/]*$") or "."
  local function rel(p) if p:sub(1, 1) == "/" then return p end return base .. "/" .. p end
  local ctxname = k.context or cfg["current-context"]
  if type(ctxname) ~= "string" then error(where .. ": no current-context; set kubernetes.context", 0) end
  local ctx = named(cfg.contexts, ctxname, "context", where)
  local cluster = named(cfg.clusters, ctx.cluster, "cluster", where)
  local user = ctx.user and named(cfg.users, ctx.user, "user", where) or {}
  local r = { namespace = k.namespace or (type(ctx.namespace) == "string" and ctx.namespace) or "default", tls = {} }
  r.server = k.api_server or cluster.server
  if type(r.server) ~= "string" or not r.server:match("^https://") then
    error(("%s: cluster %q: server must be an https:// URL (seer does not talk to an API server without TLS)"):format(where, tostring(ctx.cluster)), 0)
  end
  r.server = r.server:gsub("/+$", "")
  if cluster["insecure-skip-tls-verify"] == true then
    error(("%s: cluster %q has insecure-skip-tls-verify: seer always verifies the API server's certificate; give certificate-authority(-data)"):format(where, tostring(ctx.cluster)), 0)
  end
  if cluster["certificate-authority-data"] then
    r.tls.ca_pem = M.b64decode(cluster["certificate-authority-data"]) or error(where .. ": certificate-authority-data is not base64", 0)
  elseif cluster["certificate-authority"] then
    r.tls.ca_pem = read_file(rel(cluster["certificate-authority"]), where .. ": certificate-authority")
  end
  if user.exec or user["auth-provider"] then
    error(("%s: user %q uses an exec or auth-provider plugin, which seer does not run; give a token, tokenFile or a client certificate"):format(where, tostring(ctx.user)), 0)
  end
  if user.token then r.token = user.token
  elseif user.tokenFile then r.token = (read_file(rel(user.tokenFile), where .. ": tokenFile", 65536):gsub("%s+$", "")) end
  if user["client-certificate-data"] then r.tls.cert_pem = M.b64decode(user["client-certificate-data"])
  elseif user["client-certificate"] then r.tls.cert_pem = read_file(rel(user["client-certificate"]), where .. ": client-certificate") end
  if user["client-key-data"] then r.tls.key_pem = M.b64decode(user["client-key-data"])
  elseif user["client-key"] then r.tls.key_pem = read_file(rel(user["client-key"]), where .. ": client-key") end
  if (r.tls.cert_pem == nil) ~= (r.tls.key_pem == nil) then error(where .. ": a client certificate needs its key (and the other way round)", 0) end
  if not r.token and not r.tls.cert_pem then
    error(("%s: user %q has no token, tokenFile or client certificate"):format(where, tostring(ctx.user)), 0)
  end
  if r.token and (r.token:find("[%c ]") or #r.token > 16384) then error(where .. ": the token holds spaces or control characters", 0) end
  return r
end

---------------------------------------------------------------------------------------------
-- the API

local function clean(s)
  if type(s) ~= "string" then return nil end
  return (s:sub(1, MAX_MSG):gsub("[%c]", " "))
end

---One API call; returns status, the decoded body (a table, or nil).
---@param cred table M.credentials
---@param method string
---@param path string
---@param body? table
---@return integer, table|nil
function M.api(cred, method, path, body)
  local headers = { Accept = "application/json" }
  if cred.token then headers.Authorization = "Bearer " .. cred.token end
  -- GET is retried after a transient failure (seer.http: connect, reset, 5xx, 429); a create or
  -- delete is not (a retried POST would answer 409 AlreadyExists for its own first attempt)
  local opts = { url = cred.server .. path, method = method, headers = headers, timeout = 30, connect_timeout = 10,
                 retries = method == "GET" and 2 or 0, max_bytes = 4 * 1048576, tls = cred.tls, follow_redirects = false }
  if body ~= nil then opts.json = body end
  local ok, r = pcall(require("seer.http").request, opts)
  if not ok then error(("the Kubernetes API server %s: %s"):format(cred.server, tostring(r)), 0) end
  local okj, v = pcall(json.decode, r.body or "")
  return r.status, okj and type(v) == "table" and v or nil
end

-- An error Status object as one line: "422 Invalid: Pod "x" is invalid: spec...: ..."
local function status_text(code, body)
  if type(body) == "table" and body.kind == "Status" then
    local parts = { ("%d %s"):format(code, clean(body.reason) or "") }
    if body.message then parts[#parts + 1] = clean(body.message) end
    local d = type(body.details) == "table" and body.details or {}
    if type(d.causes) == "table" then
      for i, c in ipairs(d.causes) do
        if i > 20 then break end
        if type(c) == "table" then parts[#parts + 1] = ("%s: %s"):format(clean(c.field) or "?", clean(c.message) or "?") end
      end
    end
    return table.concat(parts, "; ")
  end
  return ("HTTP %d"):format(code)
end
M._status_text = status_text

local function ns_path(cred, kind, name)
  return ("/api/v1/namespaces/%s/%s%s"):format(cred.namespace, kind, name and ("/" .. name) or "")
end

---The Secret and Pod manifests for one sandbox (plain tables, as sent).
---@param c table the SandboxConfig
---@param k table SandboxConfig.kubernetes
---@param names {pod: string, secret: string, id: string}
---@param keys {server_secret: string, client_public: string}
---@return table secret, table pod
function M.manifests(c, k, names, keys)
  local labels = { ["app.kubernetes.io/managed-by"] = "seer", ["seer.sandbox"] = names.id }
  local secret = {
    apiVersion = "v1", kind = "Secret", type = "Opaque",
    metadata = { name = names.secret, labels = labels },
    data = { server_secret = M.b64encode(keys.server_secret), client_public = M.b64encode(keys.client_public) },
  }
  local limits = {}
  if c.gpu then limits["nvidia.com/gpu"] = math.floor(c.gpu_count or 1) end
  if k.cpu then limits.cpu = k.cpu end
  if k.memory then limits.memory = k.memory end
  local node_selector
  for key, v in pairs(k.node_selector or {}) do node_selector = node_selector or {}; node_selector[key] = v end
  if k.gpu_label and c.gpu then node_selector = node_selector or {}; node_selector[k.gpu_label] = tostring(c.gpu) end
  local mounts = { { name = "seer-curve", mountPath = CURVE_MOUNT, readOnly = true } }
  local volumes = { { name = "seer-curve", secret = { secretName = names.secret, defaultMode = tonumber("400", 8) } } }
  local env = {}
  if k.pvc then
    mounts[#mounts + 1] = { name = "models", mountPath = k.pvc_mount }
    volumes[#volumes + 1] = { name = "models", persistentVolumeClaim = { claimName = k.pvc } }
    env[#env + 1] = { name = "HF_HUB_CACHE", value = k.pvc_mount }
  end
  local container = {
    name = "sandbox", image = k.image, imagePullPolicy = k.image_pull_policy,
    command = { k.seer_path, "sandbox", "curve-serve", "--secret-dir", CURVE_MOUNT, "--port", tostring(k.port),
                "--wait", tostring(math.floor(k.start_timeout + 120)) },
    ports = { { name = "seer-curve", containerPort = k.port, protocol = "TCP" } },
    -- bubblewrap in the container makes namespaces and mounts /proc (as for podman): the
    -- container is packaging, the sandbox inside it is the isolation
    securityContext = { privileged = true },
    volumeMounts = mounts,
  }
  if next(limits) then container.resources = { limits = limits } end
  if #env > 0 then container.env = env end
  local pod = {
    apiVersion = "v1", kind = "Pod",
    metadata = { name = names.pod, labels = labels },
    spec = {
      restartPolicy = "Never",
      -- the Pod ends by itself at the latest this long after it started, whatever happens here
      activeDeadlineSeconds = math.floor(c.timeout + k.start_timeout + 300),
      terminationGracePeriodSeconds = 10,
      automountServiceAccountToken = k.service_account ~= nil,
      containers = { container },
      volumes = volumes,
    },
  }
  if k.service_account then pod.spec.serviceAccountName = k.service_account end
  if k.runtime_class then pod.spec.runtimeClassName = k.runtime_class end
  if node_selector then pod.spec.nodeSelector = node_selector end
  if k.image_pull_secret then pod.spec.imagePullSecrets = { { name = k.image_pull_secret } } end
  return secret, pod
end

local PHASES = { Pending = true, Running = true, Succeeded = true, Failed = true, Unknown = true }
local BAD_WAITING = { ImagePullBackOff = true, ErrImagePull = true, InvalidImageName = true, CrashLoopBackOff = true,
                      CreateContainerConfigError = true, CreateContainerError = true, RunContainerError = true,
                      ErrImageNeverPull = true }

---What a Pod object says, checked: {phase, ip?, scheduled_msg?, waiting_reason?, waiting_msg?,
---terminated?, reason?, message?}. Nothing of it is used unchecked.
---@param p table
---@return table
function M.pod_state(p)
  local st = type(p) == "table" and type(p.status) == "table" and p.status or {}
  local r = { phase = PHASES[st.phase] and st.phase or "Unknown", reason = clean(st.reason), message = clean(st.message) }
  if type(st.podIP) == "string" then
    local a, b, c2, d = st.podIP:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    if a and tonumber(a) < 256 and tonumber(b) < 256 and tonumber(c2) < 256 and tonumber(d) < 256 and #st.podIP <= 15 then
      r.ip = st.podIP
    end
  end
  for i, cd in ipairs(type(st.conditions) == "table" and st.conditions or {}) do
    if i > 32 then break end
    if type(cd) == "table" and cd.type == "PodScheduled" and cd.status == "False" then
      r.scheduled_msg = (clean(cd.reason) or "Unschedulable") .. ": " .. (clean(cd.message) or "")
    end
  end
  for i, cs in ipairs(type(st.containerStatuses) == "table" and st.containerStatuses or {}) do
    if i > 16 then break end
    local s = type(cs) == "table" and type(cs.state) == "table" and cs.state or {}
    if type(s.waiting) == "table" then
      r.waiting_reason = clean(s.waiting.reason)
      r.waiting_msg = clean(s.waiting.message)
    end
    if type(s.terminated) == "table" then
      r.terminated = ("%s (exit code %s)%s"):format(clean(s.terminated.reason) or "terminated",
        type(s.terminated.exitCode) == "number" and tostring(s.terminated.exitCode) or "?",
        s.terminated.message and (": " .. clean(s.terminated.message)) or "")
    end
  end
  return r
end

---------------------------------------------------------------------------------------------
-- the handle side

local say = ssh.say

---Starts the sandbox in a Pod: keys, the transport's request file, then the ssh backend's link
---with the tunnel as its transport.
---@param self table the seer.sandbox Sandbox (config.backend == "kubernetes")
---@param opts {name?: string}
function M.start(self, opts)
  local c = self.config
  local k = c.kubernetes
  if not net.has_curve() then
    error('SandboxConfig{backend = "kubernetes"}: this libzmq was built without CURVE (zmq_has("curve") is false); install a libzmq built with libsodium (Debian\'s libzmq5 is)', 0)
  end
  local cred = M.credentials(k) -- fails here, before anything is made, when the credentials are unusable
  local S = require "seer.sandbox"
  local name = (opts.name or "sandbox"):lower():gsub("[^a-z0-9-]", "-"):gsub("^-+", ""):sub(1, 30):gsub("-+$", "")
  local suffix = net.new_key():gsub("[^%x]", ""):sub(1, 8)
  local id = (name ~= "" and name or "sandbox") .. "-" .. suffix
  local state = S.state_root() .. "/" .. id
  process.mkdir_p(state .. "/run")
  require("ffi").C.chmod(state, tonumber("700", 8))
  local spub, ssec = net.curve_keypair()
  local cpub, csec = net.curve_keypair()
  local names = { pod = "seer-" .. id, secret = "seer-" .. id .. "-curve", id = id }
  local req = {
    kubernetes = k, namespace = cred.namespace, names = names, config = { gpu = c.gpu, gpu_count = c.gpu_count, timeout = c.timeout },
    server_public = spub, server_secret = ssec, client_public = cpub, client_secret = csec,
    ctl = "ipc://" .. state .. "/run/.tunnel.sock", ctl_key = net.new_key(),
  }
  local reqfile = state .. "/kubernetes.json"
  safe_fs.root(state, "the sandbox state folder"):write("kubernetes.json", json.encode(req), { mode = tonumber("600", 8) })
  local seer_bin = require("seer.jupyter").seer_binary()
  self.kubernetes = { namespace = cred.namespace, pod = names.pod, secret = names.secret, reqfile = reqfile, server = cred.server }
  local sshf = ssh.check_config({ host = "k8s", start_timeout = k.start_timeout + 60 })
  local ok, err = pcall(ssh.start, self, opts, {
    ssh = sshf, id = id,
    transport = { argv = { seer_bin, "sandbox", "k8s-transport", reqfile }, tunnel = { ctl = req.ctl, key = req.ctl_key },
                  label = ("the Kubernetes Pod %s/%s"):format(cred.namespace, names.pod) },
    on_end = { seer_bin, "sandbox", "k8s-delete", reqfile },
  })
  if not ok then
    -- the link deleted what it made; this is for a link that never started
    pcall(M.delete, req)
    error(err, 0)
  end
  self.remote.host = ("pod %s/%s"):format(cred.namespace, names.pod)
  return self
end

function M.ended(self) return ssh.ended(self) end

---Stops the sandbox (through the link, which deletes the Pod and the Secret); deletes them
---again here in case the link could not.
---@param self table
function M.teardown(self)
  if self.link then ssh.teardown(self) end
  local kk = self.kubernetes
  if kk and kk.reqfile then
    local f = io.open(kk.reqfile, "rb")
    if f then
      local okj, req = pcall(json.decode, f:read(1048576) or "")
      f:close()
      if okj and type(req) == "table" then pcall(M.delete, req) end
    end
  end
end

M.sync_workspace = ssh.sync_workspace

---------------------------------------------------------------------------------------------
-- the transport: `seer sandbox k8s-transport FILE`

local function progress(text) io.stdout:write(json.encode({ progress = text }), "\n"); io.stdout:flush() end

local function check_req(req)
  if type(req) ~= "table" or type(req.kubernetes) ~= "table" or type(req.names) ~= "table" then return nil, "not a request" end
  local k, why = M.check_config(req.kubernetes)
  if not k then return nil, why end
  req.kubernetes = k
  if not dns_subdomain(req.names.pod) or not dns_subdomain(req.names.secret) then return nil, "bad object names" end
  if not dns_label(req.namespace) then return nil, ("the namespace %q is not a namespace name"):format(tostring(req.namespace)) end
  return req
end

local function load_req(path)
  local f = io.open(path or "", "rb")
  if not f then return nil, "cannot read " .. tostring(path) end
  local text = f:read(1048576)
  f:close()
  local ok, req = pcall(json.decode, text or "")
  if not ok then return nil, "not JSON" end
  return check_req(req)
end

---Deletes the sandbox's Pod and Secret (404 is fine). Returns true, or false and why.
---@param req table
---@return boolean, string|nil
function M.delete(req)
  local cred = M.credentials(req.kubernetes)
  cred.namespace = req.namespace
  local why
  local body = { apiVersion = "v1", kind = "DeleteOptions", gracePeriodSeconds = 5, propagationPolicy = "Background" }
  for _, what in ipairs({ { "pods", req.names.pod }, { "secrets", req.names.secret } }) do
    local ok, code, b = pcall(M.api, cred, "DELETE", ns_path(cred, what[1], what[2]), body)
    if not ok then why = tostring(code)
    elseif code ~= 200 and code ~= 202 and code ~= 404 then why = ("deleting %s %s: %s"):format(what[1], what[2], status_text(code, b)) end
  end
  return why == nil, why
end

pcall(require("ffi").cdef, "int getppid(void);")

pcall(require("ffi").cdef, "void *signal(int sig, void *handler);")

local function transport_main(path)
  local ffi = require "ffi"
  local parent = ffi.C.getppid()
  -- a write to the link once it is gone fails (EPIPE) instead of killing this process before it
  -- has deleted the Pod
  ffi.C.signal(13, ffi.cast("void *", 1)) -- SIGPIPE, SIG_IGN
  local req, why = load_req(path)
  if not req then io.stderr:write("k8s-transport: no usable request (this command is started by the kubernetes backend, not by hand): ", tostring(why), "\n"); return 2 end
  local k = req.kubernetes
  local cred = M.credentials(k)
  cred.namespace = req.namespace
  local secret, pod = M.manifests(req.config, k, req.names, { server_secret = req.server_secret, client_public = req.client_public })
  local code, body = M.api(cred, "POST", ns_path(cred, "secrets"), secret)
  if code ~= 201 then error(("creating the Secret %s/%s: %s"):format(cred.namespace, req.names.secret, status_text(code, body)), 0) end
  code, body = M.api(cred, "POST", ns_path(cred, "pods"), pod)
  if code ~= 201 then error(("creating the Pod %s/%s: %s"):format(cred.namespace, req.names.pod, status_text(code, body)), 0) end
  progress(("Pod %s/%s created"):format(cred.namespace, req.names.pod))
  -- wait for Running with an IP; say why it waits whenever that changes
  local t0 = process.now_ms()
  local deadline = t0 + k.start_timeout * 1000
  local last_said, st
  local delay = 100
  while true do
    code, body = M.api(cred, "GET", ns_path(cred, "pods", req.names.pod))
    if code == 404 then error(("the Pod %s/%s was deleted before it ran"):format(cred.namespace, req.names.pod), 0) end
    if code ~= 200 then error(("reading the Pod %s/%s: %s"):format(cred.namespace, req.names.pod, status_text(code, body)), 0) end
    st = M.pod_state(body)
    if st.phase == "Running" and st.ip then break end
    if st.phase == "Failed" or st.phase == "Succeeded" then
      error(("the Pod %s/%s ended before the sandbox started: phase %s%s%s"):format(cred.namespace, req.names.pod, st.phase,
        st.reason and (", " .. st.reason) or "", st.terminated and (", container " .. st.terminated) or (st.message and (": " .. st.message) or "")), 0)
    end
    if st.waiting_reason and BAD_WAITING[st.waiting_reason] then
      error(("the Pod %s/%s cannot start: %s%s"):format(cred.namespace, req.names.pod, st.waiting_reason,
        st.waiting_msg and (": " .. st.waiting_msg) or ""), 0)
    end
    local why = st.scheduled_msg and ("pending: " .. st.scheduled_msg) or (st.waiting_reason and ("waiting: " .. st.waiting_reason))
      or ("phase " .. st.phase)
    if why ~= last_said then
      last_said = why
      progress(("Pod %s/%s %s"):format(cred.namespace, req.names.pod, why))
    end
    if process.now_ms() > deadline then
      error(("the Pod %s/%s did not start within %d s (kubernetes.start_timeout): %s"):format(cred.namespace, req.names.pod,
        k.start_timeout, why), 0)
    end
    process.sleep_ms(delay)
    delay = math.min(delay * 2, 1000)
  end
  progress(("Pod %s/%s running at %s (%.1f s)"):format(cred.namespace, req.names.pod, st.ip, (process.now_ms() - t0) / 1000))
  local okr, rc = pcall(tunnel.client_run, { endpoint = ("tcp://%s:%d"):format(st.ip, k.port), server_public = req.server_public,
    client_public = req.client_public, client_secret = req.client_secret, ctl = req.ctl, ctl_key = req.ctl_key,
    connect_timeout_s = 60,
    -- while it runs: a Pod deleted, evicted or killed from outside ends the tunnel at once, with
    -- the reason (a transient API error is not one)
    check = function()
      local c2, b2 = M.api(cred, "GET", ns_path(cred, "pods", req.names.pod))
      if c2 == 404 then return ("the Pod %s/%s was deleted"):format(cred.namespace, req.names.pod) end
      if c2 ~= 200 then return nil end
      local s2 = M.pod_state(b2)
      if s2.phase == "Failed" or s2.phase == "Succeeded" then
        return ("the Pod %s/%s ended: phase %s%s%s"):format(cred.namespace, req.names.pod, s2.phase,
          s2.reason and (", " .. s2.reason .. (s2.message and (": " .. s2.message) or "")) or "",
          s2.terminated and (", container " .. s2.terminated) or "")
      end
    end })
  -- The link deletes the Pod when the sandbox ends; when the link itself is gone (killed with
  -- its script), nobody else would: this process does.
  if require("ffi").C.getppid() ~= parent then pcall(M.delete, req) end
  if not okr then error(rc, 0) end
  return rc
end

---`seer sandbox k8s-transport FILE`, `k8s-delete FILE`, `curve-serve ...` (started by the backend, not by hand).
---@param which string
---@param args string[]
---@return integer
function M.main(which, args)
  if which == "curve-serve" then
    local o = {}
    local i = 1
    while args[i] do
      local a, v = args[i], args[i + 1]
      if a == "--secret-dir" then o.secret_dir = v
      elseif a == "--port" then o.port = tonumber(v)
      elseif a == "--wait" then o.wait_s = tonumber(v)
      else io.stderr:write("curve-serve: unknown argument ", tostring(a), "\n"); return 2 end
      i = i + 2
    end
    if o.port and (o.port ~= math.floor(o.port) or o.port < 1 or o.port > 65535) then io.stderr:write("curve-serve: --port must be 1..65535\n"); return 2 end
    return tunnel.serve(o)
  end
  if which == "k8s-delete" then
    local req, why = load_req(args[1])
    if not req then io.stderr:write("k8s-delete: no usable request: ", tostring(why), "\n"); return 2 end
    local ok, why = M.delete(req)
    if not ok then io.stderr:write("k8s-delete: ", tostring(why), "\n"); return 1 end
    return 0
  end
  local ok, rc = pcall(transport_main, args[1])
  if not ok then io.stderr:write(tostring(rc), "\n"); return 1 end
  return rc
end

return M
