#!/usr/bin/env bash
# The demo: start a local vLLM (CPU build) serving the small random model, record a short real
# concurrency sweep with `sweeper record` into traces/, stop vLLM, then serve the report site.
#
# Run it through `make demo` (which first creates .venv, .venv-vllm and the model if missing).
# Environment knobs: DEMO_PORT (vLLM port, default: a free one), SITE_ADDR (default 127.0.0.1:8000),
# DEMO_LEVELS (default 1,2,4,8), DEMO_MODEL (default small: the tiny one streams so fast that on
# 2 cores vLLM's API server and the recorder fight for one core), DEMO_SERVE=0 to stop after
# recording.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${DEMO_PORT:-0}"  # 0: any free port
LEVELS="${DEMO_LEVELS:-1,2,4,8}"
MODEL="${DEMO_MODEL:-small}"
SITE_ADDR="${SITE_ADDR:-127.0.0.1:8000}"
RUN_ID="demo-$(date -u +%Y%m%d-%H%M%S)"
WORK=".cache/demo"
LOG="$WORK/vllm.log"
READY="$WORK/ready"
mkdir -p "$WORK"
rm -f "$READY"

server_pid=""
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    echo "demo: stopping vLLM"
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
# vLLM never outlives the demo, however it ends.
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "demo: starting vLLM (CPU) with the $MODEL model (log: $LOG)"
.venv/bin/python scripts/vllm_server.py serve --model ".models/$MODEL" --port "$PORT" \
  --log "$LOG" --ready-file "$READY" &
server_pid=$!

while [ ! -s "$READY" ]; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "demo: vLLM did not start; the end of its log:" >&2
    tail -n 30 "$LOG" >&2 || true
    exit 1
  fi
  sleep 1
done
BASE_URL="$(cat "$READY")"

echo "demo: recording a sweep at concurrency $LEVELS into traces/$RUN_ID"
.venv/bin/sweeper record \
  --base-url "$BASE_URL" \
  --input-len 256 --output-len 128 \
  --concurrency "$LEVELS" --requests-per-level 8 --warmup 1 \
  --server-log "$LOG" \
  --label demo=true \
  --out traces --run-id "$RUN_ID"

stop_server

echo
echo "demo: the trace set is in traces/$RUN_ID/"
echo "      (manifest.json, requests.jsonl, server_metrics.jsonl, server.log)"
if .venv/bin/sweeper summary --help >/dev/null 2>&1; then
  .venv/bin/sweeper summary "traces/$RUN_ID" || true
fi

if [ "${DEMO_SERVE:-1}" = "0" ]; then
  exit 0
fi
if [ -f mkdocs.yml ]; then
  echo "demo: serving the report site on http://$SITE_ADDR/ (Ctrl-C to stop)"
  exec .venv/bin/mkdocs serve --dev-addr "$SITE_ADDR"
else
  echo "demo: no mkdocs.yml yet, so no site to serve; \`sweeper findings traces/$RUN_ID\` explains the run"
fi
