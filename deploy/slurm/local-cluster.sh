#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying and testing agentx's sharded runs.
#
#   deploy/slurm/local-cluster.sh up       install slurm-wlm + munge (apt) if missing, write the
#                                          config, start munged, slurmctld and slurmd, wait for the
#                                          node to be idle
#   deploy/slurm/local-cluster.sh status   daemons, sinfo and squeue; exit 0 only when the node is usable
#   deploy/slurm/local-cluster.sh down     stop the daemons this script started and remove its state
#
# Runs as root (it installs packages and starts daemons as root) on Debian/Ubuntu. It needs no
# systemd: the daemons are started directly and tracked by pid files, so it works in a container.
# `up` and `down` are idempotent. Not for production: SlurmUser is root, there is no accounting
# and no cgroup confinement.
#
# Environment:
#   SLURM_LOCAL_DIR      state, spool, logs and pid files (default /tmp/agentx-slurm)
#   SLURM_LOCAL_TIMEOUT  seconds `up` waits for the node to become idle (default 60)
#   SLURM_LOCAL_CPUS     CPUs the node advertises (default: nproc, at least 2)
#   SLURM_LOCAL_CTLD_PORT / SLURM_LOCAL_SLURMD_PORT   ports (default 6817 / 6818)
#
# The config is written to /etc/slurm/slurm.conf (where srun, sbatch and sinfo look for it) and
# marked as this script's; `down` removes it only if it still carries that mark, and `up` refuses
# to overwrite a slurm.conf that is not its own.
set -euo pipefail

DIR=${SLURM_LOCAL_DIR:-/tmp/agentx-slurm}
TIMEOUT=${SLURM_LOCAL_TIMEOUT:-60}
CTLD_PORT=${SLURM_LOCAL_CTLD_PORT:-6817}
SLURMD_PORT=${SLURM_LOCAL_SLURMD_PORT:-6818}
CONF=/etc/slurm/slurm.conf
MARK="# Written by agentx deploy/slurm/local-cluster.sh; removed by its 'down'."
NODE=$(hostname -s)
OWNED=.agentx-local-cluster # marks the state directory as this script's

