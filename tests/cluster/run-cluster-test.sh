#!/usr/bin/env bash
# A multi-host fp8rt cluster on one machine (issue [6 of 9]; ctest label `cluster`): a scheduler
# and two node daemons, each in its own network namespace with its own address, joined by veth
# pairs on a bridge that lives in a namespace of its own (nothing outside loopback and these
# namespaces is touched). There is no systemd here: the daemons run the commands that the Ansible
# units run (ansible/roles/*/templates/*.service.j2: fp8d --scheduler / fp8d --node with the same
# flags), under `ip netns exec`. On it:
#   1. a 2-node data-parallel job (CPU ranks on both hosts, the rendezvous across the veth
#      network) completes;
#   2. cutting one node's link (`ip link set down`) makes the scheduler mark it LOST within the
#      heartbeat timeout and requeue the job, which resumes from its checkpoint once the link is
#      back and ends with the uninterrupted run's final loss;
#   3. (recovery) a one-node job whose node's link is cut trains again on the other node; the
#      scheduler's timing of it (detection, requeue and placement, process start, checkpoint
#      load, first step) is printed, and from the detection to the first step must take < 15 s;
#   4. draining a node with a job running (what ansible/rolling-upgrade.yml does first), then
#      restarting its daemon as an upgrade would and undraining it: the job checkpoints, waits
#      for capacity (it needs both nodes), resumes and completes.
#   5. (upgrade) the real Ansible playbooks against the three namespaces: site.yml deploys release
#      v1 (a bundle of this build's binaries), a 2-node job starts, rolling-upgrade.yml moves the
#      cluster to v2 (scheduler restart, then drain/restart/undrain of each node); the job
#      completes, both nodes end READY and undrained, `current` is v2 everywhere. ansible-playbook
#      runs inside the scheduler's namespace with every host `ansible_connection=local` and
#      fp8rt_service_manager=command: a script of this test starts the rendered units' ExecStart=
#      in the host's namespace. Skipped (with a line saying so) without ansible-playbook.
# Everything it creates (namespaces, links, processes, files) is removed at the end, also when it
# fails or is interrupted. Needs root and iproute2; exits 77 (skipped) without them.
# Environment: FP8RT_BUILD (the build directory: cli/fp8d, cli/fp8ctl, runtime/fp8train; default
# build), KEEP=1 (keep the temp dir for a post-mortem), PARTS (default "job linkcut recovery drain
# upgrade").
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=$(cd "${FP8RT_BUILD:-build}" 2>/dev/null && pwd) || { echo "cluster: no build dir"; exit 1; }
PARTS=${PARTS:-job linkcut recovery drain upgrade}
FP8D=$BUILD/cli/fp8d FP8CTL=$BUILD/cli/fp8ctl FP8TRAIN=$BUILD/runtime/fp8train
for b in "$FP8D" "$FP8CTL" "$FP8TRAIN"; do
  [ -x "$b" ] || { echo "cluster: $b is missing (build first)"; exit 1; }
done
if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "cluster: needs root and iproute2 (ip netns): skipped"; exit 77
fi

ID=$(( $$ % 250 + 1 ))              # the subnet 10.77.ID.0/24 and the names' suffix
NS=fp8c$ID
HUB=$NS-hub
HOSTS=(sched n1 n2)
declare -A ADDR=([sched]=10.77.$ID.1 [n1]=10.77.$ID.2 [n2]=10.77.$ID.3)
TMP=$(mktemp -d /tmp/fp8rt-cluster.XXXXXX)
PORT=8080
SERVER=http://${ADDR[sched]}:$PORT
HB_TIMEOUT=5
rc=0

log() { echo "cluster: $*"; }
fail() { echo "cluster: FAIL: $*"; rc=1; }
in_ns() { local h=$1; shift; ip netns exec "$NS-$h" "$@"; }

