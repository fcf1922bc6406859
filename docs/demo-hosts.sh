#!/usr/bin/env bash
# fencectl on two "hosts" sharing one tree, its journal in etcd, in about
# twenty seconds.
#
#   make demo-hosts                          # builds bin/fencectl{,-etcd}, then runs this
#   FENCECTL=/path/to/fencectl bash docs/demo-hosts.sh   # fencectl-etcd beside it
#
# A throwaway etcd (/usr/bin/etcd, Debian's etcd-server) on free loopback
# ports with a temporary data directory; a tree made with
# `init --journal etcd://…/demo-PID`; then agents in two groups that stand
# for two hosts: each group has its own working directory and environment
# (HOST=a, HOST=b) and reaches the tree only through FENCE_DIR, as hosts
# reach a shared filesystem, and the journal only through etcd. An agent on
# host a, agent-a-k, claims a task with a 2 s lease, notes its token and is
# killed with SIGKILL mid-task: its lease runs out on etcd's clock (no host's
# clock decides), a claim on another agent reaps it and the task is redone;
# agent-a-k's token, when it comes back, is refused with exit 3. The demo
# exits 0 only if every task ended in done/ exactly once, with one
# completion each in the journal; it stops etcd and removes everything.
set -euo pipefail

ETCD=${ETCD:-/usr/bin/etcd}
if [ ! -x "$ETCD" ]; then
	echo "demo-hosts: no etcd at $ETCD: install it (apt-get install etcd-server) or set ETCD=/path/to/etcd" >&2
	exit 1
fi
if [ -z "${FENCECTL:-}" ]; then
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	if [ -x "$here/../bin/fencectl" ]; then
		FENCECTL=$here/../bin/fencectl
	else
		FENCECTL=$(command -v fencectl || true)
	fi
fi
if [ -z "$FENCECTL" ] || [ ! -x "$FENCECTL" ]; then
	echo "demo-hosts: no fencectl binary: run \`make demo-hosts\` (or set FENCECTL=/path/to/fencectl)" >&2
	exit 1
fi
FENCECTL=$(cd "$(dirname "$FENCECTL")" && pwd)/$(basename "$FENCECTL")
if [ ! -x "$(dirname "$FENCECTL")/fencectl-etcd" ] && ! command -v fencectl-etcd >/dev/null; then
	echo "demo-hosts: no fencectl-etcd beside $FENCECTL nor on PATH: run \`make build\`" >&2
	exit 1
fi

# Only what this script says counts: no settings inherited from the caller.
unset FENCE_AGENT FENCE_TOKEN FENCE_TTL FENCE_TIMEOUT FENCE_JOURNAL FENCE_DIR
work=$(mktemp -d "${TMPDIR:-/tmp}/fencectl-demo-hosts.XXXXXX")
tree=$work/tree
pids=()
etcd_pid=
# On exit, also after Ctrl-C: stop the agents still running (each with its
# current fencectl or sleep), stop etcd, remove its data and the tree.
cleanup() {
	for p in ${pids[@]+"${pids[@]}"}; do
		kill -STOP "$p" 2>/dev/null || continue
		pkill -KILL -P "$p" 2>/dev/null || true
		kill -KILL "$p" 2>/dev/null || true
	done
	if [ -n "$etcd_pid" ]; then
		kill -TERM "$etcd_pid" 2>/dev/null || true
	fi
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TASKS=16
start=$SECONDS

say() { printf '\n== %s\n' "$*"; }
fail() {
	echo "demo-hosts: FAILED: $*" >&2
	[ -s "$work/etcd.log" ] && tail -n 5 "$work/etcd.log" >&2
	exit 1
}
# run shows a fencectl command, then runs it.
run() {
	printf '$ fencectl %s\n' "$*"
	"$FENCECTL" "$@"
}
pad() { printf '%-10s' "$1"; }

# port_free PORT: nothing listens on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
	local p
	for _ in $(seq 50); do
		p=$((20000 + RANDOM % 40000))
		port_free "$p" && { echo "$p"; return 0; }
	done
	return 1
}