log() { printf 'local-cluster: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

need_root() {
    [ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and starts slurmctld/slurmd/munged)"
}

# ---------------------------------------------------------------------------------------------
# packages

install_packages() {
    local missing=()
    command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
    command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
    command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
    command -v munged >/dev/null 2>&1 || missing+=(munge)
    if [ ${#missing[@]} -eq 0 ]; then
        return
    fi
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get to install them"
    # slurm-wlm is Debian's metapackage for the three Slurm parts; munge comes with it, named
    # here too so that a partial install is completed.
    log "installing slurm-wlm munge (apt-get)"
    # Keep the packages' maintainer scripts from starting services (no init system here, and the
    # daemons are started below with this cluster's config). Docker images usually have this file.
    local policy_added=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        policy_added=1
    fi
    local rc=0
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -y -qq
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold
        install --no-install-recommends slurm-wlm munge)
    if ! "${apt[@]}" >"$DIR/apt.log" 2>&1; then
        log "apt-get install failed; running apt-get update and retrying"
        DEBIAN_FRONTEND=noninteractive apt-get -qq update >>"$DIR/apt.log" 2>&1 || true
        "${apt[@]}" >>"$DIR/apt.log" 2>&1 || rc=$?
    fi
    [ "$policy_added" -eq 1 ] && rm -f /usr/sbin/policy-rc.d
    if [ "$rc" -ne 0 ]; then
        tail -n 30 "$DIR/apt.log" >&2
        die "apt-get install slurm-wlm munge failed (log: $DIR/apt.log)"
    fi
}

# ---------------------------------------------------------------------------------------------
# munge

munge_works() {
    command -v munge >/dev/null 2>&1 && munge -n 2>/dev/null | unmunge >/dev/null 2>&1
}

start_munge() {
    local key=/etc/munge/munge.key
    mkdir -p /etc/munge
    if [ ! -s "$key" ]; then
        log "creating munge key $key"
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile="$key" --force >/dev/null
        else
            dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
        fi
    fi
    local user=root
    id munge >/dev/null 2>&1 && user=munge
    chown "$user:$user" /etc/munge "$key"
    chmod 0700 /etc/munge
    chmod 0400 "$key"
    if munge_works; then
        if [ -f "$DIR/run/munged.started" ] && pid_alive "$(cat "$DIR/run/munged.started")"; then
            log "munged already running (pid $(cat "$(cat "$DIR/run/munged.started")"))"
        else
            log "munged already running (not started here, will not be stopped by 'down')"
        fi
        return
    fi
    # munged checks that these directories are owned by its user and not writable by others.
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown "$user:$user" /run/munge /var/lib/munge /var/log/munge
    chmod 0755 /run/munge
    chmod 0700 /var/lib/munge /var/log/munge
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
    local pidfile=/run/munge/munged.pid
    if [ "$user" = root ]; then
        munged --force --pid-file="$pidfile" || die "munged failed to start (see /var/log/munge/munged.log)"
    else
        runuser -u munge -- munged --pid-file="$pidfile" ||
            die "munged failed to start (see /var/log/munge/munged.log)"
    fi
    echo "$pidfile" >"$DIR/run/munged.started"
    for _ in $(seq 50); do
        munge_works && return
        sleep 0.1
    done
    tail -n 20 /var/log/munge/munged.log >&2 2>/dev/null || true
    die "munged started but 'munge -n | unmunge' fails"
}

# ---------------------------------------------------------------------------------------------
# slurm config

node_memory_mb() {
    # What slurmd itself will register; /proc/meminfo when slurmd -C is unavailable.
    local mem
    mem=$({ slurmd -C 2>/dev/null || true; } | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n1)
    if [ -z "$mem" ]; then
        mem=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
    fi
    # Leave a little slack so that a slightly different reading never drains the node.
    echo $((mem > 1024 ? mem - 256 : mem))
}

node_cpus() {
    local n=${SLURM_LOCAL_CPUS:-$(nproc)}
    # The sharded job needs two tasks; slurmd accepts the advertised count (config_overrides).
    [ -n "${SLURM_LOCAL_CPUS:-}" ] || [ "$n" -ge 2 ] || n=2
    echo "$n"
}

node_addr() {
    # The node's name must resolve for slurmctld to reach slurmd; fall back to loopback.
    local addr
    addr=$({ getent ahostsv4 "$NODE" 2>/dev/null || true; } | awk 'NR == 1 { print $1 }')
    echo "${addr:-127.0.0.1}"
}

write_config() {
    local cpus mem addr
    cpus=$(node_cpus)
    mem=$(node_memory_mb)
    addr=$(node_addr)
    mkdir -p "$DIR/state" "$DIR/spool/slurmd" "$DIR/log" "$DIR/run"
    : >"$DIR/plugstack.conf"
    cat >"$DIR/slurm.conf.new" <<EOF
$MARK
# A one-node cluster for local testing: no accounting, no cgroups, daemons run as root.
ClusterName=agentx-local
SlurmctldHost=$NODE($addr)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$DIR/plugstack.conf
# No cgroups in a container: track processes through /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Take the node back after a restart, whatever its last state; trust the configured size.
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=300
InactiveLimit=0
KillWait=10
MinJobAge=300
NodeName=$NODE NodeAddr=$addr CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    mkdir -p /etc/slurm
    if [ -e "$CONF" ] && cmp -s "$DIR/slurm.conf.new" "$CONF"; then
        rm -f "$DIR/slurm.conf.new"
        return 1 # unchanged
    fi
    mv "$DIR/slurm.conf.new" "$CONF"
    chmod 0644 "$CONF"
    return 0
}

# ---------------------------------------------------------------------------------------------
# daemons

pid_alive() { # pidfile: its process exists, is not a zombie and runs a daemon of this script
    local pid state comm
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    case "$pid" in '' | *[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/stat" ] || return 1
    # Field 3 of /proc/PID/stat, after the parenthesised command name.
    state=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ] || return 1
    # A recycled pid belongs to something else.
    comm=$(cat "/proc/$pid/comm" 2>/dev/null)
    case "$comm" in munged | slurmctld | slurmd) return 0 ;; *) return 1 ;; esac
}

stop_pidfile() { # name pidfile
    local name=$1 pidfile=$2 pid
    pid_alive "$pidfile" || {
        rm -f "$pidfile"
        return 0
    }
    pid=$(cat "$pidfile")
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
        pid_alive "$pidfile" || break
        sleep 0.1
    done
    if pid_alive "$pidfile"; then
        log "$name did not exit after SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$pidfile"
}

die_with_logs() {
    log "ERROR: $*"
    log_tails
    log "ERROR: $* ('$0 down' stops what was started)"
    exit 1
}

log_tails() {
    local f
    for f in "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" /var/log/munge/munged.log; do
        [ -f "$f" ] || continue
        printf '\n----- last 25 lines of %s -----\n' "$f" >&2
        tail -n 25 "$f" >&2
    done
}

start_daemon() { # name pidfile cmd...
    local name=$1 pidfile=$2
    shift 2
    if pid_alive "$pidfile"; then
        log "$name already running (pid $(cat "$pidfile"))"
        return
    fi
    rm -f "$pidfile"
    log "starting $name"
    # Both daemons fork into the background themselves and write their pid files.
    if ! "$@" >>"$DIR/log/$name.stderr" 2>&1; then
        die_with_logs "$name failed to start (stderr: $DIR/log/$name.stderr)"
    fi
    for _ in $(seq 100); do
        pid_alive "$pidfile" && return
        sleep 0.1
    done
    die_with_logs "$name did not stay up (no live pid in $pidfile)"
}

