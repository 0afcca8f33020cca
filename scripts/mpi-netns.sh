#!/usr/bin/env bash
# By hand, as root: pipeline parallelism across two network namespaces on this host, joined by
# a veth pair, with Open MPI over TCP only (`--mca btl tcp,self`): two "hosts" that share no
# memory transport. Checks that `petrel logits --mpi` gives the single process's logits bit for
# bit on story-f32 and synth-tiny Q4_0, and that greedy `petrel run --mpi` gives its text.
#
#   sudo scripts/mpi-netns.sh [BUILD_DIR] [SHARED_DIR]
#
# Without sshd, Open MPI's launcher reaches each "host" through a launch agent
# (`--mca plm_rsh_agent`): a small script that runs the daemon (orted) inside that host's
# namespace, in a UTS namespace of its own named after the host, so that the two daemons report
# different node names. mpirun itself runs in the first namespace. Everything it sets up is
# removed on exit.
set -euo pipefail

build=${1:-build}
shared=${2:-../shared}
petrel=$(realpath "$build/tools/petrel")
shared=$(realpath "$shared")
[ "$(id -u)" = 0 ] || { echo "error: run as root (ip netns)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "error: mpirun is not installed" >&2; exit 1; }

tag=pn$$
ns0=${tag}a ns1=${tag}b
subnet=10.199.$((RANDOM % 200 + 20)).0
net=${subnet%.0}
work=$(mktemp -d /tmp/petrel-netns.XXXXXX)

cleanup() {
  ip netns del "$ns0" 2>/dev/null || true
  ip netns del "$ns1" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$ns0"
ip netns add "$ns1"
ip link add "${tag}v0" type veth peer name "${tag}v1"
ip link set "${tag}v0" netns "$ns0"
ip link set "${tag}v1" netns "$ns1"
ip -n "$ns0" addr add "$net.1/24" dev "${tag}v0"
ip -n "$ns1" addr add "$net.2/24" dev "${tag}v1"
for ns in "$ns0" "$ns1"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns0" link set "${tag}v0" up
ip -n "$ns1" link set "${tag}v1" up
ip netns exec "$ns0" bash -c "exec 3<>/dev/tcp/$net.2/9" 2>/dev/null || true  # no ping here; the link is checked by the ranks below
echo "namespaces $ns0 ($net.1) and $ns1 ($net.2), joined by a veth pair"

# The launch agent: called as `agent HOST COMMAND...` (as ssh would be).
cat >"$work/agent" <<EOF
#!/bin/sh
host=\$1
shift
case "\$host" in
  host0) ns=$ns0 ;;
  host1) ns=$ns1 ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$host; \$*"
EOF
chmod +x "$work/agent"
printf 'host0 slots=1\nhost1 slots=1\n' >"$work/hosts"

mpi() {
  ip netns exec "$ns0" mpirun --allow-run-as-root -np 2 --hostfile "$work/hosts" \
    --map-by node --mca plm_rsh_agent "$work/agent" \
    --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" \
    --mca oob_tcp_if_include "$net.0/24" "$@"
}

echo "ranks:"
mpi sh -c 'echo "  rank $OMPI_COMM_WORLD_RANK on $(hostname), addresses $(hostname -I)"'

ids=1,450,1996,1558,263,931,1892,727,471,263,217,826,257,365,354,889
status=0
for model in "$shared/models/story-gguf/story-f32.gguf" \
             "$shared/models/synth-tiny/tiny-v2048-q4_0.gguf"; do
  name=$(basename "$model")
  "$petrel" logits -m "$model" --ids "$ids" -t 1 -o "$work/solo.f32" 2>/dev/null
  mpi "$petrel" logits -m "$model" --ids "$ids" -t 1 -o "$work/mpi.f32" --mpi --mpi-report \
    2>"$work/err" || { cat "$work/err"; exit 1; }
  grep '^mpi-report' "$work/err" | sed 's/^/  /' || true
  if cmp -s "$work/solo.f32" "$work/mpi.f32"; then
    echo "$name: logits of 16 tokens bit-identical ($(stat -c %s "$work/solo.f32") bytes," \
         "sha256 $(sha256sum <"$work/solo.f32" | cut -c1-16))"
  else
    echo "$name: logits DIFFER"; status=1
  fi
  "$petrel" run -m "$model" -p "Once upon a time" -n 32 --temp 0 -t 1 >"$work/solo.txt" \
    2>/dev/null
  mpi "$petrel" run -m "$model" -p "Once upon a time" -n 32 --temp 0 -t 1 --mpi \
    >"$work/mpi.txt" 2>"$work/err" || { cat "$work/err"; exit 1; }
  if cmp -s "$work/solo.txt" "$work/mpi.txt"; then
    echo "$name: greedy text of 32 tokens identical: $(head -c 80 "$work/solo.txt" | tr '\n' ' ')"
  else
    echo "$name: greedy text DIFFERS"; diff "$work/solo.txt" "$work/mpi.txt" || true; status=1
  fi
done
exit $status
