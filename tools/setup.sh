#!/usr/bin/env bash
# Installs the Debian packages in tools/debian-packages.txt that are missing. Idempotent: does
# nothing when everything is there. Not root: prints the exact sudo line and fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
list=${SEER_PACKAGES_FILE:-$here/debian-packages.txt}   # override for tests
mapfile -t pkgs < <(sed -e "s/#.*//" "$list" | awk "NF {print \$1}")
missing=()
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$st" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#pkgs[@]} packages present"
else
  cmd=(apt-get install -y --no-install-recommends "${missing[@]}")
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: run this, then make again:" >&2
    echo "  sudo apt-get update && sudo ${cmd[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  "${cmd[@]}" -qq
  echo "setup: done"
fi

