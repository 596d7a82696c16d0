#!/usr/bin/env bash
# `make run`: the proxy on :8080. With no upstream configured (no --upstream via
# PROXY_UPSTREAMS), the bundled vLLM simulator starts on :8000 and serves as the fleet; with no
# PROXY_REDIS_URL the embedded store is used. With the simulator (and no --web-search in ARGS),
# the fake SearXNG of the tests (tests/support/searx.py) starts on :8888 and the web_search tool
# runs against it, and (with no --embedding-model in ARGS) the simulator's embeddings serve
# vector stores and the file_search tool. Extra flags: `make run ARGS="--api-key k"`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
SIM_PORT=${SIM_PORT:-8000}
SEARX_PORT=${SEARX_PORT:-8888}
sim_pid=""
searx_pid=""
search_flags=()
cleanup() {
  [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null || true
  [ -n "$searx_pid" ] && kill "$searx_pid" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

if [ -z "${PROXY_UPSTREAMS:-}" ]; then
  echo "no PROXY_UPSTREAMS: starting the bundled vLLM simulator on 127.0.0.1:${SIM_PORT}"
  "$BIN/responses-proxy" simulate --port "$SIM_PORT" --token-delay-ms "${SIM_TOKEN_DELAY_MS:-20}" &
  sim_pid=$!
  for _ in $(seq 1 100); do
    if "$BIN/python" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:${SIM_PORT}/health', timeout=0.5)" 2>/dev/null; then
      break
    fi
    kill -0 "$sim_pid" 2>/dev/null || { echo "the simulator did not start"; exit 1; }
    sleep 0.1
  done
  export PROXY_UPSTREAMS="http://127.0.0.1:${SIM_PORT}"
  if [[ "${ARGS:-}" != *--web-search* ]]; then
    echo "web search: starting the fake SearXNG on 127.0.0.1:${SEARX_PORT}"
    "$BIN/python" -m tests.support.searx --port "$SEARX_PORT" &
    searx_pid=$!
    search_flags=(--web-search "http://127.0.0.1:${SEARX_PORT}/search")
  fi
  if [[ "${ARGS:-}" != *--embedding-model* ]]; then
    search_flags+=(--embedding-model sim-model)
  fi
fi

echo "proxy on http://${PROXY_HOST:-127.0.0.1}:${PROXY_PORT:-8080} (Ctrl-C stops)"
"$BIN/responses-proxy" serve "${search_flags[@]}" ${ARGS:-}
