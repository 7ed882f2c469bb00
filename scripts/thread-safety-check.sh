#!/usr/bin/env bash
# Compiles (syntax only) every C++ source under src/ with clang and
# -Werror=thread-safety, from the compile commands of a clang build
# directory: a member read or written without the mutex that guards it
# (common/mutex.h) fails here.
#   scripts/thread-safety-check.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: thread-safety-check.sh BUILD_DIR}
db="$build/compile_commands.json"
[ -f "$db" ] || { echo "thread-safety-check: no $db" >&2; exit 2; }
/usr/bin/python3 - "$db" <<'PY' | xargs -0 -n1 -P"${JOBS:-2}" bash -c 'eval "$0" || exit 255'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    f = e["file"]
    if "/src/" not in f or f.endswith("trainer.cc"):  # trainer.cc: libtorch, not built with clang
        continue
    args = shlex.split(e["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c" or a.startswith("-fsanitize"):
            continue
        out.append(a)
    out += ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety"]
    cmd = "cd " + shlex.quote(e["directory"]) + " && " + " ".join(shlex.quote(a) for a in out)
    sys.stdout.write(cmd + "\0")
PY
echo "thread-safety-check: every source under src/ is clean"
