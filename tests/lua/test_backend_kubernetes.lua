-- The kubernetes backend against a stand-in API server (tests/fixtures/k8s_standin.py).
--
-- No cluster can run on this machine, so the API server is MOCKED: the stand-in serves HTTPS
-- with a certificate made here (TLS verification is real), wants the kubeconfig's bearer token,
-- checks every request body against the official Kubernetes JSON schema of its kind (the
-- kubernetes-validate package, strict), answers with real-shaped Status objects, and plays the
-- Pod lifecycle (pending, running, failed, deleted). A Pod that "runs" runs its container's
-- command on this machine as a local process: the image is NOT pulled (the test points
-- kubernetes.seer_path at this build of seer), and its Secret is mounted as files at the
-- volume's mountPath in a private mount namespace. As root, the Pod gets its own network
-- namespace joined by a veth pair, so the CURVE traffic crosses a real (virtual) network link,
-- and the stand-in records every TCP payload byte on that link.
--
-- What is real: seer's API client (libcurl, TLS, token), the Secret and Pod it makes, the
-- transport, the CURVE tunnel across the veth, curve-serve and remote-start in the "Pod", the
-- local sandbox there (bubblewrap + sandboxd), sessions, terminate and the link's cleanup.
local T = require "testing"
local env = require "seer.environment"
local exec = require "seer.execution"
local net = require "seer.net"
local json = require "seer.json"
local process = require "seer.process"
local sb = require "seer.core.sandbox"
local seer = require "seer"
local k8s = require "seer.backends.kubernetes"

local here = seer.script_dir()
local repo = require("seer.core.host").realpath(here .. "/../..")
local stories = here .. "/../fixtures/models/stories260K"
local PY = repo .. "/.venv-test/bin/python"

local root = T.tmpdir()
T.private_sandbox_dirs(root)

local sh = T.sh
local function exists(p) return require("seer.safe_fs").lstat(p) ~= nil end
local function slurp(p)
  local f = io.open(p, "rb")
  if not f then return nil end
  local d = f:read("*a")
  f:close()
  return d
end

-- The stand-in, started once for the file (killed with this process: setpriv --pdeathsig).
local standin
local function start_standin()
  if standin then return standin end
  if not exists(PY) or not sh(PY .. " -c 'import kubernetes_validate, jsonschema'") then
    T.skip("no kubernetes-validate in .venv-test (make setup installs it: tools/setup-python.sh)")
  end
  if not net.has_curve() then T.skip("this libzmq has no CURVE") end
  if os.execute("command -v bwrap >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1") ~= 0 then
    T.skip("bubblewrap or openssl is not installed (make setup installs them)")
  end
  local ffi = require "ffi"
  pcall(ffi.cdef, "unsigned getuid(void);")
  if ffi.C.getuid() ~= 0 then
    T.skip("not root: the stand-in runs a Pod's command in its own mount and network namespaces (unshare, ip netns)")
  end
  local d = root .. "/api"
  process.mkdir_p(d)
  local ok, out = sh(table.concat({
    "cd " .. d,
    "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=seer-test-ca",
    "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1",
    "printf 'subjectAltName=IP:127.0.0.1\\n' > ext",
    "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile ext",
    "openssl rand -hex 24 > token",
  }, " && "))
  assert(ok, out)
  -- SIGTERM when this test process ends, however it ends: the stand-in then kills its Pods'
  -- processes and removes their network namespaces
  local argv = { PY, repo .. "/tests/fixtures/k8s_standin.py", d }
  if exists("/usr/bin/setpriv") then argv = { "/usr/bin/setpriv", "--pdeathsig", "TERM", "--", PY, repo .. "/tests/fixtures/k8s_standin.py", d } end
  local p = assert(sb.spawn{ argv = argv })
  local deadline = process.now_ms() + 15000
  while not exists(d .. "/port") do
    if process.now_ms() > deadline or p:poll() then error("the stand-in API server did not start: " .. tostring(p:read("err"))) end
    process.sleep_ms(50)
  end
  local port = tonumber(slurp(d .. "/port"))
  local token = slurp(d .. "/token"):gsub("%s+$", "")
  local ca = slurp(d .. "/ca.crt")
  local f = assert(io.open(d .. "/kubeconfig", "w"))
  f:write(([[
apiVersion: v1
kind: Config
current-context: standin   # the one below
clusters:
- name: standin
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority-data: %s
users:
- name: tester
  user:
    token: "%s"
contexts:
- context:
    cluster: standin
    user: tester
    namespace: research
  name: standin
]]):format(port, k8s.b64encode(ca), token))
  f:close()
  standin = { proc = p, dir = d, port = port, token = token, ca = ca, kubeconfig = d .. "/kubeconfig" }
  return standin
