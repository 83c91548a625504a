#!/usr/bin/env bash
# Installs the system programs the test suite starts for real, when they are missing (and only then):
# PostgreSQL's server binaries (the stores' contract tests run initdb + pg_ctl), HAProxy (the capacity truth
# test) and Chromium (the report and dashboard browser tests, driven by Playwright, which never downloads a
# browser here), and CMake with a C++ compiler (tests/engines/build-llama-server.sh builds llama.cpp's server
# for the real-engine tests). Debian/Ubuntu apt-get, as root or through sudo; elsewhere it says what to install
# and fails.
set -euo pipefail

have_initdb() {
    command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}
missing=()
if ! have_initdb; then missing+=(postgresql); fi
if [ ! -x /usr/sbin/haproxy ] && ! command -v haproxy >/dev/null 2>&1; then missing+=(haproxy); fi
if [ ! -x /usr/bin/chromium ]; then missing+=(chromium); fi
if ! command -v cmake >/dev/null 2>&1; then missing+=(cmake); fi
if ! command -v c++ >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1; then missing+=(g++ make); fi
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else sudo="none"; fi
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$sudo" = "none" ]; then
    echo "the tests need these system packages, which are missing: ${missing[*]}" >&2
    echo "install them (Debian/Ubuntu: apt-get install ${missing[*]}) and run make test again" >&2
    exit 1
fi
echo "installing ${missing[*]} for the test suite"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
