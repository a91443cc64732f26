#!/usr/bin/env bash
# Usage: verify_unit.sh <unit file> <built stagehand binary>
# Runs `systemd-analyze verify` on a copy of the unit whose ExecStart points at the built binary
# (verify fails when the executable does not exist, and /usr/bin/stagehand is not installed at
# test time). Exit 77 (ctest SKIP_RETURN_CODE) when systemd-analyze is not installed.
set -euo pipefail
unit=${1:?unit file}
binary=${2:?stagehand binary}

if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze not installed (Debian package: systemd)"
  exit 77
fi
[[ -x $binary ]] || { echo "not an executable: $binary" >&2; exit 1; }
binary=$(realpath "$binary")  # ExecStart= needs an absolute path
grep -q '^ExecStart=/usr/bin/stagehand ' "$unit" \
  || { echo "$unit: expected ExecStart=/usr/bin/stagehand ..." >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Same file name: verify derives the unit name (and type) from it.
copy="$tmp/$(basename "$unit")"
sed "s|^ExecStart=/usr/bin/stagehand |ExecStart=$binary |" "$unit" >"$copy"

# verify prints warnings but exits 0 for some of them; treat any output about our unit as a failure.
out=$(systemd-analyze verify "$copy" 2>&1) || { echo "$out" >&2; exit 1; }
if grep -F "$(basename "$unit")" <<<"$out" >&2; then
  echo "systemd-analyze verify warned about $(basename "$unit")" >&2
  exit 1
fi
echo "systemd-analyze verify: $(basename "$unit") OK"