end

local function scenario(name)
  local f = assert(io.open(start_standin().dir .. "/scenario", "w"))
  f:write(name)
  f:close()
end

-- What the stand-in holds: {pods = {"ns/name" = pod}, secrets = ..., deleted = {...}}.
local function state()
  local s = start_standin()
  local r = require("seer.http").request{ url = ("https://127.0.0.1:%d/_standin/state"):format(s.port),
    headers = { Authorization = "Bearer " .. s.token }, tls = { ca_pem = s.ca }, retries = 0 }
  assert(r.status == 200, r.body)
  return json.decode(r.body)
end
local function count(t) local n = 0 for _ in pairs(t or {}) do n = n + 1 end return n end

local function kfields(extra)
  local s = start_standin()
  local t = { image = "registry.example/seer-sandbox:test", kubeconfig = s.kubeconfig, seer_path = repo .. "/seer",
              start_timeout = 60 }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local function config(t)
  t = t or {}
  t.backend = "kubernetes"
  t.kubernetes = t.kubernetes or kfields()
  if t.execution_mode == nil then t.execution_mode = "cli" end
  return env.SandboxConfig(t)
end

---------------------------------------------------------------------------------------------

T.test("kubernetes config is checked before anything runs", function()
  T.raises(function() env.SandboxConfig{ backend = "kubernetes" } end, "needs kubernetes = {image")
  T.raises(function() env.SandboxConfig{ backend = "kubernetes", kubernetes = {} } end, "kubernetes.image is required")
  T.raises(function() env.SandboxConfig{ backend = "kubernetes", kubernetes = { image = "x", imgae = 1 } } end,
    "unknown field imgae; valid fields: api_server")
  T.raises(function() env.SandboxConfig{ backend = "kubernetes", kubernetes = { image = "-x" } } end, "is not an image reference")
  T.raises(function() env.SandboxConfig{ backend = "kubernetes", kubernetes = { image = "x", namespace = "Research" } } end, "not a namespace name")
  T.raises(function() env.SandboxConfig{ backend = "kubernetes", kubernetes = { image = "x", node_selector = { ["bad key!"] = "a" } } } end, "is not a label key")
  T.raises(function() env.SandboxConfig{ backend = "kubernetes", kubernetes = { image = "x", node_selector = { zone = "a b" } } } end, "must be a label value")
  T.raises(function() env.SandboxConfig{ backend = "kubernetes", kubernetes = { image = "x", image_pull_policy = "always" } } end, '"Always", "IfNotPresent" or "Never"')
  T.raises(function() env.SandboxConfig{ backend = "kubernetes", kubernetes = { image = "x", api_server = "http://10.0.0.1:6443" } } end, "TLS is required")
  T.raises(function() env.SandboxConfig{ backend = "kubernetes", kubernetes = { image = "x", runtime_class = "G_visor" } } end, "not a Kubernetes object name")
  T.raises(function() env.SandboxConfig{ kubernetes = { image = "x" } } end, 'kubernetes is for backend = "kubernetes"')
  local c = env.SandboxConfig{ backend = "kubernetes", gpu = "A100", gpu_count = 2,
    kubernetes = { image = "reg/seer:1", node_selector = { ["cloud.example/pool"] = "gpu" }, gpu_label = "nvidia.com/gpu.product",
                   runtime_class = "gvisor", service_account = "seer-runner", pvc = "model-cache" } }
  T.eq(c.kubernetes.port, 7766)
  T.eq(c.kubernetes.seer_path, "/opt/seer/bin/seer")
  -- the manifests: GPUs as limits and a node selector; keys only in the Secret
  local spub, ssec = net.curve_keypair()
  local cpub = net.curve_keypair()
  local secret, pod = k8s.manifests(c, c.kubernetes, { pod = "seer-x-1", secret = "seer-x-1-curve", id = "x-1" },
    { server_secret = ssec, client_public = cpub })
  local ctr = pod.spec.containers[1]
  T.eq(ctr.resources.limits["nvidia.com/gpu"], 2)
  T.eq(pod.spec.nodeSelector["nvidia.com/gpu.product"], "A100")
  T.eq(pod.spec.nodeSelector["cloud.example/pool"], "gpu")
  T.eq(pod.spec.runtimeClassName, "gvisor")
  T.eq(pod.spec.serviceAccountName, "seer-runner")
  T.eq(pod.spec.volumes[1].secret.defaultMode, tonumber("400", 8))
  T.eq(pod.spec.volumes[2].persistentVolumeClaim.claimName, "model-cache")
  T.eq(pod.spec.activeDeadlineSeconds, math.floor(c.timeout + 600 + 300))
  local podtext = json.encode(pod)
  T.eq(podtext:find(ssec, 1, true), nil, "the server secret key is not in the Pod spec")
  T.eq(podtext:find(cpub, 1, true), nil, "the client key is not in the Pod spec")
  T.eq(k8s.b64decode(secret.data.server_secret), ssec)
  T.eq(spub ~= nil, true)
end)

