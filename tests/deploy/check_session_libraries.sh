#!/usr/bin/env bash
# Usage: check_session_libraries.sh <built stagehand-session>
# The statically linked session binary must start, and load neither a shared C++ runtime (a
# second libstdc++ next to its static one) nor any library it was meant to carry itself.
set -euo pipefail
binary=${1:?stagehand-session binary}
listed=$("$binary" __list-libraries)
echo "$listed"
grep -q '^interpreter ' <<<"$listed" || { echo "no dynamic loader listed" >&2; exit 1; }
if bad=$(grep -E '/lib(stdc\+\+|gcc_s|protobuf|absl_|iscsi|fuse3|spdlog|fmt)[^/]*$' <<<"$listed"); then
  echo "loaded shared, but should be linked statically:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "OK: $(grep -c '^library ' <<<"$listed") shared libraries, none of them static-linked ones"
