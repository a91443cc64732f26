# Sourced by scripts/image and tests/e2e/test-images: podman's own settings for those scripts
# only, in $cache (set by the caller): runc (crun refuses hybrid cgroup v1 hosts) and an
# open-files limit that builds on hosts whose default is too low for podman.
mkdir -p "$cache"
cat >"$cache/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000"]
[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF=$cache/containers.conf
