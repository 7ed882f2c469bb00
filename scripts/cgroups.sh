#!/usr/bin/env bash
# Makes the cgroup hierarchies writable where a sandbox or container bound
# /sys/fs/cgroup read-only but lets this (root) process mount in a mount
# namespace of its own, as CI's fresh-machine root does: the agent holds
# each sandboxed task in a cgroup of its own (src/sandbox/task_group.h), and
# its tests check that memory and processes are bounded per task there.
#
# On a normal machine it does nothing: as root /sys/fs/cgroup is writable
# already, and a user's agent uses a delegated cgroup v2 subtree instead
# (docs/operations.md). Where mounting is not allowed (an unprivileged
# container) it does nothing either; the agent then says that tasks' memory
# is bounded per process only.
set -uo pipefail
[ "$(uname -s)" = Linux ] && [ "$(id -u)" = 0 ] || exit 0
mounted_ro() { awk -v p="$1" '$5 == p { split($6, o, ","); print o[1] }' /proc/self/mountinfo | tail -1; }
[ "$(mounted_ro /sys/fs/cgroup)" = ro ] || exit 0

# What is mounted now: "type point controllers" per hierarchy.
hierarchies=$(awk '{
  for (i = 7; $i != "-"; i++) {}
  type = $(i + 1); point = $5; n = split($(i + 3), o, ","); c = ""
  for (j = 1; j <= n; j++) if (o[j] != "rw" && o[j] != "ro" && o[j] !~ /^name=/) c = c (c ? "," : "") o[j]
  if (type == "cgroup" && c != "") print type, point, c
  if (type == "cgroup2") print type, point, "-"
}' /proc/self/mountinfo)
[ -n "$hierarchies" ] || exit 0
if [ "$(awk -v p=/sys/fs/cgroup '$5 == p' /proc/self/mountinfo | grep -c ' - cgroup2 ')" != 0 ]; then
  mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null || exit 0   # the unified hierarchy alone
else
  mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup 2>/dev/null || exit 0
  while read -r type point controllers; do
    mkdir -p "$point"
    if [ "$type" = cgroup2 ]; then
      mount -t cgroup2 cgroup2 "$point" 2>/dev/null
    else
      mount -t cgroup -o "$controllers" cgroup "$point" 2>/dev/null
    fi
  done <<<"$hierarchies"
fi
echo "setup: cgroups mounted writable in this mount namespace (/sys/fs/cgroup was read-only)"
