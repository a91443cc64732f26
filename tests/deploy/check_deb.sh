#!/usr/bin/env bash
# Usage: check_deb.sh <stagehand_*.deb | cpack build dir>
# Checks a .deb built by `cpack -G DEB`: the files it installs, its conffiles, postinst and

set -euo pipefail
arg=${1:?usage: check_deb.sh <stagehand_*.deb | build dir>}
if [[ -d $arg ]]; then
  debs=("$arg"/stagehand_*.deb)
  [[ -e ${debs[0]} ]] || { echo "no stagehand_*.deb in $arg (run cpack -G DEB there)" >&2; exit 1; }
  deb=${debs[-1]}
else
  deb=$arg
fi
command -v dpkg-deb >/dev/null || { echo "SKIP: dpkg-deb not installed"; exit 77; }

fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

contents=$(dpkg-deb -c "$deb" | awk '{print $1, $NF}')
for f in ./usr/bin/stagehand ./usr/bin/stagehandctl ./usr/bin/stagehand-session; do
  grep -qE "^-rwxr-xr-x $f\$" <<<"$contents" || bad "$f missing or not 0755"
done
# The OpenSSL libraries civetweb's TLS loads (status/libssl_shim.cc).
for f in ./usr/lib/stagehand/libstagehand-ssl.so ./usr/lib/stagehand/libstagehand-crypto.so; do
  grep -qE "^-rw-r--r-- $f\$" <<<"$contents" || bad "$f missing or not 0644"
done
for f in ./usr/lib/systemd/system/stagehand.service ./etc/stagehand/config.yaml \
         ./usr/share/doc/stagehand/examples/example-volume.yaml \
         ./usr/share/stagehand/kubernetes/csidriver.yaml \
         ./usr/share/stagehand/kubernetes/daemonset.yaml \
         ./usr/share/stagehand/kubernetes/example-pv.yaml \
         ./usr/share/stagehand/kubernetes/kustomization.yaml \
         ./usr/share/stagehand/monitoring/stagehand.rules.yaml \
         ./usr/share/stagehand/monitoring/prometheusrule.yaml \
         ./usr/share/stagehand/monitoring/podmonitor.yaml \
         ./usr/share/stagehand/monitoring/stagehand-dashboard.json \
         ./usr/share/stagehand/helm/stagehand/Chart.yaml \
         ./usr/share/stagehand/helm/stagehand/values.yaml \
         ./usr/share/stagehand/helm/stagehand/templates/daemonset.yaml; do
  grep -qE "^-rw-r--r-- $f\$" <<<"$contents" || bad "$f missing or not 0644"
done
grep -qE "^d[rwx-]{9} ./etc/stagehand/volumes.d/\$" <<<"$contents" || bad "/etc/stagehand/volumes.d missing"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dpkg-deb -e "$deb" "$tmp/DEBIAN"
grep -qx /etc/stagehand/config.yaml "$tmp/DEBIAN/conffiles" || bad "config.yaml is not a conffile"
[[ -x $tmp/DEBIAN/postinst ]] || bad "postinst missing or not executable"
grep -q 'daemon-reload' "$tmp/DEBIAN/postinst" || bad "postinst does not reload systemd"

field() { dpkg-deb -f "$deb" "$1"; }
[[ $(field Package) == stagehand ]] || bad "Package is $(field Package)"
[[ $(field Section) == admin ]] || bad "Section is $(field Section)"
[[ $(field Architecture) == "$(dpkg --print-architecture)" ]] || bad "Architecture is $(field Architecture)"
[[ $(field Maintainer) == "stagehand developers <dev@stagehand.invalid>" ]] || bad "Maintainer"
depends=$(field Depends)
# Package names alone, one a line (versions and alternatives dropped).
names=$(tr ',|' '\n\n' <<<"$depends" | sed -E 's/^ +//; s/ .*//')
for pkg in e2fsprogs xfsprogs util-linux libiscsi7 libgrpc++1.51 libprotobuf32 \
           libyaml-cpp0.7 libspdlog1.10-fmt9 libfmt9 libmount1 libblkid1 libc6; do
  grep -qxF "$pkg" <<<"$names" || bad "Depends lacks $pkg: $depends"
done

if (( fail )); then
  exit 1
fi
echo "$(basename "$deb"): OK"
echo "Depends: $depends"