T.test("kubeconfig: the YAML kubectl writes; unusable credentials are refused with the reason", function()
  local cfg = k8s.parse_kubeconfig([[
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: ]] .. k8s.b64encode("CA PEM") .. [[

    server: https://10.1.2.3:6443
  name: prod
contexts:
- context: {}
  name: empty
- context:
    cluster: prod
    namespace: "team-a"
    user: alice
  name: prod-ctx
current-context: prod-ctx
kind: Config
users:
- name: alice
  user:
    client-certificate-data: ]] .. k8s.b64encode("CERT") .. [[

    client-key-data: ]] .. k8s.b64encode("KEY") .. "\n", "kc")
  T.eq(cfg["current-context"], "prod-ctx")
  T.eq(cfg.clusters[1].cluster.server, "https://10.1.2.3:6443")
  T.eq(cfg.contexts[2].context.namespace, "team-a")
  local d = root .. "/kc"
  process.mkdir_p(d)
  local function write(name, text) local f = assert(io.open(d .. "/" .. name, "w")); f:write(text); f:close(); return d .. "/" .. name end
  local good = write("good", ([[
current-context: c
clusters:
- name: k
  cluster:
    server: https://10.1.2.3:6443
    certificate-authority-data: %s
users:
- name: u
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: c
  context: {cluster: k, user: u}
]]):gsub("{cluster: k, user: u}", "\n    cluster: k\n    user: u"):format(k8s.b64encode("CA"), k8s.b64encode("CERT"), k8s.b64encode("KEY")))
  local cred = k8s.credentials({ kubeconfig = good })
  T.eq(cred.server, "https://10.1.2.3:6443")
  T.eq(cred.namespace, "default")
  T.eq(cred.tls.ca_pem, "CA")
  T.eq(cred.tls.cert_pem, "CERT")
  local insecure = write("insecure", slurp(good):gsub("certificate%-authority%-data: [^\n]+", "insecure-skip-tls-verify: true"))
  T.raises(function() k8s.credentials({ kubeconfig = insecure }) end, "insecure-skip-tls-verify: seer always verifies", true)
  local plain = write("plain", slurp(good):gsub("https://", "http://"))
  T.raises(function() k8s.credentials({ kubeconfig = plain }) end, "must be an https:// URL")
  local execu = write("exec", slurp(good):gsub("client%-certificate%-data: [^\n]+\n%s+client%-key%-data: [^\n]+", "exec:\n      command: aws"))
  T.raises(function() k8s.credentials({ kubeconfig = execu }) end, "exec or auth-provider plugin", true)
  T.raises(function() k8s.credentials({ kubeconfig = good, context = "nope" }) end, 'no context named "nope"')
  -- in-cluster: the service account's files and KUBERNETES_SERVICE_HOST/PORT
  local sa = d .. "/sa"
  process.mkdir_p(sa)
  local f = assert(io.open(sa .. "/token", "w")); f:write("sa-token\n"); f:close()
  f = assert(io.open(sa .. "/ca.crt", "w")); f:write("SA CA"); f:close()
  f = assert(io.open(sa .. "/namespace", "w")); f:write("jobs\n"); f:close()
  T.setenv("SEER_K8S_SERVICEACCOUNT_DIR", sa)
  T.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
  T.setenv("KUBERNETES_SERVICE_PORT", "443")
  local ic = k8s.credentials({ in_cluster = true })
  T.eq(ic.server, "https://10.96.0.1:443")
  T.eq(ic.namespace, "jobs")
  T.eq(ic.token, "sa-token")
  T.eq(ic.tls.ca_pem, "SA CA")
end)

