#!/usr/bin/env bash
# Renders the frames of an animation with POV-Ray on a local OpenClaw
# network: a coordinator and two agents on this machine, each frame one
# sandboxed exec task run on both agents (2/2), whose output files must
# match bit for bit before the frame is accepted. The frames land in OUT.
#
#   examples/render/render.sh            24 frames, 320x240, into ./frames
#   FRAMES=8 SIZE=160x120 OUT=/tmp/f examples/render/render.sh
#
# Needs povray and its include files on the agents (Debian: apt-get install
# povray povray-includes python3; scripts/setup.sh installs them). Each task
# runs frame.sh, which prints the end of POV-Ray's log when a frame fails.
set -euo pipefail
if ! command -v povray >/dev/null; then
  echo "render.sh: povray is not installed: apt-get install povray povray-includes" >&2
  exit 1
fi
here=$(cd "$(dirname "$0")" && pwd)
claw=${CLAW:-$here/../../build/claw}
frames=${FRAMES:-24}
size=${SIZE:-320x240}
out=${OUT:-$PWD/frames}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

"$claw" coordinator --insecure-local --data "$work/data" --port 0 --http-port -1 \
  --enroll-tokens 2 >"$work/coordinator.log" 2>&1 &
for _ in $(seq 100); do [ -f "$work/data/coordinator.json" ] && break; sleep 0.1; done
target=$(sed -n 's/.*"grpc":"\([^"]*\)".*/\1/p' "$work/data/coordinator.json")
for i in 1 2; do
  "$claw" agent --coordinator "$target" --state "$work/agent$i" --slots 1 --always \
    --token "$(sed -n "${i}p" "$work/data/enroll-tokens")" >"$work/agent$i.log" 2>&1 &
done

job=$("$claw" -c "$target" submit --app exec --name render \
  -i "$here/scene.pov" -i "$here/frame.sh" -i "$here/ppm2png.py" -o 'frame*.png' \
  --range "frame=1..$frames" -- sh frame.sh {frame} "$frames" "${size%x*}" "${size#*x}")
echo "job $job: $frames frames of $size on 2 agents, each rendered twice"
start=$SECONDS
while "$claw" -c "$target" status "$job" --json | grep -q '"state": *"running"'; do sleep 0.2; done
"$claw" -c "$target" status "$job"
"$claw" -c "$target" results "$job" --out "$out" >/dev/null
echo "rendered in $((SECONDS - start)) s; frames in $out"
"$claw" -c "$target" agents
