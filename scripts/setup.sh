#!/usr/bin/env bash
# Installs what OpenClaw Compute needs to build and test, and nothing that is
# already there. Idempotent: a second run changes nothing.
#   Debian 12: apt-get (as root, or through sudo).
#   macOS:     Homebrew (untested branch).
set -euo pipefail

# Every package is named, none left to a "Recommends" (setup installs with
# --no-install-recommends): povray only recommends povray-includes, where
# colors.inc and the other include files live.
DEBIAN_PACKAGES=(
  # build
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev
  libsqlite3-dev libsodium-dev nlohmann-json3-dev libmicrohttpd-dev libssl-dev
  libcpp-httplib-dev  # an HTTP client for the tests
  libcurl4-openssl-dev  # notifications by email (SMTP with STARTTLS)
  libcli11-dev libspdlog-dev libzstd-dev libsystemd-dev
  libgtest-dev libbenchmark-dev
  # the fuzzers (clang with libFuzzer and the sanitizers' runtime)
  clang libclang-rt-14-dev
  # ML apps: libtorch, the Fashion-MNIST dataset, a fast BLAS (OpenMP build)
  libtorch-dev zlib1g-dev dataset-fashion-mnist libopenblas0-openmp
  # the exec sandbox: bubblewrap, and libseccomp for its system-call filter
  bubblewrap libseccomp-dev
  # what tests and examples run inside tasks or beside them: POV-Ray and its
  # include files (examples/render), python3 (the render example's PNG writer,
  # hostile-command tests), curl and sqlite3 (the README's and docs' commands)
  povray povray-includes python3 curl sqlite3
  # the fake mail server of the email notification test (STARTTLS)
  python3-aiosmtpd
  # the PyTorch baseline of bench/ (bench/pytorch_fashion.py imports numpy and torch)
  python3-torch python3-numpy
  # the language model example's pre-training text (examples/lm/corpus.py; its
  # fine-tuning text, the licences of base-files, is on every Debian system)
  fortunes
  # the dashboard's browser test and benchmark: headless Chromium, driven by
  # puppeteer-core from npm (tests/browser/package-lock.json)
  chromium
)
# macOS (untested here: no Mac in CI). Differences from Debian: the sandbox is
# macOS's own sandbox-exec (no bubblewrap); Homebrew's povray carries its
# include files; python3 comes with the Xcode command-line tools; Homebrew has
# no Fashion-MNIST, so the ML tests and examples need its four IDX files in
# /usr/share/datasets/fashion-mnist (or CLAW_FASHION_MNIST pointing at them).
BREW_PACKAGES=(cmake pkg-config grpc protobuf sqlite libsodium nlohmann-json openssl
  libmicrohttpd curl cpp-httplib cli11 spdlog zstd googletest google-benchmark llvm povray pytorch numpy
  fortune node)

case "$(uname -s)" in
  Linux)
    missing=()
    # Node.js for the browser test: Debian's, unless a node (and its npm) is
    # already installed some other way.
    command -v node >/dev/null || missing+=(nodejs)
    command -v npm >/dev/null || missing+=(npm)
    for p in "${DEBIAN_PACKAGES[@]}"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    if [ ${#missing[@]} -eq 0 ]; then
      echo "setup: all packages present"
    else
      echo "setup: installing ${missing[*]}"
      export DEBIAN_FRONTEND=noninteractive
      $SUDO apt-get update -q
      $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
    # libtorch calls whichever BLAS the alternatives select: the reference
    # one is ~2.4x slower on a CNN epoch, and OpenBLAS's pthread build fights
    # torch's OpenMP threads. Select the OpenMP build.
    arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo "$(uname -m)-linux-gnu")
    for lib in libblas.so.3 liblapack.so.3; do
      want=/usr/lib/$arch/openblas-openmp/$lib
      if [ -e "$want" ] && [ "$(readlink -f /usr/lib/$arch/$lib)" != "$(readlink -f "$want")" ]; then
        $SUDO update-alternatives --set "$lib-$arch" "$want"
      fi
    done
    # A cgroup per sandboxed task: where a sandbox bound /sys/fs/cgroup
    # read-only (CI's fresh root), mounted again writable in its namespace.
    "$(dirname "$0")/cgroups.sh"
    ;;
  Darwin)
    command -v brew >/dev/null || { echo "setup: Homebrew is required on macOS" >&2; exit 1; }
    for p in "${BREW_PACKAGES[@]}"; do
      brew list --versions "$p" >/dev/null 2>&1 || brew install "$p"
    done
    ;;
  *)
    echo "setup: unsupported system $(uname -s)" >&2; exit 1 ;;
esac

# puppeteer-core for the dashboard's browser test, exactly as locked (npm's
# registry; it downloads no browser: the test drives the system's Chromium).
browser_dir="$(cd "$(dirname "$0")/../tests/browser" && pwd)"
if ! cmp -s "$browser_dir/package-lock.json" "$browser_dir/node_modules/.package-lock.json.installed" 2>/dev/null; then
  echo "setup: npm ci in tests/browser"
  # Behind a proxy that re-signs TLS with a CA this machine does not trust,
  # npm refuses the registry's certificate. The packages' contents do not
  # rest on it: npm ci checks every tarball against the SHA-512 integrity
  # hash committed in package-lock.json. So on a certificate error (and only
  # then) it runs again without checking the certificate, saying so.
  npm_ci() { (cd "$browser_dir" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error "$@"); }
  # The first try gives up at once (no retries), so that a certificate
  # error is known quickly; any other failure is tried again as usual.
  if ! npm_ci --fetch-retries=0 2>"$browser_dir/npm-ci.log"; then
    if grep -qE "SELF_SIGNED_CERT|UNABLE_TO_GET_ISSUER_CERT|CERT_UNTRUSTED|UNABLE_TO_VERIFY_LEAF" "$browser_dir/npm-ci.log"; then
      echo "setup: the npm registry's TLS certificate is not trusted here (a re-signing proxy?);" \
           "fetching without checking it: package-lock.json's SHA-512 hashes still check every package"
      npm_ci --strict-ssl=false
    else
      npm_ci
    fi
  fi
  rm -f "$browser_dir/npm-ci.log"
  cp "$browser_dir/package-lock.json" "$browser_dir/node_modules/.package-lock.json.installed"
fi
