#!/usr/bin/env bash
# Serving many streams whose prompts share a long prefix (a system prompt, few-shot examples),
# petrel serve with --shared-prefix-attn on and off beside llama-server, on one machine
# (docs/ATTENTION.md, "Shared prefix at serving time"):
#   scripts/bench_prefix_vs.sh [-p PASSES] [-t THREADS] [-c STREAMS] [-s SHARED] [-u UNIQUE] [-g MAX_TOKENS] [-T CAP_S] LLAMA_BIN_DIR MODEL...
# Each server is started on a free port and warmed by one request (so the prefix is in its
# cache, as it is for a running server's system prompt); then STREAMS clients send one request
# each: SHARED common tokens, then UNIQUE tokens of their own, MAX_TOKENS new tokens, temperature
# 0 (defaults 32, 2000, 100, 64). Both servers get the same per-stream context (SHARED + UNIQUE +
# MAX_TOKENS, rounded up to 256). The engines take turns first, pass by pass. -T: a run still
# going after CAP_S seconds is stopped and reported as a bound, at most STREAMS x MAX_TOKENS /
# CAP_S t/s (a server whose attention spans every slot's cache can take hours). Environment:
# PETREL (default build/tools/petrel), OUT (raw JSON lines, default
# /tmp/petrel-bench-prefix-vs.jsonl), TABLE_ONLY=1 (only print the table of OUT again).
set -euo pipefail
cd "$(dirname "$0")/.."
passes=3 threads=2 streams=32 shared=2000 unique=100 max_tokens=64 cap=0
usage() {
  sed -n 's/^#   \(scripts\/bench_prefix_vs.sh .*\)/usage: \1/p' "$0" >&2
  exit 2
}
while getopts "p:t:c:s:u:g:T:h" opt; do
  case "$opt" in
    p) passes=$OPTARG ;;
    t) threads=$OPTARG ;;
    c) streams=$OPTARG ;;
    s) shared=$OPTARG ;;
    u) unique=$OPTARG ;;
    g) max_tokens=$OPTARG ;;
    T) cap=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || usage
bin=$1
shift
models=("$@")
for n in "$passes" "$threads" "$streams" "$shared" "$unique" "$max_tokens"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "bench_prefix_vs.sh: '$n' is not a positive count" >&2; exit 2; }
done
[[ "$cap" =~ ^[0-9]+$ ]] || { echo "bench_prefix_vs.sh: -T '$cap' is not a count of seconds" >&2; exit 2; }
[ -x "$bin/llama-server" ] || { echo "bench_prefix_vs.sh: no executable $bin/llama-server" >&2; exit 2; }
for model in "${models[@]}"; do
  [ -f "$model" ] || { echo "bench_prefix_vs.sh: no such file: $model" >&2; exit 2; }
done
petrel=${PETREL:-build/tools/petrel}
[ -x "$petrel" ] || { echo "bench_prefix_vs.sh: no petrel at $petrel (build it, or set PETREL)" >&2; exit 2; }
out=${OUT:-/tmp/petrel-bench-prefix-vs.jsonl}
prompt=$((shared + unique))
ctx=$(((prompt + max_tokens + 255) / 256 * 256))
engines=(petrel-on petrel-off llama-server)
[ -n "${TABLE_ONLY:-}" ] && passes=0
[ "$passes" -gt 0 ] && : > "$out"

source scripts/serve_lib.sh
stop_server_on_exit

# Starts ENGINE on MODEL, warms it, measures; appends one JSON line to $out.
run_one() {
  local engine=$1 model=$2 pass=$3 port logprobs=()
  port=$(free_port)
  case "$engine" in
    petrel-*)
      "$petrel" serve -m "$model" -t "$threads" --parallel "$streams" -c "$ctx" \
          --shared-prefix-attn "${engine#petrel-}" --host 127.0.0.1 --port "$port" \
          > /tmp/bench-prefix-vs-server.log 2>&1 & ;;
    llama-server)
      logprobs=(--logprobs=-1)  # see bench_serve_vs.sh: each chunk counts as one token
      # llama-server of 2026 caps a slot's context at the one the model was trained for (a
      # 2,164-token request to a 2,048-token model is refused with HTTP 400): where the
      # per-stream context is longer, the model's own length is raised to it, as petrel's -c does.
      local info arch trained override=()
      info=$("$petrel" info -m "$model" 2>/dev/null || true)
      arch=$(awk '$1 == "architecture" { print $2 }' <<< "$info")
      trained=$(awk '$1 == "context" { print $2 }' <<< "$info")
      if [ -n "$arch" ] && [[ "$trained" =~ ^[0-9]+$ ]] && [ "$trained" -lt "$ctx" ]; then
        override=(--override-kv "$arch.context_length=int:$ctx")
      fi
      "$bin/llama-server" -m "$model" -t "$threads" --parallel "$streams" -c $((streams * ctx)) \
          "${override[@]}" --host 127.0.0.1 --port "$port" > /tmp/bench-prefix-vs-server.log 2>&1 & ;;
  esac
  server_pid=$!
  wait_healthy "$port" || echo "$(basename "$0"): no answer from the server on port $port" >&2
  local common=(--url "http://127.0.0.1:$port" --prompt-tokens "$prompt" --shared-prefix "$shared"
                "${logprobs[@]}" --json)
  echo "bench_prefix_vs.sh: pass $pass: $engine on $(basename "$model"): warm-up" >&2
  "$petrel" bench-serve "${common[@]}" --clients 1 --requests 1 --max-tokens 4 > /dev/null || true
  echo "bench_prefix_vs.sh: pass $pass: $engine on $(basename "$model"): $streams streams" >&2
  local rss limit=() status=0
  [ "$cap" -gt 0 ] && limit=(timeout "$cap")
  "${limit[@]}" "$petrel" bench-serve "${common[@]}" --clients "$streams" --requests "$streams" \
      --max-tokens "$max_tokens" > /tmp/bench-prefix-vs-run.json || status=$?
  rss=$(awk '/VmHWM/ { print $2 / 1024 }' "/proc/$server_pid/status" 2>/dev/null || echo 0)
  if [ "$status" -eq 124 ]; then
    echo "bench_prefix_vs.sh: pass $pass: $engine stopped after $cap s" >&2
    echo "{\"engine\": \"$engine\", \"model\": \"$(basename "$model")\", \"pass_\": $pass, \"capped_s\": $cap, \"server_rss_mib\": ${rss:-0}}" >> "$out"
    stop_server
    return
  fi
  python3 -c '