say "a throwaway etcd ($("$ETCD" --version | head -n 1)) on loopback"
for attempt in 1 2 3; do
	cport=$(free_port) && pport=$(free_port) || fail "no free port"
	[ "$cport" != "$pport" ] || continue
	# Fast ticks, so that etcd's minimum lease is 1 s rather than 2 s; the
	# 2 s leases below are the same either way.
	"$ETCD" --name demo --data-dir "$work/etcd" \
		--listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
		--listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
		--initial-cluster "demo=http://127.0.0.1:$pport" --initial-cluster-state new \
		--heartbeat-interval 10 --election-timeout 100 \
		--logger zap --log-outputs "$work/etcd.log" --log-level error &
	etcd_pid=$!
	for _ in $(seq 200); do
		kill -0 "$etcd_pid" 2>/dev/null || break
		port_free "$cport" || break
		sleep 0.05
	done
	if kill -0 "$etcd_pid" 2>/dev/null && ! port_free "$cport"; then
		break
	fi
	wait "$etcd_pid" 2>/dev/null || true # lost a port race: try others
	etcd_pid=
	rm -rf "$work/etcd"
done
[ -n "$etcd_pid" ] || fail "etcd did not start"
echo "etcd pid $etcd_pid serving 127.0.0.1:$cport, data in $work/etcd"

journal=etcd://127.0.0.1:$cport/demo-$$
say "a tree whose journal is in etcd (the tree's files stand on the filesystem the hosts share)"
mkdir -p "$work/host-a" "$work/host-b"
FENCE_DIR=$tree run init --journal "$journal" --ttl 2s --max-attempts 3
echo "\$ cat $tree/.fence/journal.json"
cat "$tree/.fence/journal.json"
for i in $(seq -w 1 "$TASKS"); do
	echo "job $i" | FENCE_DIR=$tree "$FENCECTL" add --id "t$i" - >/dev/null
done
echo "added t01 … t$TASKS; every later command finds etcd from .fence/journal.json, with no flag"

# on HOST CMD…: run CMD as a process of host HOST: its own working
# directory and environment, the tree by FENCE_DIR, nothing else shared.
on() {
	local host=$1
	shift
	(cd "$work/host-$host" && HOST=$host FENCE_DIR=$tree "$@")
}

# agent NAME: the loop every well-behaved agent runs, on host $HOST.
agent() {
	local name=$1 vars rc half job errf=$work/$1.err
	while :; do
		rc=0
		vars=$("$FENCECTL" claim --agent "$name" --ttl 2s --wait 4s --format env 2>"$errf") || rc=$?
		if [ "$rc" -eq 4 ]; then
			echo "$(pad "$name") nothing left to claim; stops"
			return 0
		fi
		[ -s "$errf" ] && sed "s/^/$(pad "$name") /" "$errf"
		[ "$rc" -eq 0 ] || return "$rc"
		eval "$vars"
		job=$(cat "$FENCE_TASK_FILE")
		half=$(printf '0.%02d' $((10 + RANDOM % 16)))
		sleep "$half"
		rc=0
		"$FENCECTL" heartbeat "$FENCE_TASK" --token "$FENCE_TOKEN" --agent "$name" --ttl 2s >/dev/null 2>"$errf" || rc=$?
		if [ "$rc" -eq 3 ]; then
			echo "$(pad "$name") lost the lease on $FENCE_TASK; drops it"
			continue
		fi
		[ "$rc" -eq 0 ] || { cat "$errf" >&2; return "$rc"; }
		sleep "$half"
		rc=0
		"$FENCECTL" complete "$FENCE_TASK" --token "$FENCE_TOKEN" --agent "$name" >/dev/null 2>"$errf" || rc=$?
		if [ "$rc" -eq 3 ]; then
			echo "$(pad "$name") lost the lease on $FENCE_TASK; its work is thrown away"
			continue
		fi
		[ "$rc" -eq 0 ] || { cat "$errf" >&2; return "$rc"; }
		echo "$(pad "$name") $FENCE_TASK done on host $HOST ($job, token $FENCE_TOKEN)"
	done
}

# agent_k: claims one task, notes what it holds, and "works" until killed.
agent_k() {
	local vars
	vars=$("$FENCECTL" claim --agent agent-a-k --ttl 2s --format env)
	eval "$vars"
	printf '%s %s\n' "$FENCE_TASK" "$FENCE_TOKEN" >"$work/agent-k.note.tmp"
	mv "$work/agent-k.note.tmp" "$work/agent-k.note"
	exec sleep 600
}

