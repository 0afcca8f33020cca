#!/usr/bin/env bash
# scripts/soak.sh MINUTES [MODEL]: `petrel serve` under 32 streaming clients for MINUTES, with
# a KV pool small enough that sequences are preempted, prompts that share a prefix, random
# max_tokens and a quarter of the requests hung up by their client part-way (petrel bench-serve
# drives it and checks every stream: token chunks against usage, no gap or repeat, greedy
# completions of a prompt the start of one another). The server's resident memory and open file
# descriptors are sampled every 10 s. Exits non-zero when a request failed, a stream check
# failed, RSS after the first 2 minutes grew by more than 5 %, the files the server holds open
# changed, or its sockets were not back to the idle count once the clients left.
# MODEL defaults to a synthetic small Q4_0 model made in the work folder. Figures: docs/RELIABILITY.md.
# Environment: PETREL_BIN (default build/tools/petrel), SOAK_DIR (default build/soak),
# SOAK_CLIENTS (32), SOAK_KV_BLOCKS (64 blocks of 16 tokens, about a seventh of what 32
# sequences at their longest would hold: running ones are preempted), SOAK_THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:?usage: scripts/soak.sh MINUTES [MODEL]}"
petrel="${PETREL_BIN:-build/tools/petrel}"
dir="${SOAK_DIR:-build/soak}"
clients="${SOAK_CLIENTS:-32}"
mkdir -p "$dir"
model="${2:-$dir/synth_small_q4_0.gguf}"
if [ ! -f "$model" ]; then
  "$petrel" synth --shape small --type q4_0 -o "$model.partial"
  mv "$model.partial" "$model"
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"

"$petrel" serve -m "$model" --port "$port" --parallel "$clients" -c 512 \
  --kv-blocks "${SOAK_KV_BLOCKS:-64}" -t "${SOAK_THREADS:-2}" --no-access-log \
  >"$dir/serve.log" 2>&1 &
server=$!
sampler=""
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null || true
  kill "$server" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 600); do
  curl -sf "$url/health" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$dir/serve.log" >&2; exit 1; }
  sleep 0.5
done

# One line every 10 s: seconds since the start, RSS in KiB, sockets, other descriptors.
sample() {
  local rss sockets=0 files=0 link
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$server/status")
  for fd in /proc/"$server"/fd/*; do
    link=$(readlink "$fd" 2>/dev/null) || continue
    case "$link" in socket:*) sockets=$((sockets + 1)) ;; *) files=$((files + 1)) ;; esac
  done
  echo "$1 $rss $sockets $files"
}
sample idle >"$dir/samples.txt"
start=$SECONDS
# On a 10 s grid: a sample that takes long (a loaded machine) does not push the next ones back.
( k=1; while :; do
    wait_s=$((start + 10 * k - SECONDS)); [ "$wait_s" -gt 0 ] && sleep "$wait_s"
    sample $((SECONDS - start)); k=$((k + 1))
  done >>"$dir/samples.txt" ) &
sampler=$!

status=0
"$petrel" bench-serve --url "$url" --clients "$clients" --duration $((minutes * 60)) \
  --prompt-tokens 100 --shared-prefix 60 --prompt-set 64 --max-tokens 128 --min-max-tokens 1 \
  --cancel-fraction 0.25 --json >"$dir/report.json" || status=1
kill "$sampler"
sampler=""
curl -sf "$url/metrics" >"$dir/metrics.txt" || true
sleep 2  # the server closes the connections the clients left
sample after >>"$dir/samples.txt"
kill -TERM "$server"
wait "$server" || { echo "soak: petrel serve exited with status $? after SIGTERM" >&2; status=1; }
trap - EXIT

python3 - "$dir" "$clients" <<'PY' || status=1
import json, re, sys
folder, clients = sys.argv[1], int(sys.argv[2])
report = json.load(open(f"{folder}/report.json"))
rows = [line.split() for line in open(f"{folder}/samples.txt")]
idle, after = rows[0], rows[-1]
timed = [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows[1:-1]]
metrics = open(f"{folder}/metrics.txt").read()
def metric(name):
    m = re.search(rf"^{name} ([0-9.e+-]+)$", metrics, re.M)
    return float(m.group(1)) if m else -1
problems = []
print(f"requests: {report['requests_ok']} done, {report['requests_cancelled']} hung up by their "
      f"client, {report['requests_failed']} failed; {report['check_failures']} failed stream "
      f"checks over {report['generation_tokens']} tokens; {report['repeated_prompts_compared']} "
      f"greedy repeats compared")
print(f"throughput: {report['generation_tokens_per_s']:.1f} generated t/s, "
      f"{report['cached_prompt_tokens']} of {report['prompt_tokens']} prompt tokens from the "
      f"prefix cache; {metric('petrel_preempted_sequences_total'):.0f} preemptions")
for p in report["problems"]: problems.append(p)
if report["requests_failed"]: problems.append(f"{report['requests_failed']} requests failed")
if report["check_failures"]: problems.append(f"{report['check_failures']} stream checks failed")
warm = [r for r in timed if r[0] >= 120]
if warm:
    base = warm[0][1]
    top = max(r[1] for r in warm)
    print(f"RSS: {int(idle[1]) / 1024:.0f} MiB idle, {base / 1024:.0f} MiB at 2 min, "
          f"{top / 1024:.0f} MiB most after ({100 * (top - base) / base:+.1f} %), "
          f"{warm[-1][1] / 1024:.0f} MiB at the end ({len(timed)} samples)")
    if top > base * 1.05: problems.append("RSS grew by more than 5 % after the first 2 minutes")
    files = sorted({r[3] for r in warm})
    sockets = max(r[2] for r in warm)
    print(f"descriptors: files {idle[3]} idle, {'/'.join(map(str, files))} under load, "
          f"{after[3]} after; sockets {idle[2]} idle, at most {sockets} under load, {after[2]} after")
    if len(files) != 1 or files[0] != int(after[3]):
        problems.append(f"open files changed under load: {files}, {after[3]} after")
    if sockets > int(idle[2]) + clients:
        problems.append(f"{sockets} sockets under load for {clients} clients")
else:
    problems.append("the run was shorter than the 2 minutes of warm-up")
if after[2] != idle[2]: problems.append(f"sockets: {idle[2]} idle before, {after[2]} after")
for p in problems: print("soak: " + p, file=sys.stderr)
print("PASS" if not problems else "FAIL")
sys.exit(1 if problems else 0)
PY
exit $status
