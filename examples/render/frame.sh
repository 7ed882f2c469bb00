#!/bin/sh
# Renders frame N (of FRAMES) of scene.pov as frameNN.png: the command of one
# exec task, run inside the sandbox with scene.pov, frame.sh and ppm2png.py
# as its input files.
#
#   sh frame.sh N FRAMES [WIDTH HEIGHT]
#
# POV-Ray writes a page of progress for every frame, so its output goes to
# povray.log; when it fails, the end of that log goes to stderr, which the
# exec app passes on in the task's error. -D: no preview window (the sandbox
# has no terminal). POV-Ray stamps the render date into its own PNGs, so it
# writes plain PPM and ppm2png.py makes a PNG of the pixels alone: replicas
# of a frame then match bit for bit.
set -eu
n=$1 frames=$2 width=${3:-320} height=${4:-240}
if ! command -v povray >/dev/null; then
  echo "povray is not installed on this agent: apt-get install povray povray-includes" >&2
  exit 127
fi
if ! povray +Iscene.pov +Oframe.ppm +FP +W"$width" +H"$height" +A0.3 -D +WT1 \
    +KFI1 +KFF"$frames" +SF"$n" +EF"$n" 2>povray.log; then
  echo "povray failed on frame $n; the end of its log:" >&2
  tail -n 12 povray.log >&2
  if grep -q "Cannot open include file" povray.log; then
    echo "(POV-Ray's include files are in the package povray-includes)" >&2
  fi
  exit 1
fi
python3 ppm2png.py
