#!/usr/bin/env bash
# The e2e node's supervisor (harness/node.rs starts it under its process guard): sets up the
# node's network, starts containerd, imports the images, starts kubelet, kube-proxy and
# kube-scheduler, and, when it is told to stop (SIGTERM: the test binary has exited) or one of
# them dies, tears everything down in an order that leaves nothing behind: processes, mounts,
# network namespaces, the bridge and its route, nftables tables, cgroups and kernel settings.
#
# Environment (all required): NODE_DIR (this node's scratch directory, nothing else writes there),
# BIN (the node's binaries), BRIDGE, NODE_IP, POD_PREFIX (the pod CIDR's prefix length),
# SERVICE_CIDR, CGROUP_ROOT, NODE_NAME, SCHEDULER_PORT, IMAGES (OCI archives to import,
# space-separated). The configuration files are NODE_DIR's, written by node.rs.
set -uo pipefail

say() { echo "node: $*"; }
sock="$NODE_DIR/containerd/containerd.sock"
declare -A pids=()
components=(kube-scheduler kube-proxy kubelet containerd)
# The kernel settings kubelet changes at start (vm.overcommit_memory, kernel.panic,
# kernel.panic_on_oops and the root keyring quotas, when they differ from what it wants): put
# back as they were when the node stops.
tunables=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
hierarchies() {
  # The cgroup v1 hierarchies (kubelet and runc use every one of them); not the v2 "unified".
  awk '$3 == "cgroup" { print $2 }' /proc/self/mounts
}

ctr_() { "$BIN/ctr" --address "$sock" --namespace k8s.io "$@"; }