cleanup() {
  trap - EXIT INT TERM
  for h in "${HOSTS[@]}" hub; do
    local pids; pids=$(ip netns pids "$NS-$h" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  done
  sleep 0.2
  for h in "${HOSTS[@]}" hub; do ip netns del "$NS-$h" 2>/dev/null; done
  if [ "${KEEP:-0}" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap 'cleanup; exit $rc' EXIT
trap 'rc=130; exit' INT TERM

# ---- the network: a bridge in the hub namespace, one veth pair per host ----
ip netns add "$HUB" || { echo "cluster: cannot create namespaces"; rc=1; exit; }
ip -n "$HUB" link set lo up
ip -n "$HUB" link add br0 type bridge
ip -n "$HUB" link set br0 up
for h in "${HOSTS[@]}"; do
  ip netns add "$NS-$h"
  ip -n "$NS-$h" link set lo up
  ip -n "$HUB" link add "v-$h" type veth peer name eth0 netns "$NS-$h"
  ip -n "$HUB" link set "v-$h" master br0
  ip -n "$HUB" link set "v-$h" up
  ip -n "$NS-$h" addr add "${ADDR[$h]}/24" dev eth0
  ip -n "$NS-$h" link set eth0 up
done

log "namespaces $NS-{${HOSTS[*]}} on 10.77.$ID.0/24, bridged in $HUB"

# ---- tokens and a corpus ----
ADMIN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
USER_T=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
NODE_T=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
python3 - "$TMP/corpus.txt" <<'PY'
import sys
words = ("the cat sat on a mat and the dog ran to the park where children play with a red ball "
         "every morning before school while birds sing in tall green trees near the river").split()
import random
r = random.Random(7)
open(sys.argv[1], "w").write(" ".join(r.choice(words) for _ in range(60000)))
PY

# ---- deploy: the commands the units run ----
mkdir -p "$TMP/ckpt"
start_scheduler() {
  mkdir -p "$TMP/sched"
  printf 'admin: [{name: ops, sha256: %s}]\nuser: [{name: alice, sha256: %s}]\nnode: [{name: daemons, sha256: %s}]\n' \
    "$(sha "$ADMIN")" "$(sha "$USER_T")" "$(sha "$NODE_T")" > "$TMP/sched/tokens.yaml"
  chmod 600 "$TMP/sched/tokens.yaml"
  in_ns sched setsid "$FP8D" --scheduler --bind "${ADDR[sched]}" --port $PORT \
    --data-dir "$TMP/sched/data" --tokens "$TMP/sched/tokens.yaml" --heartbeat-interval 1 \
    --heartbeat-timeout $HB_TIMEOUT --preemption-grace 30 --rate-limit 1000 --rate-burst 1000 \
    --data-root "$TMP" >> "$TMP/sched.log" 2>&1 &
}
start_node() {  # host
  local h=$1
  mkdir -p "$TMP/$h"
  printf '%s\n' "$NODE_T" > "$TMP/$h/node-token"
  chmod 600 "$TMP/$h/node-token"
  in_ns "$h" setsid "$FP8D" --node --scheduler "$SERVER" --token-file "$TMP/$h/node-token" \
    --data-dir "$TMP/$h/data" --node-id "$h" --address "${ADDR[$h]}" --cpu-slots 1 \
    --fp8train "$FP8TRAIN" --checkpoint-root "$TMP/ckpt" --hang-floor 60 --stop-grace 20 \
    --data-root "$TMP" >> "$TMP/$h.log" 2>&1 &
}
ctl() { FP8CTL_TOKEN=$ADMIN in_ns sched "$FP8CTL" --server "$SERVER" "$@"; }
# Waits (up to $1 s) until the command in the rest of the arguments succeeds.
wait_for() {
  local t=$1; shift
  for _ in $(seq $((t * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
node_state() {  # node -> its state in fp8ctl nodes --json
  ctl nodes --json 2>/dev/null | python3 -c "
import json, sys
print(next((n['state'] for n in json.load(sys.stdin) if n['id'] == '$1'), 'absent'))"
}
node_is() { [ "$(node_state "$1")" = "$2" ]; }
job_field() {  # id field
  ctl status "$1" --json 2>/dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin); v = j
for k in '$2'.split('.'):
    v = v.get(k) if isinstance(v, dict) else None
print('' if v is None else v)"
}
job_is() { [ "$(job_field "$1" state)" = "$2" ]; }
ckpt_at_least() { [ "$(job_field "$1" checkpoint_step)" -ge "$2" ] 2>/dev/null; }
diag() {
  echo "---- scheduler log"; tail -n 20 "$TMP/sched.log"
  for h in n1 n2; do echo "---- $h log"; tail -n 20 "$TMP/$h.log"; done
  for f in "$TMP"/svc/*.log; do [ -f "$f" ] && { echo "---- ${f##*/}"; tail -n 20 "$f"; }; done
  for id in "$@"; do echo "---- job $id events"; ctl events "$id" 2>&1 | tail -n 20; done
}

start_scheduler
wait_for 20 ctl nodes || { fail "the scheduler did not come up"; diag; exit; }
start_node n1; start_node n2
wait_for 30 node_is n1 READY && wait_for 30 node_is n2 READY ||
  { fail "the nodes did not register"; diag; exit; }
log "scheduler at $SERVER; nodes n1 (${ADDR[n1]}) and n2 (${ADDR[n2]}) READY"

spec() {  # steps [nodes, default 2] -> a job spec (one CPU rank a node), checkpoints every 10 steps
  local nodes=${2:-2}
  cat > "$TMP/job-$1-$nodes.yaml" <<EOF
name: dp$nodes
nodes: $nodes
gpus_per_node: 1
max_restarts: 3
config:
  name: dp$nodes
  model: {n_layer: 2, n_embd: 64, n_head: 4, block_size: 64, vocab_size: 256}
  data: {train: $TMP/corpus.txt, format: text}
  train: {batch_size: 4, seq_len: 64, total_steps: $1, lr: 0.003, warmup_steps: 5,
          log_every: 1, checkpoint_every: 10}
  precision: fp8
  parallel: {cpu_backend: gloo, collective_timeout_s: 20}
EOF
  echo "$TMP/job-$1-$nodes.yaml"
}
submit() { FP8CTL_TOKEN=$USER_T in_ns sched "$FP8CTL" --server "$SERVER" submit "$1" --json |
             python3 -c "import json, sys; print(json.load(sys.stdin)['id'])"; }
final_loss() { job_field "$1" progress.loss; }

STEPS=120
if [[ $PARTS == *job* || $PARTS == *linkcut* ]]; then
  log "1. a 2-node data-parallel job"
  A=$(submit "$(spec $STEPS)")
  if wait_for 240 job_is "$A" COMPLETED; then
    nodes=$(ctl status "$A" --json | python3 -c "
import json, sys; print(' '.join(sorted(a['node'] for a in json.load(sys.stdin)['placement'])))")
    [ "$nodes" = "n1 n2" ] || fail "job $A ran on '$nodes', not on n1 and n2"
    log "job $A COMPLETED on $nodes, final loss $(final_loss "$A")"
  else
    fail "job $A did not complete"; diag "$A"
  fi
fi

if [[ $PARTS == *linkcut* ]]; then
  log "2. n2's link cut while the same job runs"
  B=$(submit "$(spec $STEPS)")
  wait_for 180 ckpt_at_least "$B" 20 || { fail "job $B never checkpointed"; diag "$B"; }
  ip -n "$HUB" link set v-n2 down
  t0=$(date +%s)
  if wait_for $((HB_TIMEOUT + 10)) node_is n2 LOST; then
    log "n2 LOST after $(( $(date +%s) - t0 )) s (heartbeat timeout $HB_TIMEOUT s)"
  else
    fail "n2 was not marked LOST within $((HB_TIMEOUT + 10)) s"; diag "$B"
  fi
  requeued() { ctl events "$B" | grep -q "node n2 lost"; }
  wait_for 20 requeued || fail "job $B was not requeued after n2 was lost"
  sleep 3
  ip -n "$HUB" link set v-n2 up
  log "link back after $(( $(date +%s) - t0 )) s"
  if wait_for 300 job_is "$B" COMPLETED; then
    resumed=$(ctl events "$B" | grep -c "resumes from checkpoint\|requeued (restart")
    log "job $B COMPLETED, restarts $(job_field "$B" restarts), final loss $(final_loss "$B")"
    [ "$(job_field "$B" restarts)" -ge 1 ] || fail "job $B shows no restart"
    if [[ $PARTS == *job* ]] && [ "$(final_loss "$B")" != "$(final_loss "$A")" ]; then
      fail "final loss $(final_loss "$B") differs from the uninterrupted run's $(final_loss "$A")"
    fi
  else
    fail "job $B did not complete after the link came back"; diag "$B"
  fi
fi

if [[ $PARTS == *recovery* ]]; then
  log "3. recovery: a one-node job's node cut off, timed until it trains again on the other node"
  R=$(submit "$(spec 400 1)")
  wait_for 180 ckpt_at_least "$R" 10 || { fail "job $R never checkpointed"; diag "$R"; }
  X=$(ctl status "$R" --json | python3 -c "import json, sys; print(json.load(sys.stdin)['placement'][0]['node'])")
  Y=$([ "$X" = n1 ] && echo n2 || echo n1)
  ip -n "$HUB" link set "v-$X" down
  trained() { ctl events "$R" | grep -q "training again at step"; }
  if wait_for $((HB_TIMEOUT + 60)) trained; then
    log "job $R on $X, cut: $(ctl events "$R" | grep "training again at step" | tail -n 1 | sed 's/.*RUNNING  //')"
    ctl status "$R" | grep "last start:" | sed 's/^ */cluster:   /'
    ctl status "$R" --json | python3 -c "
import json, sys
j = json.load(sys.stdin); t = j['timing']; p = t['phases']
node = j['placement'][0]['node']
print('cluster: phases (s): ' + ', '.join(f'{k} {v:.2f}' for k, v in p.items() if v is not None))
ok = node == '$Y' and p['from_detection_s'] is not None and p['from_detection_s'] < 15
if node != '$Y': print('cluster: FAIL: trained again on ' + node + ', not on $Y')
if not ok and node == '$Y': print('cluster: FAIL: %.2f s from the detection to the first step (goal < 15 s)' % p['from_detection_s'])
sys.exit(0 if ok else 1)" || rc=1
  else
    fail "job $R did not train again within $((HB_TIMEOUT + 60)) s of the cut"; diag "$R"
  fi
  ip -n "$HUB" link set "v-$X" up
  wait_for 30 node_is "$X" READY || fail "$X did not come back"
  ctl cancel "$R" >/dev/null || fail "fp8ctl cancel $R failed"
  gone() { [ "$(ctl nodes --json | python3 -c "
import json, sys; print(sum(len(n['jobs']) for n in json.load(sys.stdin)))")" = 0 ]; }
  wait_for 60 gone || fail "the nodes still hold jobs after job $R was cancelled"
fi

if [[ $PARTS == *drain* ]]; then
  log "4. n1 drained with a job running, its daemon restarted, undrained"
  C=$(submit "$(spec 200)")
  wait_for 180 ckpt_at_least "$C" 10 || { fail "job $C never checkpointed"; diag "$C"; }
  ctl drain n1 --reason "rolling upgrade" || fail "fp8ctl drain n1 failed"
  node_is n1 DRAINING || fail "n1 is $(node_state n1), not DRAINING"
  empty() { [ "$(ctl nodes --json | python3 -c "
import json, sys; print(next(len(n['jobs']) for n in json.load(sys.stdin) if n['id'] == 'n1'))")" = 0 ]; }
  wait_for 120 empty || fail "n1 still holds jobs"
  # The upgrade: stop n1's daemon (SIGTERM, as systemd would) and start it again.
  for p in $(ip netns pids "$NS-n1"); do kill -TERM "$p" 2>/dev/null; done
  sleep 2
  start_node n1
  wait_for 30 node_is n1 DRAINING || fail "n1 did not come back drained (it is $(node_state n1))"
  ctl undrain n1 || fail "fp8ctl undrain n1 failed"
  wait_for 10 node_is n1 READY || fail "n1 is not READY after undrain"
  if wait_for 300 job_is "$C" COMPLETED; then
    log "job $C COMPLETED after the drain, restarts $(job_field "$C" restarts)"
    ctl events "$C" | grep -q "drained by ops (rolling upgrade)" || fail "job $C was not moved by the drain"
  else
    fail "job $C did not complete"; diag "$C"
  fi
fi

if [[ $PARTS == *upgrade* ]] && ! command -v ansible-playbook >/dev/null 2>&1; then
  log "5. upgrade: skipped (ansible-playbook is not installed)"
elif [[ $PARTS == *upgrade* ]]; then
  log "5. ansible: site.yml deploys v1, rolling-upgrade.yml moves to v2 with a job running"
  # The daemons above go; from here on the playbooks start every daemon (through svc.sh).
  for h in "${HOSTS[@]}"; do
    for p in $(ip netns pids "$NS-$h"); do kill -TERM "$p" 2>/dev/null; done
  done
  gone() { for h in "${HOSTS[@]}"; do [ -z "$(ip netns pids "$NS-$h")" ] || return 1; done; }
  wait_for 30 gone || fail "the hand-started daemons did not stop"
  # Two bundles (scripts/bundle.sh's layout) that differ in VERSION only.
  for v in v1 v2; do
    mkdir -p "$TMP/bundle-$v/bin" "$TMP/bundle-$v/lib"
    cp "$FP8D" "$FP8CTL" "$FP8TRAIN" "$TMP/bundle-$v/bin/"
    echo "$v" > "$TMP/bundle-$v/VERSION"
  done
  # fp8rt_service_command: ACTION UNIT_NAME UNIT_FILE HOST (ansible/README.md). Runs the unit's
  # ExecStart= (continuation lines joined; our arguments' systemd quoting is the shell's) under
  # `ip netns exec` in the host's namespace; the pid file names the daemon (the unit's MainPID).
  { printf '#!/usr/bin/env bash\nNSP=%s RUN=%s\n' "$NS" "$TMP/svc"; cat <<'SVC'; } > "$TMP/svc.sh"
set -uo pipefail
action=$1 unit=$2 file=$3 host=$4
pidf=$RUN/$host-$unit.pid log=$RUN/$host-$unit.log
mkdir -p "$RUN"
alive() { local st; st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1); [ -n "$st" ] && [ "$st" != Z ]; }
mainpid() { local p; p=$(cat "$pidf" 2>/dev/null) && [ -n "$p" ] && alive "$p" && echo "$p"; }
case $action in
  pid) mainpid || echo 0; exit 0 ;;
  start) mainpid >/dev/null && exit 0 ;;
  restart)
    if p=$(mainpid); then
      kill -TERM "$p"
      for _ in $(seq 900); do alive "$p" || break; sleep 0.1; done
      alive "$p" && { echo "svc: $unit on $host (pid $p) did not stop" >&2; exit 1; }
    fi ;;
  *) echo "svc: unknown action '$action'" >&2; exit 2 ;;
esac
cmdline=$(sed -e ':a' -e '/\\$/{N;s/\\\n//;ba' -e '}' "$file" | sed -n 's/^ExecStart=//p')
workdir=$(sed -n 's/^WorkingDirectory=//p' "$file")
[ -n "$cmdline" ] || { echo "svc: no ExecStart= in $file" >&2; exit 1; }
eval "set -- $cmdline"
eval "cd -- $workdir" || exit 1
rm -f "$pidf"
ip netns exec "$NSP-$host" setsid bash -c 'echo $$ > "$0.new" && mv "$0.new" "$0" && exec "$@"' \
  "$pidf" "$@" >> "$log" 2>&1 < /dev/null &
for _ in $(seq 100); do [ -s "$pidf" ] && break; sleep 0.05; done
p=$(mainpid) || { echo "svc: $unit on $host did not start (see $log)" >&2; tail -n 5 "$log" >&2; exit 1; }
echo "started $unit on $host: pid $p"
SVC
  chmod 755 "$TMP/svc.sh"
  inv=$TMP/inventory.yml
  {
    cat <<EOF
all:
  vars:
    ansible_connection: local
    ansible_become: false
    ansible_python_interpreter: $(command -v python3)
    fp8rt_service_manager: command
    fp8rt_service_command: $TMP/svc.sh
    fp8rt_manage_user: false
    fp8rt_user: root
    fp8rt_group: root
    fp8rt_cli_link: ""
    fp8rt_gpu: false
    fp8rt_node_cpu_slots: 1
    fp8rt_node_checkpoint_root: $TMP/ckpt-ansible
    fp8rt_data_roots: [$TMP]
    fp8rt_node_hang_floor: 60
    fp8rt_node_stop_grace: 20
    fp8rt_scheduler_heartbeat_interval: 1
    fp8rt_scheduler_heartbeat_timeout: $HB_TIMEOUT
    fp8rt_scheduler_preemption_grace: 30
    fp8rt_scheduler_rate_limit: 1000
    fp8rt_scheduler_rate_burst: 1000
    fp8rt_upgrade_poll_interval: 1
    fp8rt_upgrade_drain_timeout: 180
    fp8rt_node_register_timeout: 60
  children:
EOF
    for g in scheduler nodes; do
      echo "    $g:"; echo "      hosts:"
      if [ $g = scheduler ]; then hs=(sched); else hs=(n1 n2); fi
      for h in "${hs[@]}"; do
        mkdir -p "$TMP/$h/units"
        cat <<EOF
        $h:
          ansible_host: ${ADDR[$h]}
          fp8rt_root: $TMP/$h/opt
          fp8rt_config_dir: $TMP/$h/etc
          fp8rt_data_dir: $TMP/$h/var
          fp8rt_unit_dir: $TMP/$h/units
EOF
      done
    done
  } > "$inv"
  printf '{"fp8rt_admin_token": "%s", "fp8rt_node_token": "%s", "fp8rt_user_tokens": [{"name": "alice", "token": "%s"}]}\n' \
    "$ADMIN" "$NODE_T" "$USER_T" > "$TMP/secrets.json"
  chmod 600 "$TMP/secrets.json"
  playbook() {  # log-name bundle-version playbook
    in_ns sched env ANSIBLE_HOME="$TMP/ansible-home" ANSIBLE_LOCAL_TEMP="$TMP/ansible-tmp" \
      ANSIBLE_REMOTE_TEMP="$TMP/ansible-tmp" ANSIBLE_GATHER_SUBSET=min ANSIBLE_NOCOLOR=1 \
      ANSIBLE_RETRY_FILES_ENABLED=0 ANSIBLE_PIPELINING=1 \
      ansible-playbook -i "$inv" -e "@$TMP/secrets.json" -e "fp8rt_bundle_src=$TMP/bundle-$2" \
      "$ROOT/ansible/$3" > "$TMP/ansible-$1.log" 2>&1
    local prc=$?
    sed -n '/^PLAY RECAP/,$p' "$TMP/ansible-$1.log" | grep -v '^$' | sed 's/^/  /'
    [ $prc -eq 0 ] || { tail -n 40 "$TMP/ansible-$1.log"; return 1; }
  }
  svc_exe() { readlink "/proc/$("$TMP/svc.sh" pid "$2" "$TMP/$1/units/$2" "$1")/exe"; }
  released() {  # version: current is it on every host and each daemon runs its fp8d
    for h in "${HOSTS[@]}"; do
      local unit=fp8d-node.service; [ "$h" = sched ] && unit=fp8d-scheduler.service
      [ "$(readlink "$TMP/$h/opt/current")" = "$TMP/$h/opt/releases/$1" ] ||
        { echo "$h: current is $(readlink "$TMP/$h/opt/current")"; return 1; }
      [ "$(svc_exe "$h" $unit)" = "$TMP/$h/opt/releases/$1/bin/fp8d" ] ||
        { echo "$h: $unit runs '$(svc_exe "$h" $unit)'"; return 1; }
    done
  }
  t0=$(date +%s)
  if ! playbook site v1 site.yml; then
    fail "ansible-playbook site.yml failed"
  elif ! why=$(released v1); then
    fail "after site.yml: $why"
  elif ! { wait_for 30 node_is n1 READY && wait_for 30 node_is n2 READY; }; then
    fail "the nodes site.yml started are not READY"; diag
  else
    log "site.yml deployed v1 in $(( $(date +%s) - t0 )) s: scheduler, n1, n2 run releases/v1/bin/fp8d"
    D=$(submit "$(spec 300)")
    wait_for 180 ckpt_at_least "$D" 10 || { fail "job $D never checkpointed"; diag "$D"; }
    log "job $D running (checkpoint at step $(job_field "$D" checkpoint_step)); rolling-upgrade.yml to v2"
    t0=$(date +%s)
    if ! playbook upgrade v2 rolling-upgrade.yml; then
      fail "ansible-playbook rolling-upgrade.yml failed"; diag "$D"
    else
      log "rolling-upgrade.yml done in $(( $(date +%s) - t0 )) s; job $D is $(job_field "$D" state)"
      why=$(released v2) || fail "after rolling-upgrade.yml: $why"
      for h in n1 n2; do
        st=$(ctl nodes --json | python3 -c "
import json, sys; n = next(n for n in json.load(sys.stdin) if n['id'] == '$h'); print(n['state'], n['drained'])")
        [ "$st" = "READY False" ] || fail "$h is '$st' after the upgrade, not READY and undrained"
      done
      if wait_for 300 job_is "$D" COMPLETED; then
        log "job $D COMPLETED after the upgrade, restarts $(job_field "$D" restarts); current -> v2 on sched, n1, n2; n1, n2 READY, undrained"
        ctl events "$D" | grep -q "drained by ansible" || fail "job $D was not moved by the upgrade's drain"
      else
        fail "job $D did not complete after the upgrade"; diag "$D"
      fi
    fi
  fi
fi

[ $rc -eq 0 ] && log "PASS" || diag
exit $rc
