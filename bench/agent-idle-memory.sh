#!/usr/bin/env bash
# Idle memory of `podvisor agent` joined to a `podvisor server` on this
# machine (issue 31): VmRSS and Pss (with their anonymous and file parts)
# from /proc/PID/smaps_rollup after IDLE seconds, for each BIN directory
# given, alternating A B A B … ROUNDS times. Needs root (the server binds
# ports, the agent's cgroups); process runtime by default, no pods. With
# -R containerd the agent runs its containerd, whose memory (the child
# process with --config, and its Pss) gets columns too. The agent runs its
# cluster DNS on a free port; the service proxy is off (its rules would
# meet the e2e tests' in this network namespace): kube-proxy's code is
# still linked and initialised, it only does not sync.
#
#   bench/agent-idle-memory.sh [-r ROUNDS] [-i IDLE] [-R RUNTIME] BIN_DIR...
set -euo pipefail
rounds=2 idle=60 runtime=process
while getopts r:i:R: o; do case $o in r) rounds=$OPTARG ;; i) idle=$OPTARG ;; R) runtime=$OPTARG ;; *) exit 2 ;; esac; done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-r ROUNDS] [-i IDLE] [-R process|containerd] BIN_DIR..." >&2; exit 2; }

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
kib() { awk -v k="$1:" '$1==k {print $2}' "$2"; }
mib() { awk -v v="$1" 'BEGIN {printf "%.1f", v/1024}'; }
# child_containerd PID: the child of PID whose command line has --config
# (its containerd, whichever binary runs it).
child_containerd() {
	for s in /proc/[0-9]*/stat; do
		c=${s%/stat}
		[ "$(awk '{print $4}' "$s" 2>/dev/null)" = "$1" ] || continue
		tr '\0' ' ' <"$c/cmdline" 2>/dev/null | grep -q -- '--config' && { echo "${c#/proc/}"; return; }
	done
}

work=$(mktemp -d /tmp/agent-idle-memory.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

echo "machine: $(nproc) cores, $(uname -r); $(date -u +%FT%TZ); load: $(cut -d' ' -f1-3 /proc/loadavg); runtime: $runtime"
printf '| binary dir | run | agent process | VmRSS MiB | RssAnon | RssFile | Pss MiB | Pss_Anon | Pss_File | containerd process | its VmRSS MiB | its Pss MiB | load (1 min) |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'
for ((r = 1; r <= rounds; r++)); do
	for bin in "$@"; do
		d="$work/$r-$(basename "$bin")"
		mkdir -p "$d" && touch "$d/server.out" "$d/agent.out"
		api=$(freeport)
		"$bin/podvisor" server --data-dir "$d/server" --api-port "$api" --bind-address 127.0.0.1 \
			--advertise-address 127.0.0.1 --etcd-client-port "$(freeport)" --etcd-peer-port "$(freeport)" \
			>"$d/server.out" 2>&1 &
		spid=$!
		pids+=("$spid")
		for _ in $(seq 120); do grep -q "is ready" "$d/server.out" && break; sleep 1; done
		read -r -a join < <("$bin/podvisor" token create --data-dir "$d/server" --print-join-command)
		"$bin/podvisor" "${join[@]:1}" --node-name "idle-$r" --data-dir "$d/agent" --runtime "$runtime" \
			--agent-port "$(freeport)" --cluster-dns-port "$(freeport)" --disable-service-proxy \
			>"$d/agent.out" 2>&1 &
		apid=$!
		pids+=("$apid")
		for _ in $(seq 120); do grep -q "is ready" "$d/agent.out" && break; sleep 1; done
		grep -q "is ready" "$d/agent.out" || { cat "$d/agent.out" >&2; exit 1; }
		sleep "$idle"
		s="/proc/$apid/smaps_rollup"
		cpid=$(child_containerd "$apid")
		cname=- crss=- cpss=-
		if [ -n "$cpid" ]; then
			cname=$(basename "$(readlink /proc/$cpid/exe)")
			crss=$(mib "$(kib Rss /proc/$cpid/smaps_rollup)") cpss=$(mib "$(kib Pss /proc/$cpid/smaps_rollup)")
		fi
		printf '| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$bin" "$r" "$(basename "$(readlink /proc/$apid/exe)")" \
			"$(mib "$(kib Rss "$s")")" "$(mib "$(awk '/^RssAnon/ {print $2}' /proc/$apid/status)")" \
			"$(mib "$(awk '/^RssFile/ {print $2}' /proc/$apid/status)")" \
			"$(mib "$(kib Pss "$s")")" "$(mib "$(kib Pss_Anon "$s")")" "$(mib "$(kib Pss_File "$s")")" \
			"$cname" "$crss" "$cpss" "$(cut -d' ' -f1 /proc/loadavg)"
		kill "$apid"; wait "$apid" 2>/dev/null || true
		kill "$spid"; wait "$spid" 2>/dev/null || true
		pids=()
		"$bin/podvisor" reset --data-dir "$d/agent" >/dev/null 2>&1 || true
	done
done
