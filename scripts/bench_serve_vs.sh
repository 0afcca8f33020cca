#!/usr/bin/env bash
# petrel serve beside llama.cpp at several concurrency levels, on one file and one machine
# (docs/SERVER.md, "Throughput"). For each N: `petrel bench-serve` against `petrel serve`, the
# same client against `llama-server --parallel N`, `llama-batched-bench -npl N`, and the engine
# alone as batched-bench measures it, `petrel bench -d 100 -n 64 --parallel N` (its decode phase:
# the N sequences' server steps, no HTTP), one after the other, then one table.
#   scripts/bench_serve_vs.sh [-n "1 4 8 16 32"] [-t THREADS] [-r REQUESTS_PER_STREAM] LLAMA_BIN_DIR MODEL
# Every request: ~100 prompt tokens, 64 new tokens, temperature 0. REQUESTS_PER_STREAM (default
# 2) x N requests per run. Environment: PETREL (default build/tools/petrel), OUT (raw JSON lines,
# default /tmp/petrel-bench-serve-vs.jsonl), TABLE_ONLY=1 (only print the table of OUT again).
set -euo pipefail
cd "$(dirname "$0")/.."
levels="1 4 8 16 32" threads=2 per_stream=2
usage() {
  sed -n 's/^#   \(scripts\/bench_serve_vs.sh .*\)/usage: \1/p' "$0" >&2
  exit 2
}
while getopts "n:t:r:h" opt; do
  case "$opt" in
    n) levels=$OPTARG ;;
    t) threads=$OPTARG ;;
    r) per_stream=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || usage
bin=$1 model=$2
for n in $levels "$threads" "$per_stream"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "bench_serve_vs.sh: '$n' is not a positive count" >&2; exit 2; }
done
for tool in llama-server llama-batched-bench; do
  [ -x "$bin/$tool" ] || { echo "bench_serve_vs.sh: no executable $bin/$tool" >&2; exit 2; }
done
[ -f "$model" ] || { echo "bench_serve_vs.sh: no such file: $model" >&2; exit 2; }
petrel=${PETREL:-build/tools/petrel}
[ -x "$petrel" ] || { echo "bench_serve_vs.sh: no petrel at $petrel (build it, or set PETREL)" >&2; exit 2; }
out=${OUT:-/tmp/petrel-bench-serve-vs.jsonl}
[ -n "${TABLE_ONLY:-}" ] && levels=""  # print the table of the run in $OUT again
[ -n "$levels" ] && : > "$out"
client=(--max-tokens 64 --prompt-tokens 100 --json)

source scripts/serve_lib.sh
stop_server_on_exit

for n in $levels; do
  requests=$((n * per_stream))
  echo "bench_serve_vs.sh: $n streams: petrel serve" >&2
  "$petrel" bench-serve -m "$model" -t "$threads" --clients "$n" --parallel "$n" \
      --requests "$requests" --serve-arg=-c --serve-arg=512 "${client[@]}" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); d.update(engine="petrel", streams='"$n"'); print(json.dumps(d))' >> "$out"

  echo "bench_serve_vs.sh: $n streams: llama-server" >&2
  port=$(free_port)
  "$bin/llama-server" -m "$model" -t "$threads" --parallel "$n" -c $((n * 512)) \
      --host 127.0.0.1 --port "$port" > /tmp/bench-serve-vs-llama-server.log 2>&1 &
  server_pid=$!
  wait_healthy "$port" || echo "$(basename "$0"): no answer from the server on port $port" >&2
  # Without logprobs, which would cost llama-server a sort of the vocabulary a token: each
  # chunk counts as one token (it sends one a token, except where it holds back partial UTF-8).
  "$petrel" bench-serve --url "http://127.0.0.1:$port" --clients "$n" --requests "$requests" \
      --logprobs=-1 "${client[@]}" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); d.update(engine="llama-server", streams='"$n"'); print(json.dumps(d))' >> "$out" || true
  stop_server

  echo "bench_serve_vs.sh: $n streams: llama-batched-bench" >&2
  "$bin/llama-batched-bench" -m "$model" -t "$threads" -npp 100 -ntg 64 -npl "$n" \
      -c $((n * 164 + 64)) 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 10 and cells[0].isdigit():
        pp, tg, b, kv, t_pp, s_pp, t_tg, s_tg, t, s = cells
        print(json.dumps({"engine": "llama-batched-bench", "streams": int(b), "s_tg": float(s_tg),
                          "all_generation_tokens_per_s": int(b) * int(tg) / float(t)}))
' >> "$out"

  echo "bench_serve_vs.sh: $n streams: petrel bench --parallel" >&2
  "$petrel" bench -m "$model" -t "$threads" -d 100 -p 0 -n 64 --parallel "$n" -r 1 --json |
    python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    print(json.dumps({"engine": "petrel-bench", "streams": int(d["parallel"]),
                      "s_tg": d["tokens_per_second"]}))
' >> "$out"
done

python3 - "$out" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    rows.setdefault(d["streams"], {})[d["engine"]] = d
def serve(d):
    if not d:
        return "-", "-", "-", "-"
    return (f'{d["generation_tokens_per_s"]:.1f}',
            f'{d["ttft_ms"]["p50"]:.0f} / {d["ttft_ms"]["p90"]:.0f}',
            f'{d["inter_token_ms"]["p50"]:.1f}',
            f'{d["requests_failed"]} / {d["check_failures"]} of {d["requests_ok"] + d["requests_failed"]}')
print("| Streams | petrel t/s | TTFT p50 / p90 ms | inter-token p50 ms | failed / failed checks | "
      "llama-server t/s | TTFT p50 / p90 ms | inter-token p50 ms | failed / failed checks | "
      "llama-batched-bench S_TG t/s | all t/s | petrel / S_TG | "
      "petrel bench --parallel t/s | its / S_TG |")
print("|" + "---|" * 14)
for n in sorted(rows):
    r = rows[n]
    p, l, b = r.get("petrel"), r.get("llama-server"), r.get("llama-batched-bench")
    e = r.get("petrel-bench")
    ratio = f'{p["generation_tokens_per_s"] / b["s_tg"]:.2f}' if p and b else "-"
    engine_ratio = f'{e["s_tg"] / b["s_tg"]:.2f}' if e and b else "-"
    cells = [str(n), *serve(p), *serve(l),
             f'{b["s_tg"]:.1f}' if b else "-",
             f'{b["all_generation_tokens_per_s"]:.1f}' if b else "-", ratio,
             f'{e["s_tg"]:.1f}' if e else "-", engine_ratio]
    print("| " + " | ".join(cells) + " |")
PY
