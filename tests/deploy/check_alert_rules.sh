#!/usr/bin/env bash
# Usage: check_alert_rules.sh <deploy/monitoring/stagehand.rules.yaml> <stagehand_rules_test.yaml>
# promtool check rules on the rules, promtool test rules on their unit tests, and every alert of
# the rules file has a case there. Exit 77 when promtool (Debian's prometheus) is not installed.
set -euo pipefail
rules=${1:?rules file}
tests=${2:?promtool test file}
command -v promtool >/dev/null || { echo "promtool not installed" >&2; exit 77; }

promtool check rules "$rules"
(cd "$(dirname "$tests")" && promtool test rules "$(basename "$tests")")
missing=0
for alert in $(sed -nE 's/^ *- alert: ([A-Za-z]+)$/\1/p' "$rules"); do
  if ! grep -qE "^ *alertname: $alert\$" "$tests"; then
    echo "$tests: no case for the alert $alert" >&2
    missing=1
  fi
done
exit $missing
