#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` once per machine for the real-engine tests (pytest -m llama_server).
#
# The sources are the llama.cpp tree that the llama-cpp-python source distribution on PyPI vendors
# (vendor/llama.cpp), so the build needs PyPI and a C++ toolchain with CMake, nothing else. Only the
# `llama-server` target is built, without the web UI (its prebuilt assets come from the network), without
# OpenSSL, CURL or GPU back ends. The binary lands in a cache outside the clone keyed by version:
#   ${CLIFFWATCH_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cliffwatch/engines}/llama-server-<version>/llama-server
# beside the vocabulary-only GGUF of Phi-3's tokenizer that the same tree ships (models/ggml-vocab-phi-3.gguf,
# a real tokenizer and chat template without weights; tests/engines/tiny_gguf.py writes a model around it),
# and is reused while both are there. Prints the binary's path on the last line.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
PYTHON="${PYTHON:-python3}"
CACHE="${CLIFFWATCH_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cliffwatch/engines}"
DEST="$CACHE/llama-server-$VERSION"
BIN="$DEST/llama-server"

VOCAB="ggml-vocab-phi-3.gguf"
if [[ -x "$BIN" && -f "$DEST/$VOCAB" ]] && "$BIN" --version >/dev/null 2>&1; then
    echo "$BIN"
    exit 0
fi

for tool in cmake c++ make; do
    command -v "$tool" >/dev/null || { echo "build-llama-server: $tool is not installed" >&2; exit 3; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "build-llama-server: llama-cpp-python $VERSION sources into $WORK" >&2
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
    "llama-cpp-python==$VERSION" -d "$WORK" >&2 || \
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK" >&2
tar -xzf "$WORK/llama_cpp_python-$VERSION.tar.gz" -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"

cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF >&2
cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >&2

mkdir -p "$DEST.tmp"
cp "$WORK/build/bin/llama-server" "$DEST.tmp/llama-server"
cp "$SRC/models/$VOCAB" "$DEST.tmp/$VOCAB"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "$BIN"