T.test("what the API server says about a Pod is checked before use", function()
  local st = k8s.pod_state({ status = { phase = "Running", podIP = "10.1.2.3; rm -rf /" } })
  T.eq(st.ip, nil, "a podIP that is not an IPv4 address is not used")
  T.eq(k8s.pod_state({ status = { phase = "Exploded", podIP = "10.0.0.300" } }).phase, "Unknown")
  T.eq(k8s.pod_state({ status = { phase = "Running", podIP = "10.0.0.300" } }).ip, nil)
  local long = k8s.pod_state({ status = { conditions = { { type = "PodScheduled", status = "False", reason = "Unschedulable",
    message = ("x"):rep(100000) .. "\27[31m" } } } })
  T.ok(#long.scheduled_msg < 600, "messages are bounded")
end)

T.test("a notebook session on stories260K runs in a Pod through the CURVE tunnel; terminate deletes the Pod and the Secret", function()
  scenario("run")
  local t0 = process.now_ms()
  local s = env.Sandbox(config({ execution_mode = "notebook", models = { env.ModelConfig{ name = stories } }, timeout = 300 })):start{ name = "nb" }
  local out, r = s:exec("echo hello; id -u; ls /models")
  local ms = process.now_ms() - t0
  io.write(("  (kubernetes on the stand-in: start() to the first answered exec %.0f ms)\n"):format(ms))
  T.eq(r.exit_code, 0)
  T.eq(out, "hello\n65534\nstories260K\n")
  -- exec round trips through the tunnel, against a local sandbox in the same run
  local function rtt(sbx)
    local t = {}
    for i = 1, 9 do local a = process.now_ms(); sbx:exec("true"); t[i] = process.now_ms() - a end
    table.sort(t)
    return t[5]
  end
  local loc = env.Sandbox(env.SandboxConfig{ execution_mode = "cli" }):start{ name = "cmp" }
  io.write(("  (exec round trip, median of 9: kubernetes %.1f ms, local sandbox %.1f ms)\n"):format(rtt(s), rtt(loc)))
  loc:terminate()
  local st = state()
  local key = "research/" .. s.kubernetes.pod
  T.ok(st.pods[key], "the Pod exists")
  T.eq(st.pods[key].status.phase, "Running")
  T.ok(st.secrets[key .. "-curve"], "the Secret exists")
  T.eq(json.encode(st.pods[key]):find(slurp(s.kubernetes.reqfile):match('"server_secret":"([^"]+)"'), 1, true), nil,
    "the Pod object does not hold the server's secret key")
  T.ok(st.pods[key].status.podIP:match("^10%.233%."), "a Pod IP on the veth link")
  -- files, binary safe
  local bytes = {}
  for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
  local blob = table.concat(bytes):rep(64)
  s:write_file("data/blob.bin", blob)
  T.eq(s:read_file("data/blob.bin"), blob)
  -- the session: the kernel runs in the Pod's sandbox, its sockets carried by the tunnel
  local W = require "seer.workspace"
  local lib = W.Library.from_code("pod_helpers", "return { answer = function() return 42 end }")
  local session = exec.create_notebook_session(s, W.Workspace{ libraries = { lib } }, { output_dir = root .. "/nb" })
  T.eq(session:exec("print(require('pod_helpers').answer())").text, "42\n")
  local res = session:exec("print(model:generate('Once upon a time', { max_new_tokens = 6 }).text)")
  local m = require("seer.model").load(stories)
  T.eq(res.text, m:generate("Once upon a time", { max_new_tokens = 6 }).text .. "\n")
  -- the live view and the agent's MCP server are this machine's notebook server, as locally
  T.ok(s.jupyter_url and s.jupyter_url:match("^http://127%.0%.0%.1:%d+/"), tostring(s.jupyter_url))
  T.ok(session.mcp_config.notebook.env.SEER_NOTEBOOK_SCOPE_KEY, "a sandbox-scoped MCP config")
  session:terminate()
  local pod, secret = s.kubernetes.pod, s.kubernetes.secret
  s:terminate()
  st = state()
  T.eq(st.pods[key], nil, "the Pod is deleted")
  T.eq(st.secrets[key .. "-curve"], nil, "the Secret is deleted")
  local deleted = table.concat(st.deleted, ",")
  T.contains(deleted, "pods/research/" .. pod)
  T.contains(deleted, "secrets/research/" .. secret)
end)

T.test("the wire: no plaintext on the Pod's link (a control shows the capture sees plaintext); a wrong CURVE key gets nothing", function()
  scenario("run")
  local s = env.Sandbox(config({ timeout = 300 })):start{ name = "wire" }
  local st = state()
  local ip = st.pods["research/" .. s.kubernetes.pod].status.podIP
  -- 4 MiB each way: more than the tunnel's queues hold at once (flow control)
  local big = ("0123456789abcdef"):rep(262144)
  s:write_file("big.bin", big)
  T.eq(s:read_file("big.bin"), big)
  local marker = "PLAINTEXT-MARKER-" .. ("0123456789abcdef"):rep(4)
  s:write_file("m.txt", marker:rep(100))
  T.eq(s:read_file("m.txt"), marker:rep(100))
  T.contains(s:exec("echo " .. marker), marker)
  -- a client with another key, and one without CURVE, get no answer from the Pod's port
  local req = json.decode(slurp(s.kubernetes.reqfile))
  local wpub, wsec = net.curve_keypair()
  local wrong = net.raw_socket("dealer")
  wrong:curve_client(req.server_public, wpub, wsec)
  wrong:connect(("tcp://%s:7766"):format(ip))
  wrong:send_raw({ "ping" }, true)
  T.eq(wrong:recv_frames(1500), nil, "a wrong client key gets nothing")
  wrong:close()
  local plain = net.raw_socket("dealer")
  plain:connect(("tcp://%s:7766"):format(ip))
  plain:send_raw({ "ping" }, true)
  T.eq(plain:recv_frames(1000), nil, "a client without CURVE gets nothing")
  plain:close()
  -- nothing else listens in the Pod's network namespace: its TCP table (seen through the
  -- curve-serve process whose connection has the Pod's address) has one listener, the CURVE port
  local a, b, c, d = ip:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  local iphex = ("%02X%02X%02X%02X"):format(tonumber(d), tonumber(c), tonumber(b), tonumber(a))
  local listeners
  for _, e in ipairs(sb.listdir("/proc")) do
    if e.name:match("^%d+$") and (slurp("/proc/" .. e.name .. "/cmdline") or ""):find("curve-serve", 1, true) then
      local tcp = (slurp("/proc/" .. e.name .. "/net/tcp") or "") .. (slurp("/proc/" .. e.name .. "/net/tcp6") or "")
      if tcp:find(iphex .. ":1E56", 1, true) then
        listeners = {}
        for line in tcp:gmatch("[^\n]+") do
          local laddr, st = line:match("^%s*%d+: (%x+:%x+) %x+:%x+ (%x%x)")
          if st == "0A" then listeners[#listeners + 1] = laddr end
        end
      end
    end
  end
  T.ok(listeners, "found the Pod's curve-serve")
  T.eq(listeners, { "00000000:1E56" }, "the only TCP listener in the Pod is the CURVE port 7766")
  -- the sandbox still works (those clients did not disturb the tunnel)
  T.eq(s:exec("echo still"), "still\n")
  -- the control: plaintext sent to the same port over the same link is seen by the capture
  local control = "CONTROL-PLAINTEXT-" .. ("fedcba9876543210"):rep(2)
  local sock = require "seer.sock"
  local fd = assert(sock.connect_tcp(ip, 7766, 3000))
  sock.send_all(fd, control, 3000)
  process.sleep_ms(300)
  sock.close(fd)
  process.sleep_ms(300)
  local cap = slurp(start_standin().dir .. "/capture-" .. s.kubernetes.pod .. ".bin") or ""
  s:terminate()
  T.ok(#cap > 10000, ("the capture holds the session's traffic (%d bytes)"):format(#cap))
  T.contains(cap, control, "the control: the same capture sees plaintext")
  T.eq(cap:find(marker, 1, true), nil, "the marker never appears on the wire")
  T.eq(cap:find("exec_request", 1, true), nil, "protocol names never appear on the wire")
  T.eq(cap:find("sandboxd", 1, true), nil)
end)

T.test("a Pod deleted from outside: the next call says the sandbox has ended, and why", function()
  scenario("run")
  local s = env.Sandbox(config({ timeout = 300 })):start{ name = "evicted" }
  T.eq(s:exec("echo up"), "up\n")
  local cred = k8s.credentials(s.config.kubernetes)
  local code = k8s.api(cred, "DELETE", "/api/v1/namespaces/research/pods/" .. s.kubernetes.pod)
  T.eq(code, 200)
  local t0 = process.now_ms()
  local ok, err
  repeat
    process.sleep_ms(500)
    ok, err = pcall(s.exec, s, "echo still")
  until not ok or process.now_ms() - t0 > 40000
  T.eq(ok, false)
  T.contains(tostring(err), "has ended")
  T.contains(tostring(err), "the connection to the Kubernetes Pod research/" .. s.kubernetes.pod .. " was lost")
  T.contains(tostring(err), "the Pod research/" .. s.kubernetes.pod .. " was deleted")
  io.write(("  (the loss was reported %.1f s after the Pod was deleted)\n"):format((process.now_ms() - t0) / 1000))
  s:terminate()
  local st = state()
  T.eq(count(st.pods), 0)
  T.eq(count(st.secrets), 0, "the Secret is deleted too")
end)

T.test("a Pod evicted while it runs, and a container that exits at once: phase and reason are reported", function()
  scenario("run")
  local s = env.Sandbox(config({ timeout = 300 })):start{ name = "evict" }
  T.eq(s:exec("echo up"), "up\n")
  scenario("evict")
  local t0 = process.now_ms()
  local ok, err
  repeat
    process.sleep_ms(300)
    ok, err = pcall(s.exec, s, "echo still")
  until not ok or process.now_ms() - t0 > 30000
  T.eq(ok, false)
  T.contains(tostring(err), "ended: phase Failed, Evicted: The node was low on resource: memory.")
  s:terminate()
  scenario("run")
  -- the container's command fails at once (here: the image has no seer where seer_path says)
  local bad = env.Sandbox(config({ kubernetes = kfields({ seer_path = "/bin/false" }) }))
  local ok2, err2 = pcall(bad.start, bad, { name = "crash" })
  T.eq(ok2, false)
  T.contains(tostring(err2), "phase Failed")
  T.contains(tostring(err2), "Error (exit code 1)")
  local st = state()
  T.eq(count(st.pods), 0)
  T.eq(count(st.secrets), 0)
end)

T.test("the API server's schema check: a bad field is a clear error (422 with the field)", function()
  local s = start_standin()
  local c = config()
  local cred = k8s.credentials(c.kubernetes)
  local _, pod = k8s.manifests(c, c.kubernetes, { pod = "seer-bad-1", secret = "seer-bad-1-curve", id = "bad-1" },
    { server_secret = ("a"):rep(40), client_public = ("b"):rep(40) })
  pod.spec.containers[1].gpus = 1 -- not a field of Container
  pod.spec.activeDeadlineSeconds = "soon" -- an integer field
  local code, body = k8s.api(cred, "POST", "/api/v1/namespaces/research/pods", pod)
  T.eq(code, 422)
  local text = k8s._status_text(code, body)
  T.contains(text, "422 Invalid")
  T.contains(text, "spec.containers.0")
  T.contains(text, "gpus")
  T.contains(text, "spec.activeDeadlineSeconds")
  -- a client certificate signed by the cluster's CA instead of a token (mutual TLS): the
  -- kubeconfig's client-certificate-data / client-key-data reach libcurl in memory
  local d = s.dir
  local okc, outc = sh(("cd %s && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout client.key -out client.csr -subj /CN=tester "
    .. "&& openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2"):format(d))
  T.ok(okc, outc)
  local kc = slurp(s.kubeconfig):gsub('token: "[^"]*"', ("client-certificate-data: %s\n    client-key-data: %s"):format(
    k8s.b64encode(slurp(d .. "/client.crt")), k8s.b64encode(slurp(d .. "/client.key"))))
  local f = assert(io.open(d .. "/kubeconfig-cert", "w")); f:write(kc); f:close()
  local ccred = k8s.credentials({ kubeconfig = d .. "/kubeconfig-cert" })
  T.eq(ccred.token, nil)
  T.eq(k8s.api(ccred, "GET", "/api/v1/namespaces/research/pods/nothing-here"), 404, "authenticated by the client certificate")
  -- without the token: 401
  local code2 = k8s.api({ server = cred.server, namespace = "research", tls = cred.tls }, "GET", "/api/v1/namespaces/research/pods/x")
  T.eq(code2, 401)
  -- TLS is verified: another CA fails
  local other = k8s.api
  T.raises(function() other({ server = cred.server, token = s.token, tls = { ca_pem = slurp(root .. "/api/server.crt"):gsub("M", "N") } }, "GET", "/api/v1/namespaces/research/pods/x") end, "Kubernetes API server")
  T.eq(count(state().pods), 0)
end)

T.test("a Pod stuck pending: the scheduler's message is reported, then start() times out with it", function()
  scenario("pending")
  local sbx = env.Sandbox(config({ gpu = "A100", kubernetes = kfields({ start_timeout = 2 }) }))
  local ok, err = pcall(sbx.start, sbx, { name = "pend" })
  T.eq(ok, false)
  T.contains(tostring(err), "did not start within 2 s (kubernetes.start_timeout)")
  T.contains(tostring(err), "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
  T.contains(table.concat(sbx.start_progress or {}, "\n"), "pending: Unschedulable: 0/1 nodes are available")
  local st = state()
  T.eq(count(st.pods), 0, "the pending Pod is deleted")
  T.eq(count(st.secrets), 0, "its Secret is deleted")
  T.eq(#(sb.listdir(root .. "/sb") or {}), 0, "no local folder is left behind")
end)

T.test("an image that cannot be pulled fails start() with the reason", function()
  scenario("pullfail")
  local sbx = env.Sandbox(config())
  local ok, err = pcall(sbx.start, sbx, { name = "pull" })
  T.eq(ok, false)
  T.ok(tostring(err):find("ErrImagePull", 1, true) or tostring(err):find("ImagePullBackOff", 1, true), tostring(err))
  T.contains(tostring(err), "registry.example/seer-sandbox:test")
  local st = state()
  T.eq(count(st.pods), 0)
  T.eq(count(st.secrets), 0)
end)

T.test("the script killed with -9: the link deletes the Pod and the Secret", function()
  scenario("run")
  local s = start_standin()
  local script = root .. "/killme.lua"
  local f = assert(io.open(script, "w"))
  f:write(([[
local env = require "seer.environment"
local s = env.Sandbox(env.SandboxConfig{ backend = "kubernetes", execution_mode = "cli", timeout = 300,
  kubernetes = { image = "registry.example/seer-sandbox:test", kubeconfig = %q, seer_path = %q } }):start{ name = "victim" }
local out = s:exec("echo ok"); io.write("up ", out); io.flush()
while true do require("seer.process").sleep_ms(1000) end
]]):format(s.kubeconfig, repo .. "/seer"))
  f:close()
  scenario("run")
  local p = assert(sb.spawn{ argv = { repo .. "/seer", script } })
  local deadline = process.now_ms() + 60000
  local out = ""
  while not out:find("up ok", 1, true) do
    local d = p:read("out")
    if d then out = out .. d end
    if p:poll() then error("the script ended: " .. out .. tostring(p:read("err"))) end
    T.ok(process.now_ms() < deadline, "the script's sandbox started")
    process.sleep_ms(50)
  end
  T.eq(count(state().pods), 1)
  p:kill(sb.SIGKILL)
  p:close()
  local t0 = process.now_ms()
  while count(state().pods) > 0 and process.now_ms() - t0 < 30000 do process.sleep_ms(100) end
  T.eq(count(state().pods), 0, "the Pod is deleted after the script's death")
  T.eq(count(state().secrets), 0, "the Secret too")
  io.write(("  (Pod deleted %.1f s after kill -9)\n"):format((process.now_ms() - t0) / 1000))
end)

T.test("seer sandbox list shows a kubernetes sandbox; seer sandbox terminate ID deletes its Pod", function()
  scenario("run")
  local s = env.Sandbox(config({ timeout = 300 })):start{ name = "cli" }
  local ok, out = sh(repo .. "/seer sandbox list")
  T.ok(ok, out)
  T.contains(out, s.sandbox_id)
  local ok2, out2 = sh(repo .. "/seer sandbox terminate " .. s.sandbox_id)
  T.ok(ok2, out2)
  local t0 = process.now_ms()
  while count(state().pods) > 0 and process.now_ms() - t0 < 30000 do process.sleep_ms(100) end
  local left = state()
  local names = {}
  for k, v in pairs(left.pods) do names[#names + 1] = k .. " " .. tostring(v.status.phase) end
  T.eq(count(left.pods), 0, "the Pod is deleted: " .. table.concat(names, ", ") .. " " .. tostring(slurp(s.state_dir .. "/logs/sandbox.log")))
  T.eq(count(state().secrets), 0, "the Secret too")
  T.raises(function() s:exec("echo gone") end, "has ended")
  s:terminate()
end)

T.test("stop the stand-in: its Pods' processes and network namespaces are gone", function()
  if not standin then T.skip("the stand-in did not run") end
  local pid = standin.proc:pid()
  standin.proc:kill(15)
  local t0 = process.now_ms()
  while not standin.proc:poll() and process.now_ms() - t0 < 10000 do process.sleep_ms(50) end
  T.ok(standin.proc:poll(), "the stand-in ended")
  local _, list = sh("ip netns list")
  T.eq(list:find("seerk8s-" .. pid .. "-", 1, true), nil, "no network namespace of it is left")
  standin = nil
end)
