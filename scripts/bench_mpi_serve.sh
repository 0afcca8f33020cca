#!/usr/bin/env bash
# By hand: `serve --mpi` over 2 ranks (1 thread each) against one process with 2 threads, on the
# same host, with `petrel bench-serve` as the load: STREAMS concurrent greedy streams, the two
# servers measured in turn (A B A B …) so that a load that changes affects both alike. Prints
# each run's output tokens/s and each process's CPU seconds (user + system) during the run.
#
#   scripts/bench_mpi_serve.sh [BUILD_DIR] MODEL [STREAMS] [PAIRS] [MICRO_BATCHES]
#
# On one host the ranks share its cores: this measures the pipeline's overhead, not a speed-up.
set -euo pipefail

build=${1:-build}
model=$2
streams=${3:-16}
pairs=${4:-3}
micro=${5:-0}
petrel=$(realpath "$build/tools/petrel")
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
work=$(mktemp -d /tmp/petrel-mpi-bench.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port_a=$((20000 + RANDOM % 5000)) port_b=$((25000 + RANDOM % 5000))
"$petrel" serve -m "$model" -t 2 --parallel "$streams" --port "$port_a" --no-access-log \
  2>"$work/a.log" &
pids+=($!)
micro_arg=()
[ "$micro" != 0 ] && micro_arg=(--mpi-micro-batches "$micro")
mpirun "${root[@]}" --oversubscribe -np 2 --mca btl self,vader \
  --mca btl_vader_single_copy_mechanism none \
  "$petrel" serve -m "$model" -t 1 --parallel "$streams" --port "$port_b" --no-access-log \
  --mpi "${micro_arg[@]}" 2>"$work/b.log" &
pids+=($!)
for port in "$port_a" "$port_b"; do
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.2
  done
done

# The CPU clock ticks (user + system) the processes PIDS have used.
cpu_of() {  # PIDS...
  local total=0 pid
  for pid in "$@"; do
    read -r -a f <"/proc/$pid/stat"
    total=$((total + f[13] + f[14]))
  done
  echo "$total"
}
tick=$(getconf CLK_TCK)
a_pids=$(pgrep -f "petrel serve -m $model -t 2 --parallel $streams --port $port_a" | tr '\n' ' ')
b_pids=$(pgrep -f "^$petrel serve -m $model -t 1 --parallel $streams --port $port_b" | tr '\n' ' ')
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "A: one process -t 2 (pid $a_pids); B: mpirun -np 2, -t 1 each (rank pids $b_pids)"
[ -n "${PROFILE:-}" ] && echo "B's ranks: $b_pids" >"$PROFILE"

run() {  # NAME PORT PIDS...
  local name=$1 port=$2
  shift 2
  local before after
  before=$(cpu_of "$@")
  "$petrel" bench-serve --url "http://127.0.0.1:$port" --clients "$streams" \
    --requests $((streams * 2)) --prompt-tokens 32 --max-tokens 32 >"$work/run.txt" 2>&1
  after=$(cpu_of "$@")
  local tps
  tps=$(awk '/^tokens: generation/ {print $3}' "$work/run.txt")
  echo "$name: generation $tps t/s, CPU $(awk -v t=$((after - before)) -v k="$tick" \
    'BEGIN {printf "%.2f", t / k}') s, load $(cut -d' ' -f1 /proc/loadavg)"
}
for _ in $(seq "$pairs"); do
  # shellcheck disable=SC2086
  run A "$port_a" $a_pids
  # shellcheck disable=SC2086
  run B "$port_b" $b_pids
done
cat "$work/run.txt"
