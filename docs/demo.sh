#!/usr/bin/env bash
# The main job of fencectl on a throwaway tree, in about ten seconds.
#
#   make demo                                # builds bin/fencectl, then runs this
#   FENCECTL=/path/to/fencectl bash docs/demo.sh
#
# 20 tasks, 4 agents. Each agent is a small bash loop: claim (exit 4: no more
# work, stop), work, heartbeat, work, complete --token. A fifth agent, agent-k,
# claims a task, notes its token, and is killed with SIGKILL in the middle of
# its work. Its 3 s lease runs out, the next claim reaps it, another agent
# redoes the task; when agent-k comes back with its old token it is refused
# with exit 3 and nothing changes. The demo exits 0 only if every task ended
# in done/ exactly once, with one completion each in the journal.
set -euo pipefail

if [ -z "${FENCECTL:-}" ]; then
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	if [ -x "$here/../bin/fencectl" ]; then
		FENCECTL=$here/../bin/fencectl
	else
		FENCECTL=$(command -v fencectl || true)
	fi
fi
if [ -z "$FENCECTL" ] || [ ! -x "$FENCECTL" ]; then
	echo "demo: no fencectl binary: run \`make demo\` (or set FENCECTL=/path/to/fencectl)" >&2
	exit 1
fi

# Only what this script says counts: no settings inherited from the caller.
unset FENCE_AGENT FENCE_TOKEN FENCE_TTL FENCE_TIMEOUT
work=$(mktemp -d "${TMPDIR:-/tmp}/fencectl-demo.XXXXXX")
export FENCE_DIR=$work/tree
pids=()
# On exit, also after Ctrl-C: stop the agents still running (each with its
# current fencectl or sleep), then remove the tree.
cleanup() {
	for p in ${pids[@]+"${pids[@]}"}; do
		kill -STOP "$p" 2>/dev/null || continue
		pkill -KILL -P "$p" 2>/dev/null || true
		kill -KILL "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TASKS=20
AGENTS=4
start=$SECONDS

say() { printf '\n== %s\n' "$*"; }
fail() {
	echo "demo: FAILED: $*" >&2
	exit 1
}
# run shows a fencectl command, then runs it.
run() {
	printf '$ fencectl %s\n' "$*"
	"$FENCECTL" "$@"
}
# pad NAME prints NAME padded to the width of the agent column.
pad() { printf '%-8s' "$1"; }

# agent NAME: the loop every well-behaved agent runs.
agent() {
	local name=$1 vars rc half job errf=$work/$1.err
	while :; do
		rc=0
		vars=$("$FENCECTL" claim --agent "$name" --ttl 3s --wait 5s --format env 2>"$errf") || rc=$?
		if [ "$rc" -eq 4 ]; then
			echo "$(pad "$name") nothing left to claim; stops"
			return 0
		fi
		# Notices (an expired lease this claim reaped first) and errors.
		[ -s "$errf" ] && sed "s/^/$(pad "$name") /" "$errf"
		[ "$rc" -eq 0 ] || return "$rc"
		eval "$vars" # FENCE_TASK, FENCE_TOKEN, FENCE_TASK_FILE, FENCE_DEADLINE
		job=$(cat "$FENCE_TASK_FILE")

		half=$(printf '0.%02d' $((10 + RANDOM % 16))) # two halves: 0.2–0.5 s of work
		sleep "$half"
		rc=0
		"$FENCECTL" heartbeat "$FENCE_TASK" --token "$FENCE_TOKEN" --agent "$name" --ttl 3s >/dev/null 2>"$errf" || rc=$?
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
		echo "$(pad "$name") $FENCE_TASK done ($job, token $FENCE_TOKEN)"
	done
}

# agent_k: claims one task, writes down what it holds (the note an agent
# keeps to resume after a restart), heartbeats once and then "works" until
# it is killed.
agent_k() {
	local vars
	vars=$("$FENCECTL" claim --agent agent-k --ttl 3s --format env)
	eval "$vars"
	printf '%s %s\n' "$FENCE_TASK" "$FENCE_TOKEN" >"$work/agent-k.note.tmp"
	mv "$work/agent-k.note.tmp" "$work/agent-k.note"
	"$FENCECTL" heartbeat "$FENCE_TASK" --token "$FENCE_TOKEN" --agent agent-k --ttl 3s >/dev/null
	exec sleep 600
}

say "a throwaway task tree with $TASKS tasks (FENCE_DIR=$FENCE_DIR)"
run init --ttl 3s --max-attempts 3
for i in $(seq -w 1 "$TASKS"); do
	echo "job $i" | "$FENCECTL" add --id "t$i" - >/dev/null
done
echo "added t01 … t$TASKS (\`fencectl add --id tNN -\`, content \"job NN\")"

say "agent-k claims a task, writes its token down and starts working"
agent_k &
kpid=$!
pids+=("$kpid")
for _ in $(seq 100); do
	[ -s "$work/agent-k.note" ] && break
	sleep 0.05
done
[ -s "$work/agent-k.note" ] || fail "agent-k did not claim a task"
read -r ktask ktoken <"$work/agent-k.note"
echo "agent-k  holds $ktask with token $ktoken"

say "$AGENTS agents start: claim --wait 5s --ttl 3s, work 0.2–0.5 s, heartbeat, complete --token"
for n in $(seq "$AGENTS"); do
	agent "agent-$n" &
	pids+=("$!")
done

sleep 0.5
say "agent-k is killed (SIGKILL) while holding $ktask: its lease runs out in 3 s, nobody is told"
kill -9 "$kpid"
wait "$kpid" 2>/dev/null || true
pids=("${pids[@]:1}")
echo "agent-k  killed; its claim on $ktask stays in claimed/ until the lease expires and a claim reaps it"

rc=0
for p in "${pids[@]}"; do
	wait "$p" || rc=$?
done
[ "$rc" -eq 0 ] || fail "an agent stopped with exit $rc"
pids=()

say "agent-k comes back from its note ($ktask, token $ktoken) and tries to finish"
for json in "" --json; do
	rc=0
	run complete "$ktask" --token "$ktoken" --agent agent-k $json 2>&1 || rc=$?
	echo "exit $rc"
	[ "$rc" -eq 3 ] || fail "the stale token was not refused with exit 3 (got $rc)"
done
echo "refused twice, nothing changed: only the current token authorises, and agent-k's was reaped"

say "the end: fencectl status"
run status

say "check: every task is in done/ exactly once, with exactly one completion in the journal"
want=$(for i in $(seq -w 1 "$TASKS"); do echo "t$i"; done)
got=$(ls "$FENCE_DIR/done")
[ "$got" = "$want" ] || fail "done/ holds: $(echo $got)"
for d in available claimed failed inbox; do
	[ -z "$(ls -A "$FENCE_DIR/$d")" ] || fail "$d/ is not empty: $(ls -A "$FENCE_DIR/$d")"
done
completions=$("$FENCECTL" log --json | grep '"type":"complete"' | grep -o '"task":"[^"]*"' | sort)
[ "$(echo "$completions" | wc -l)" -eq "$TASKS" ] || fail "expected $TASKS completions in the log, got: $completions"
[ -z "$(echo "$completions" | uniq -d)" ] || fail "a task was completed twice: $(echo "$completions" | uniq -d)"
echo "ok: done/ holds t01 … t$TASKS; available/ claimed/ failed/ are empty; $TASKS completions, none twice"
run replay --check

say "the life of $ktask: claimed by agent-k, reaped when its lease expired, backed off (due), claimed again, completed"
run log --task "$ktask"
types=$("$FENCECTL" log --task "$ktask" --json | grep -o '"type":"[a-z]*"' | cut -d'"' -f4 | tr '\n' ' ')
[ "$types" = "add claim reap due claim complete " ] || fail "unexpected history of $ktask: $types"

say "demo passed in $((SECONDS - start)) s"