teardown() {
  trap '' TERM INT HUP
  say "tearing down"
  # 1. Nothing restarts what is stopped next.
  for name in kube-scheduler kube-proxy kubelet; do
    [[ -n "${pids[$name]:-}" ]] && kill "${pids[$name]}" 2>/dev/null
  done
  for name in kube-scheduler kube-proxy kubelet; do
    [[ -n "${pids[$name]:-}" ]] && wait "${pids[$name]}" 2>/dev/null
  done
  # 2. Every process of every pod: they are all in kubelet's cgroups under CGROUP_ROOT.
  local procs attempt
  for attempt in $(seq 50); do
    procs="$(find "/sys/fs/cgroup/pids/$CGROUP_ROOT" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)"
    [[ -z "$procs" ]] && break
    # shellcheck disable=SC2086 # one pid a word
    kill -9 $procs 2>/dev/null
    sleep 0.1
  done
  # 3. containerd forgets them, so that each shim exits and removes its socket.
  if [[ -n "${pids[containerd]:-}" ]] && kill -0 "${pids[containerd]}" 2>/dev/null; then
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete --force "$id" >/dev/null 2>&1; done
    for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$id" >/dev/null 2>&1; done
    kill "${pids[containerd]}" 2>/dev/null
    wait "${pids[containerd]}" 2>/dev/null
  fi
  # Shims left behind (containerd could not reach them): each names this node's socket.
  local proc
  for proc in /proc/[0-9]*; do
    if { tr '\0' ' ' <"$proc/cmdline"; } 2>/dev/null | grep -qF -- "-address $sock "; then
      kill -9 "${proc#/proc/}" 2>/dev/null
    fi
  done
  # 4. Mounts under the node's directory (pods' volumes, containers' root filesystems, network
  # namespaces, kubelet's own bind mount), deepest first.
  awk -v d="$NODE_DIR/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r mountpoint; do umount -l "$mountpoint" 2>/dev/null; done
  # 5. Network: kube-proxy's and portmap's tables, the bridge (its route and addresses go with it;
  # the pods' veths went with their namespaces).
  local family table
  for family in ip ip6; do
    for table in kube-proxy cni_hostport; do
      nft list table "$family" "$table" >/dev/null 2>&1 && nft delete table "$family" "$table"
    done
  done
  ip link del "$BRIDGE" 2>/dev/null
  # kubelet links each container's log into /var/log/containers, a fixed path.
  local link
  for link in /var/log/containers/*; do
    [[ -L "$link" && "$(readlink "$link")" == "$NODE_DIR/"* ]] && rm -f "$link"
  done
  [[ -e "$NODE_DIR/created-var-log-containers" ]] && rmdir /var/log/containers 2>/dev/null
  # 6. cgroups, deepest first.
  local hierarchy
  for hierarchy in $(hierarchies); do
    [[ -d "$hierarchy/$CGROUP_ROOT" ]] && find "$hierarchy/$CGROUP_ROOT" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  # 7. Kernel settings.
  local name value
  while read -r name value; do
    [[ "$(cat "/proc/sys/$name")" == "$value" ]] || echo "$value" >"/proc/sys/$name"
  done <"$NODE_DIR/tunables"
  say "torn down"
}

fail() {
  echo "node: $*" >&2
  teardown
  exit 1
}

# Refuse to start over what another node (or an earlier run that was not torn down) left.
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  echo "node: the bridge $BRIDGE exists: a node of an earlier run was not torn down (ip link del $BRIDGE)" >&2
  exit 1
fi
for family in ip ip6; do
  if nft list table "$family" kube-proxy >/dev/null 2>&1; then
    echo "node: nftables table $family kube-proxy exists: another kube-proxy runs on this machine" >&2
    exit 1
  fi
done
for address in "$NODE_IP" "${SERVICE_CIDR%/*}"; do
  # Anything but the default route: the pod or service range is a real network here.
  overlap="$(ip -4 route show match "$address" | grep -v '^default')"
  if [[ -n "$overlap" ]]; then
    echo "node: $address is already routed on this machine ($overlap); the e2e node would take it over" >&2
    exit 1
  fi
done

for name in "${tunables[@]}"; do echo "$name $(cat "/proc/sys/$name")"; done >"$NODE_DIR/tunables"
[[ -e /var/log/containers ]] || touch "$NODE_DIR/created-var-log-containers"
trap 'teardown; exit 0' TERM INT HUP

# The pods' bridge carries the node's address, which is the pods' gateway, the node's InternalIP
# and where the API server is advertised to pods. Host-local traffic to ClusterIPs goes out on it
# too (kube-proxy's rules in the output hook rewrite it to a pod there), from the node's address,
# so a connection to an unused ClusterIP never takes the default route off the machine.
# net.ipv4.ip_forward stays as it is (0 here): nothing the pods send is forwarded anywhere.
ip link add "$BRIDGE" type bridge || fail "cannot create the bridge $BRIDGE"
ip addr add "$NODE_IP/$POD_PREFIX" dev "$BRIDGE" || fail "cannot address $BRIDGE"
ip link set "$BRIDGE" up || fail "cannot bring $BRIDGE up"
ip route add "$SERVICE_CIDR" dev "$BRIDGE" src "$NODE_IP" || fail "cannot route $SERVICE_CIDR to $BRIDGE"

# kubelet's --cgroup-root must exist; a cpuset cgroup takes no task until it has CPUs and memory
# nodes, which a new one inherits only by copying them.
for hierarchy in $(hierarchies); do
  mkdir -p "$hierarchy/$CGROUP_ROOT" || fail "cannot create the cgroup $hierarchy/$CGROUP_ROOT"
done
if [[ -d /sys/fs/cgroup/cpuset/$CGROUP_ROOT ]]; then
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$CGROUP_ROOT/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$CGROUP_ROOT/cpuset.mems"
fi
touch "$NODE_DIR/network-ready"

start() { # name command...
  local name="$1"
  shift
  "$@" >"$NODE_DIR/$name.log" 2>&1 &
  pids[$name]=$!
  say "$name started (pid ${pids[$name]})"
}

# containerd finds its shim (containerd-shim-runc-v2) on PATH.
PATH="$BIN:$PATH" start containerd "$BIN/containerd" --config "$NODE_DIR/containerd.toml"
for _ in $(seq 300); do
  [[ -S "$sock" ]] && ctr_ version >/dev/null 2>&1 && break
  kill -0 "${pids[containerd]}" 2>/dev/null || fail "containerd exited: $(tail -20 "$NODE_DIR/containerd.log")"
  sleep 0.1
done
ctr_ version >/dev/null 2>&1 || fail "containerd did not answer in 30 s"
for image in $IMAGES; do
  ctr_ images import --platform linux/amd64 "$image" >>"$NODE_DIR/images.log" 2>&1 ||
    fail "ctr images import $image failed: $(tail -5 "$NODE_DIR/images.log")"
done
touch "$NODE_DIR/images-imported"

start kubelet "$BIN/kubelet" --config "$NODE_DIR/kubelet.yaml" --kubeconfig "$NODE_DIR/kubelet.kubeconfig" \
  --root-dir "$NODE_DIR/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 2
start kube-proxy "$BIN/kube-proxy" --config "$NODE_DIR/kube-proxy.yaml" --v 2
start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$NODE_DIR/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig "$NODE_DIR/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig "$NODE_DIR/kube-scheduler.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --v 2

# Until told to stop, or one of them exits (the guard then sees this script exit).
wait -n "${pids[@]}"
for name in "${components[@]}"; do
  if ! kill -0 "${pids[$name]}" 2>/dev/null; then
    echo "node: $name exited; the end of its log:" >&2
    tail -30 "$NODE_DIR/$name.log" >&2
  fi
done
teardown
exit 1
