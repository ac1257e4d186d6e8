#!/usr/bin/env bash
# The Python packages the tests need that Debian 12 does not have, in a git-ignored venv under
# the project (make setup runs this after tools/setup.sh). Idempotent.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# The official MCP Python SDK, for the MCP tests (a real client against seer's servers and a
# real server for seer's client). It comes from PyPI into a git-ignored venv. A machine without
# PyPI still builds and tests: those tests then say "skipped: no MCP SDK (.venv-test)".
MCP_SDK_VERSION=2.3.0
if [[ "${SEER_SKIP_PIP:-}" != 1 ]] && ! "$root/.venv-test/bin/python" -c "import mcp" 2>/dev/null; then
  echo "setup: installing the MCP Python SDK $MCP_SDK_VERSION into .venv-test (pip)"
  if ! { /usr/bin/python3 -m venv "$root/.venv-test" &&
         "$root/.venv-test/bin/pip" install -q --disable-pip-version-check "mcp==$MCP_SDK_VERSION"; }; then
    echo "setup: warning: could not install the MCP SDK from PyPI; MCP tests that need it will be skipped" >&2
  fi
fi

# kubernetes-validate: the official Kubernetes JSON schemas (generated from the OpenAPI spec)
# for the stand-in API server of tests/lua/test_backend_kubernetes.lua (tests/fixtures/k8s_standin.py),
# which checks every request body against them. Without it that test says "skipped".
K8S_VALIDATE_VERSION=1.37.0
if [[ "${SEER_SKIP_PIP:-}" != 1 ]] && [[ -x "$root/.venv-test/bin/python" ]] &&
   ! "$root/.venv-test/bin/python" -c "import kubernetes_validate" 2>/dev/null; then
  echo "setup: installing kubernetes-validate $K8S_VALIDATE_VERSION into .venv-test (pip)"
  if ! "$root/.venv-test/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$K8S_VALIDATE_VERSION"; then
    echo "setup: warning: could not install kubernetes-validate; the kubernetes backend test will be skipped" >&2
  fi
fi