import json, sys
d = json.load(open("/tmp/bench-prefix-vs-run.json"))
d.update(engine=sys.argv[1], model=sys.argv[2], pass_=int(sys.argv[3]), server_rss_mib=float(sys.argv[4]))
print(json.dumps(d))' "$engine" "$(basename "$model")" "$pass" "${rss:-0}" >> "$out" ||
    echo "{\"engine\": \"$engine\", \"model\": \"$(basename "$model")\", \"pass_\": $pass, \"error\": true}" >> "$out"
  stop_server
}

for ((pass = 1; pass <= passes; pass++)); do
  for model in "${models[@]}"; do
    # Each engine goes first in turn.
    for ((i = 0; i < ${#engines[@]}; i++)); do
      run_one "${engines[$(((i + pass - 1) % ${#engines[@]}))]}" "$model" "$pass"
    done
  done
done

python3 - "$out" "$streams" "$shared" "$unique" "$max_tokens" <<'PY'
import json, statistics, sys
path, streams, shared, unique, max_tokens = sys.argv[1:]
runs = [json.loads(line) for line in open(path)]
print(f"{streams} streams, {shared} shared + {unique} own prompt tokens, {max_tokens} new tokens; "
      "medians over passes, ratios: median (min-max) of per-pass ratios to llama-server; "
      "a run stopped after CAP s counts as at most every token it was to generate over CAP s")
print("| file | engine | generation t/s | TTFT p50 / p90 ms | inter-token p50 ms | "
      "prompt tokens from cache | failed / failed checks | server peak RSS MiB | / llama-server |")
print("|" + "---|" * 9)
def med(values):
    return statistics.median(values) if values else float("nan")
def rate(r):  # measured, or the bound of a stopped run
    return r["generation_tokens_per_s"] if "capped_s" not in r else int(streams) * int(max_tokens) / r["capped_s"]
def cached(engine, vals):
    # llama-server of early 2025 does not report cached tokens in its usage.
    if engine == "llama-server":
        return "not reported"
    return f'{med([r["cached_prompt_tokens"] for r in vals]):.0f}'
for model in dict.fromkeys(r["model"] for r in runs):
    by = {}
    for r in runs:
        if r["model"] == model and not r.get("error"):
            by.setdefault(r["engine"], {})[r["pass_"]] = r
    base = by.get("llama-server", {})
    for engine in ("petrel-on", "petrel-off", "llama-server"):
        rs = by.get(engine, {})
        if not rs:
            continue
        vals = [r for r in rs.values() if "capped_s" not in r]
        capped = [r for r in rs.values() if "capped_s" in r]
        gen = f"{med([rate(r) for r in vals]):.1f}" if vals else ""
        if capped:
            bound = max(rate(r) for r in capped)
            gen += (" and " if gen else "") + (f"at most {bound:.1f} (stopped after "
                    f"{capped[0]['capped_s']} s in {len(capped)} of {len(rs)} passes)")
        ratios = [rate(rs[p]) / rate(base[p]) for p in rs if p in base and "capped_s" not in rs[p]]
        at_least = "at least " if any("capped_s" in base[p] for p in rs if p in base) else ""
        ratio = (f"{at_least}{med(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
                 if ratios and engine != "llama-server" else "-")
        failed = sum(r["requests_failed"] for r in vals)
        checks = sum(r["check_failures"] for r in vals)
        total = sum(r["requests_ok"] + r["requests_failed"] for r in vals)
        measured = (f'{med([r["ttft_ms"]["p50"] for r in vals]):.0f} / '
                    f'{med([r["ttft_ms"]["p90"] for r in vals]):.0f} | '
                    f'{med([r["inter_token_ms"]["p50"] for r in vals]):.1f} | '
                    f'{cached(engine, vals)} of {med([r["prompt_tokens"] for r in vals]):.0f} | '
                    f'{failed} / {checks} of {total}') if vals else "- | - | - | -"
        print(f'| {model} | {engine} | {gen} | {measured} | '
              f'{med([r["server_rss_mib"] for r in rs.values()]):.0f} | {ratio} |')
PY
