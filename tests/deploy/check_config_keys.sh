#!/usr/bin/env bash
# Usage: check_config_keys.sh <packaging/config.yaml> <built stagehand binary>
# Every long flag of `stagehand --help` must appear in the packaged default config as a key
# (`key:` or commented out `# key:`), so the file documents every setting.
set -euo pipefail
config=${1:?config.yaml}
binary=${2:?stagehand binary}

flags=$("$binary" --help | sed -nE 's/^ +--([a-z][a-z0-9-]*).*/\1/p' | sort -u)
[[ -n $flags ]] || { echo "no flags found in '$binary --help'" >&2; exit 1; }
missing=0
for flag in $flags; do
  case $flag in help | version | config) continue ;; esac
  if ! grep -qE "^(# )?$flag:( |\$)" "$config"; then
    echo "$config: no key for --$flag" >&2
    missing=1
  fi
done
if (( missing )); then
  exit 1
fi
echo "config.yaml has a key for every flag"