node_state() {
    { sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null || true; } | head -n1
}

wait_idle() {
    local deadline=$((SECONDS + TIMEOUT)) state=""
    while [ "$SECONDS" -lt "$deadline" ]; do
        state=$(node_state)
        case "$state" in
        idle | mixed | allocated | completing)
            log "node $NODE is $state ($((SECONDS - START))s)"
            return 0
            ;;
        down* | drain*)
            # A node left down by an earlier run of the cluster: take it back.
            scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
            ;;
        esac
        sleep 0.5
    done
    log "node $NODE did not become idle within ${TIMEOUT}s (state: ${state:-unknown})"
    sinfo -N -l >&2 2>/dev/null || true
    scontrol show node "$NODE" >&2 2>/dev/null || true
    die_with_logs "node $NODE did not become idle within ${TIMEOUT}s (state: ${state:-unknown})"
}

# ---------------------------------------------------------------------------------------------
# commands

cmd_up() {
    need_root
    START=$SECONDS
    if [ -e "$CONF" ] && ! grep -qxF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script; move it away to use the local cluster"
    fi
    # The state directory is this script's alone: `down` deletes it.
    if [ -d "$DIR" ] && [ ! -f "$DIR/$OWNED" ] && [ -n "$(ls -A "$DIR")" ]; then
        die "SLURM_LOCAL_DIR=$DIR exists, is not empty and was not created by this script"
    fi
    mkdir -p "$DIR/run" "$DIR/log"
    touch "$DIR/$OWNED"
    install_packages
    start_munge
    local changed=0
    write_config && changed=1
    if [ "$changed" -eq 1 ]; then
        # A running daemon would keep the old config: restart it.
        if pid_alive "$DIR/run/slurmd.pid" || pid_alive "$DIR/run/slurmctld.pid"; then
            log "config changed; restarting the Slurm daemons"
        fi
        stop_pidfile slurmd "$DIR/run/slurmd.pid"
        stop_pidfile slurmctld "$DIR/run/slurmctld.pid"
    fi
    if ! pid_alive "$DIR/run/slurmctld.pid"; then
        # A slurmd that outlived its controller re-registers at once when restarted with it.
        stop_pidfile slurmd "$DIR/run/slurmd.pid"
    fi
    start_daemon slurmctld "$DIR/run/slurmctld.pid" slurmctld -f "$CONF"
    start_daemon slurmd "$DIR/run/slurmd.pid" slurmd -f "$CONF" -N "$NODE"
    wait_idle
    log "up: partition debug, node $NODE; config $CONF, logs in $DIR/log"
}

cmd_down() {
    need_root
    if pid_alive "$DIR/run/slurmctld.pid"; then
        # Cancel what is still queued or running so that no job step outlives the cluster.
        local jobs
        jobs=$(squeue -h -o '%i' 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            log "cancelling jobs: $(echo "$jobs" | tr '\n' ' ')"
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            local _
            for _ in $(seq 30); do
                [ -z "$(squeue -h -o '%i' 2>/dev/null || true)" ] && break
                sleep 0.5
            done
        fi
    fi
    stop_pidfile slurmd "$DIR/run/slurmd.pid"
    stop_pidfile slurmctld "$DIR/run/slurmctld.pid"
    if [ -f "$DIR/run/munged.started" ]; then
        stop_pidfile munged "$(cat "$DIR/run/munged.started")"
    fi
    if [ -f "$CONF" ] && grep -qxF "$MARK" "$CONF"; then
        rm -f "$CONF"
    fi
    # Only remove a directory that `up` made (a typo in SLURM_LOCAL_DIR must not rm -rf it).
    if [ -f "$DIR/$OWNED" ]; then
        rm -rf "$DIR"
    elif [ -d "$DIR" ]; then
        log "not removing $DIR: it has no $OWNED, so this script did not create it"
    fi
    log "down"
}

cmd_status() {
    local ok=0 name pidfile
    for name in slurmctld slurmd; do
        pidfile=$DIR/run/$name.pid
        if pid_alive "$pidfile"; then
            echo "$name: running (pid $(cat "$pidfile"))"
        else
            echo "$name: not running"
            ok=1
        fi
    done
    if munge_works; then echo "munge: working"; else
        echo "munge: not working"
        ok=1
    fi
    if [ "$ok" -eq 0 ]; then
        sinfo -N -l || ok=1
        squeue || true
        case "$(node_state)" in
        idle | mixed | allocated | completing) ;;
        *) ok=1 ;;
        esac
    fi
    return "$ok"
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*)
    echo "usage: $0 up|down|status   (state in \$SLURM_LOCAL_DIR, default /tmp/agentx-slurm)" >&2
    exit 2
    ;;
esac