say "host a: agent-a-k claims a task with a 2 s lease, writes its token down and starts working"
on a agent_k &
kpid=$!
pids+=("$kpid")
for _ in $(seq 200); do
	[ -s "$work/agent-k.note" ] && break
	kill -0 "$kpid" 2>/dev/null || break
	sleep 0.05
done
[ -s "$work/agent-k.note" ] || fail "agent-a-k did not claim a task"
read -r ktask ktoken <"$work/agent-k.note"
echo "agent-a-k holds $ktask with token $ktoken"

say "hosts a and b: two agents each (claim --ttl 2s --wait 4s, work 0.2–0.5 s, heartbeat, complete --token)"
for host in a b; do
	for n in 1 2; do
		on "$host" agent "agent-$host-$n" &
		pids+=("$!")
	done
done

sleep 0.5
say "agent-a-k is killed (SIGKILL) while holding $ktask: nobody is told; etcd ends its lease in 2 s"
pkill -KILL -P "$kpid" 2>/dev/null || true
# Its shell may have gone already with its child (the agent): not an error.
kill -KILL "$kpid" 2>/dev/null || true
wait "$kpid" 2>/dev/null || true
pids=("${pids[@]:1}")
rc=0
for p in "${pids[@]}"; do
	wait "$p" || rc=$?
done
[ "$rc" -eq 0 ] || fail "an agent stopped with exit $rc"
pids=()

say "agent-a-k comes back from its note ($ktask, token $ktoken) and tries to finish"
for json in "" --json; do
	rc=0
	on a "$FENCECTL" complete "$ktask" --token "$ktoken" --agent agent-a-k $json 2>&1 || rc=$?
	echo "exit $rc"
	[ "$rc" -eq 3 ] || fail "the stale token was not refused with exit 3 (got $rc)"
done
echo "refused twice, nothing changed: etcd expired agent-a-k's lease and the task was claimed again"

say "the end: fencectl status (from host b)"
on b "$FENCECTL" status

say "check: every task is in done/ exactly once, with exactly one completion in the journal"
want=$(for i in $(seq -w 1 "$TASKS"); do echo "t$i"; done)
got=$(ls "$tree/done")
[ "$got" = "$want" ] || fail "done/ holds: $(echo $got)"
for d in available claimed failed inbox; do
	[ -z "$(ls -A "$tree/$d")" ] || fail "$d/ is not empty: $(ls -A "$tree/$d")"
done
completions=$(on a "$FENCECTL" log --json | grep '"type":"complete"' | grep -o '"task":"[^"]*"' | sort)
[ "$(echo "$completions" | wc -l)" -eq "$TASKS" ] || fail "expected $TASKS completions in the log, got: $completions"
[ -z "$(echo "$completions" | uniq -d)" ] || fail "a task was completed twice: $(echo "$completions" | uniq -d)"
echo "ok: done/ holds t01 … t$TASKS; available/ claimed/ failed/ are empty; $TASKS completions, none twice"
on b "$FENCECTL" replay --check

say "the life of $ktask: claimed by agent-a-k, reaped when etcd ended its lease, claimed again (after the tree's retry backoff), completed"
on b "$FENCECTL" log --task "$ktask"
types=$(on b "$FENCECTL" log --task "$ktask" --json | grep -o '"type":"[a-z]*"' | cut -d'"' -f4 | tr '\n' ' ')
# A reaped attempt waits out the tree's retry backoff (1 s by default) in
# waiting/ ("due" ends it) unless a claim came after it was over anyway.
case "$types" in
"add claim reap claim complete " | "add claim reap due claim complete ") ;;
*) fail "unexpected history of $ktask: $types" ;;
esac
holders=$(on b "$FENCECTL" log --task "$ktask" --json | grep '"type":"claim"' | grep -o '"agent":"[^"]*"' | cut -d'"' -f4 | tr '\n' ' ')
case "$holders" in
agent-a-k\ agent-[ab]-[12]\ ) echo "claimed by: $holders" ;;
*) fail "unexpected claimers of $ktask: $holders" ;;
esac

say "demo passed in $((SECONDS - start)) s; etcd stopped and everything removed at exit"
