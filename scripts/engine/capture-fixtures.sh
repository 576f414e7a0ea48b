#!/usr/bin/env bash
# Captures what a running vLLM server answers, as raw HTTP (status line, headers without `date`,
# body), into test/engine/fixtures/: the samples docs/engine.md describes and the simulator is
# calibrated against. Re-run it after a vLLM upgrade and diff.
#
#   scripts/engine/capture-fixtures.sh URL MODEL [KEYED_URL KEY]
#
#     URL        a vLLM server started as harness/engine/vllm.ts starts it, e.g. http://127.0.0.1:8000
#     MODEL      its served model name
#     KEYED_URL  optionally a second one started with --api-key KEY (for the 401 samples)
#
# Greedy requests (temperature 0) answer the same text every time for a given model; sampled ones
# (n > 1) carry a seed. Ids and `created` differ on every run.
set -euo pipefail

URL="${1:?usage: capture-fixtures.sh URL MODEL [KEYED_URL KEY]}"
MODEL="${2:?usage: capture-fixtures.sh URL MODEL [KEYED_URL KEY]}"
KEYED_URL="${3:-}"
KEY="${4:-}"
OUT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/test/engine/fixtures"
mkdir -p "$OUT"

# capture NAME METHOD PATH [BODY] [HEADER...]: one exchange into $OUT/NAME.http.
capture() {
  local name="$1" method="$2" path="$3" body="${4:-}"
  shift 4 || shift $#
  local args=(-sS -N -D - -X "$method" "$URL$path")
  [[ -n "$body" ]] && args+=(-H 'content-type: application/json' --data-binary "$body")
  for h in "$@"; do args+=(-H "$h"); done
  {
    printf '%s %s\n' "$method" "$path"
    for h in "$@"; do printf '%s\n' "$h"; done
    # A long prompt is written shortened: the fixture is for the answer.
    if ((${#body} > 600)); then
      printf '\n%s… (%d characters in all)\n' "${body:0:300}" "${#body}"
    elif [[ -n "$body" ]]; then
      printf '\n%s\n' "$body"
    fi
    printf '\n--- response\n'
    curl "${args[@]}" | tr -d '\r' | grep -v '^date: '
  } >"$OUT/$name.http"
  printf '%s\n' "$OUT/$name.http" >&2
}

hello() { printf '{"model":"%s","messages":[{"role":"user","content":"hello there"}]%s}' "$MODEL" "$1"; }
# A prompt of 2,049 tokens or more with the tiny model's tokenizer (3 tokens a repetition).
long="$(printf 'hello model answer %.0s' $(seq 1 800))"

capture models GET /v1/models ''
capture chat POST /v1/chat/completions "$(hello ',"max_tokens":8,"temperature":0')"
capture chat-stream POST /v1/chat/completions "$(hello ',"max_tokens":4,"temperature":0,"stream":true')"
capture chat-stream-usage POST /v1/chat/completions \
  "$(hello ',"max_tokens":4,"temperature":0,"stream":true,"stream_options":{"include_usage":true}')"
capture chat-n POST /v1/chat/completions "$(hello ',"max_tokens":3,"temperature":1,"seed":7,"n":2')"
capture chat-n-stream-usage POST /v1/chat/completions \
  "$(hello ',"max_tokens":2,"temperature":1,"seed":7,"n":2,"stream":true,"stream_options":{"include_usage":true}')"
capture chat-stop POST /v1/chat/completions "$(hello ',"max_tokens":12,"temperature":0,"stop":["iop"]')"
capture completions POST /v1/completions \
  "{\"model\":\"$MODEL\",\"prompt\":\"hello there\",\"max_tokens\":6,\"temperature\":0}"
capture completions-stream-usage POST /v1/completions \
  "{\"model\":\"$MODEL\",\"prompt\":\"hello there\",\"max_tokens\":3,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}"
capture error-context-length POST /v1/chat/completions \
  "{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"$long\"}],\"max_tokens\":5}"
capture error-context-length-stream POST /v1/chat/completions \
  "{\"model\":\"$MODEL\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"$long\"}],\"max_tokens\":5}"
capture error-max-tokens POST /v1/chat/completions "$(hello ',"max_tokens":5000')"
capture error-n-greedy POST /v1/chat/completions "$(hello ',"max_tokens":2,"temperature":0,"n":2')"
capture error-model-not-found POST /v1/chat/completions \
  '{"model":"no-such-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}'
capture error-invalid-json POST /v1/chat/completions '{"model":'
capture error-unknown-path POST /v1/no-such-path '{}'
capture responses POST /v1/responses \
  "{\"model\":\"$MODEL\",\"input\":\"hello there\",\"max_output_tokens\":5,\"temperature\":0}"
capture responses-stream POST /v1/responses \
  "{\"model\":\"$MODEL\",\"input\":\"hello there\",\"max_output_tokens\":3,\"temperature\":0,\"stream\":true}"
capture responses-get-not-stored GET /v1/responses/resp_0000000000000000 ''
capture messages POST /v1/messages \
  "{\"model\":\"$MODEL\",\"max_tokens\":5,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}"
capture messages-stream POST /v1/messages \
  "{\"model\":\"$MODEL\",\"max_tokens\":3,\"temperature\":0,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}"
capture messages-count-tokens POST /v1/messages/count_tokens \
  "{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}"
capture orca-text POST /v1/chat/completions "$(hello ',"max_tokens":3,"temperature":0')" \
  'endpoint-load-metrics-format: TEXT'
capture orca-json POST /v1/completions \
  "{\"model\":\"$MODEL\",\"prompt\":\"hello there\",\"max_tokens\":3,\"temperature\":0}" \
  'endpoint-load-metrics-format: JSON'
capture orca-stream-has-none POST /v1/chat/completions \
  "$(hello ',"max_tokens":2,"temperature":0,"stream":true')" 'endpoint-load-metrics-format: TEXT'
capture health GET /health ''
capture load GET /load ''

# /metrics: only vLLM's own families (the process_/python_/http_ ones are the Python client's),
# and the buckets of one histogram only (they all have the same shape).
{
  curl -sS -D - "$URL/metrics" -o /dev/null | tr -d '\r' | grep -v '^date: '
  curl -sS "$URL/metrics" | grep -E '^(# (HELP|TYPE) )?vllm:' |
    grep -vE '^vllm:[a-z_:]+_bucket\{' || true
  curl -sS "$URL/metrics" | grep -E '^vllm:time_to_first_token_seconds_bucket\{'
} >"$OUT/metrics.txt"
printf '%s\n' "$OUT/metrics.txt" >&2

if [[ -n "$KEYED_URL" ]]; then
  URL="$KEYED_URL" capture unauthorized-missing-key POST /v1/chat/completions "$(hello ',"max_tokens":2')"
  URL="$KEYED_URL" capture unauthorized-wrong-key POST /v1/chat/completions "$(hello ',"max_tokens":2')" \
    'authorization: Bearer wrong-key'
  URL="$KEYED_URL" capture unauthorized-models GET /v1/models ''
  URL="$KEYED_URL" capture keyed-models GET /v1/models '' "authorization: Bearer $KEY"
  # Only /v1 paths are guarded: /health and /metrics stay open.
  URL="$KEYED_URL" capture keyed-health-open GET /health ''
fi
