#!/bin/busybox sh
# /init of the rxe test VMs (tests/vm/rxe-vm.sh builds the initramfs): loads the RDMA modules, brings up rxe0 on
# eth0, then runs the scenario of its role and writes every report under /out, which goes back to the host as a
# tar on /dev/vda.
#   All three (vm-a, vm-b, vm-c) first run `pair --ring` together: healthy by hand, healthy from Slurm's
#   variables, then with vm-c dropping the RoCE traffic that reaches it. Then vm-a runs `isolate` over the
#   three with `pair` as its measure, healthy and with vm-c dropping RoCE again; vm-b and vm-c serve its rings.
#   VM a: the node under test: runs fabric-preflight healthy, records a snapshot, then applies faults live.
#   VM b: its peer: serves ibv_rc_pingpong so real RDMA traffic crosses the link, runs fabric-preflight once,
#   then `pair --memory gpu` with VM c through the CUDA stand-in.
#   VM c: the third ring node; after the rings it listens for VM b's GPU-memory pairs.
/bin/busybox --install -s /bin
export PATH=/usr/bin:/usr/sbin:/bin COLUMNS=160
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=1777 tmpfs /tmp
arg() { for w in $(cat /proc/cmdline); do case $w in "$1"=*) echo "${w#*=}" ;; esac; done; }
up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "### $* [uptime $(up)s]"; }
ROLE=$(arg vmrole) MYIP=$(arg vmip) PEER=$(arg vmpeer)
hostname "vm-$ROLE"
KVER=$(uname -r)
while read -r m; do insmod "/lib/modules/$KVER/$m" 2>/dev/null; done </etc/modules.load
ip link set lo up
ip link set eth0 mtu 9000 up
ip addr add "$MYIP/24" dev eth0
rdma link add rxe0 type rxe netdev eth0 || say "rdma link add FAILED"
P=/sys/class/infiniband/rxe0/ports/1
i=0
while ! grep -q '^0000:0000:0000:0000:0000:ffff:' $P/gids/* 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
GIDX=
for g in $P/gids/*; do case $(cat "$g") in 0000:0000:0000:0000:0000:ffff:*) GIDX=${g##*/} && break ;; esac; done
say "rxe0 $(cat $P/state) gid index $GIDX ($MYIP), kernel $KVER"

# run NAME ARGS...: one fabric-preflight run, JSON into /out/NAME.json, its exit status into /out/NAME.exit, and
# the table on the console (the human view of the same run).
run() {
    name=$1
    shift
    say "BEGIN $name: fabric-preflight run $*"
    fabric-preflight run --color never --output "json=/tmp/$name.json" "$@"
    echo $? >"/out/$name.exit"
    cp "/tmp/$name.json" "/out/$name.json" 2>/dev/null
    say "END $name exit $(cat "/out/$name.exit")"
}

# pair_run NAME ARGS...: one `fabric-preflight pair`, JSON into /out/NAME.json, exit status into /out/NAME.exit,
# the table into /out/NAME.txt and on the console. Small transfers: TCG moves a soft-RoCE byte slowly, and the
# numbers are not judged against rxe's rate anyway.
# --ack-timeout 17 (537 ms a try, 3.8 s in all), not the default 67 ms a try: three TCG guests on a loaded host
# can leave a peer unscheduled for more than the default's half second, and a healthy ring then failed with
# "retry counter exceeded" (a stressed CI run, isolate-healthy). The faults below still fail, seconds later.
pair_run() {
    name=$1
    shift
    say "BEGIN $name: fabric-preflight pair $*"
    fabric-preflight pair --color never --ack-timeout 17 --message-size 64 --messages "${MESSAGES:-64}" --phase-time "${PHASE_TIME:-2}" --pings 200 \
        --output "json=/tmp/$name.json" "$@" >"/out/$name.txt" 2>&1
    echo $? >"/out/$name.exit"
    cat "/out/$name.txt"
    cp "/tmp/$name.json" "/out/$name.json" 2>/dev/null
    say "END $name exit $(cat "/out/$name.exit")"
}

# tcp_sockets PORT STATE: how many sockets on local PORT are in STATE (0A listening, 01 established).
tcp_sockets() {
    port=$(printf '%04X' "$1")
    awk -v p=":$port" -v st="$2" 'substr($2, length($2) - 4) == p && $4 == st' /proc/net/tcp | wc -l
}

finish() {
    say "DONE"
    touch /out/DONE
    tar -cf /dev/vda -C /out .
    sync
    poweroff -f
}

# The ring vm-a -> vm-b -> vm-c -> vm-a: each node listens for its predecessor and connects to its successor,
# retrying until that one listens, so the three need not start together. A port per ring keeps a late node from
# meeting an earlier ring's listener.
RANK=$(case $ROLE in a) echo 0 ;; b) echo 1 ;; c) echo 2 ;; esac)
pair_run ring-hand --ring --peers vm-a,vm-b,vm-c --rank "$RANK" --port 18600 --token vm-ring-token --timeout 120
# The same ring as `srun --ntasks-per-node=1` starts it: rank, nodes and token (job.step) from Slurm's variables.
# Slurm's host lists range over numbers only, so the node list names the numbered aliases vm1..vm3 (/etc/hosts).
(
    export SLURM_PROCID=$RANK SLURM_NTASKS=3 SLURM_JOB_NODELIST='vm[1-3]' SLURM_JOB_ID=4242 SLURM_STEP_ID=0
    pair_run ring-slurm --ring --port 18601 --timeout 120
)
# A fabric fault on one node: RoCE v2 toward vm-c is dropped where it enters vm-c (tests/vm/roce-drop.sh). vm-c's
# two links must fail and vm-a <-> vm-b must still pass.
[ "$ROLE" = c ] && { /opt/isolate/roce-drop.sh on || say "RoCE drop FAILED"; }
pair_run ring-fault --ring --peers vm-a,vm-b,vm-c --rank "$RANK" --port 18602 --token vm-ring-fault --timeout 120
[ "$ROLE" = c ] && /opt/isolate/roce-drop.sh off

# isolate_run NAME BASE: `fabric-preflight isolate` over the three VMs, `pair` as its measure
# (tests/vm/pair-group.sh, rings from port BASE on): the report into /out/NAME.json, its exit status into
# /out/NAME.exit, the table into /out/NAME.txt, each group's reports and output into /out/NAME-work.
isolate_run() {
    name=$1
    say "BEGIN $name: fabric-preflight isolate, pair as the measure"
    fabric-preflight isolate --nodes vm-a,vm-b,vm-c --test-timeout 120 --work-dir "/tmp/$name" \
        --output "json=/tmp/$name.json" -- /opt/isolate/pair-group.sh '{nodes}' '{report}' '{test}' "$2" vm-isolate \
        >"/out/$name.txt" 2>&1
    echo $? >"/out/$name.exit"
    cat "/out/$name.txt"
    cp "/tmp/$name.json" "/out/$name.json" 2>/dev/null
    cp -r "/tmp/$name" "/out/$name-work"
    say "END $name exit $(cat "/out/$name.exit")"
}
# ask NODE REQUEST: one request to NODE's tests/vm/pair-serve.sh; prints its answer.
ask() { echo "$2" | nc "$1" 7000; }

# Fault isolation: vm-a runs `isolate` over the three, healthy, then with vm-c dropping the RoCE that reaches it;
# each group's ring is started on its nodes through tests/vm/pair-serve.sh behind busybox nc, which vm-b and vm-c
# serve until vm-a says it is done.
if [ "$ROLE" = a ]; then
    for node in vm-b vm-c; do
        i=0
        until [ "$(ask $node hello)" = ok ] || [ $i -ge 300 ]; do sleep 0.2; i=$((i + 1)); done
    done
    isolate_run isolate-healthy 19000
    [ "$(ask vm-c 'fault on')" = ok ] || say "vm-c: RoCE drop FAILED"
    isolate_run isolate-fault 19400
    [ "$(ask vm-c 'fault off')" = ok ] || say "vm-c: RoCE drop not removed"
    ask vm-b done >/dev/null
    ask vm-c done >/dev/null
else
    nc -ll -p 7000 -e /opt/isolate/pair-serve.sh 2>>/out/isolate-serve.log &
    serve=$!
    i=0
    while [ ! -f /tmp/isolate-done ] && [ $i -lt 1500 ]; do sleep 0.2; i=$((i + 1)); done
    kill $serve
    say "isolate phase over (served $(grep -c '^pair-serve: .* exit' /out/isolate-serve.log) ring ends)"
fi

# gpu_legs connect|listen: `pair --memory gpu` between vm-b (connects) and vm-c (listens) through the CUDA
# stand-in, once with its DMA-BUF export refused (as the proprietary driver refuses it: ibv_reg_mr on the
# "device pointer", the peermem path) and once with CUDA_STANDIN_DMABUF=udmabuf (a real dma-buf from
# /dev/udmabuf where the kernel has it, offered to ibv_reg_dmabuf_mr).
gpu_legs() {
    port=18700
    for mode in peermem udmabuf; do
        if [ "$1" = listen ]; then side="--listen $port"; else side="--connect vm-c:$port"; fi
        (
            export LD_LIBRARY_PATH=/opt/cuda-standin
            [ $mode = udmabuf ] && export CUDA_STANDIN_DMABUF=udmabuf
            pair_run "gpu-$mode" --memory gpu --token vm-gpu-token --timeout 120 $side
        )
        port=$((port + 1))
    done
}
if [ "$ROLE" = c ]; then
    # What the udmabuf leg can find: the device node or not.
    ls -l /dev/udmabuf >/out/udmabuf.dev 2>&1
    gpu_legs listen
    finish
fi

if [ "$ROLE" = b ]; then
    timeout 120 ibv_rc_pingpong -d rxe0 -g "$GIDX" -s 4096 -n 200 >/out/pingpong.txt 2>&1
    echo $? >/out/pingpong.exit
    # `pair` with VM a over rxe0, host memory; then nothing may still listen on its port.
    pair_run pair-listen --token vm-pair-token --listen 18515 --timeout 150
    tcp_sockets 18515 0A >/out/pair-listen.listening-after
    # The peer dies mid-transfer: this listener is killed once VM a is connected and moving data.
    fabric-preflight pair --color never --ack-timeout 17 --token vm-pair-token --listen 18516 --timeout 150 --message-size 64 \
        >/out/pair-killed.txt 2>&1 &
    pid=$!
    i=0
    while [ "$(tcp_sockets 18516 01)" = 0 ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i + 1)); done
    sleep 3
    kill -9 $pid
    say "pair listener on 18516 killed (connected after $i polls)"
    run peer-generic
    # vm-c waits for this (its listener retries until the deadline) while VM a goes through its faults.
    gpu_legs connect
    finish
fi

# VM a. Real RDMA traffic to the peer first (retried until its server listens), so the counters have moved.
n=0
until ibv_rc_pingpong -d rxe0 -g "$GIDX" -s 4096 -n 200 "$PEER" >/out/pingpong.txt 2>&1; do
    n=$((n + 1))
    [ $n -ge 60 ] && break
    sleep 1
done
echo $n >/out/pingpong.retries
# The node pair between the two VMs (VM b listens); the connector retries until b's listener is up.
pair_run pair-connect --token vm-pair-token --connect "$PEER:18515" --timeout 150
# Long phases, so VM b's listener dies while data moves.
MESSAGES=1000000 PHASE_TIME=100
pair_run pair-peer-killed --token vm-pair-token --connect "$PEER:18516" --timeout 120
MESSAGES=64 PHASE_TIME=2
run generic
run roce-400g --profile roce-400g
say "BEGIN snapshot"
fabric-preflight snapshot /out/snapshot >/out/snapshot.txt 2>&1
say "END snapshot exit $?"

# Live faults, each judged by tests/rxe_vm.rs.
ip link set eth0 mtu 1500
sleep 1
run fault-mtu-1500 --only rdma.link,rdma.roce,rdma.loopback
ip link set eth0 mtu 9000

# An unprivileged workload with a 64 KiB memlock limit: the stack refuses a 1 MiB registration.
ulimit -l 64
su -s /bin/sh nobody -c "fabric-preflight run --color never --only rdma.memlock,rdma.loopback --output json=/tmp/fault-memlock.json; echo \$? >/tmp/fault-memlock.exit"
cp /tmp/fault-memlock.json /tmp/fault-memlock.exit /out/
ulimit -l 8192

ip link set eth0 down
sleep 1
run fault-netdev-down --only rdma.devices,rdma.link,rdma.roce,rdma.loopback
ip link set eth0 up
i=0
while [ "$(cat $P/state)" != "4: ACTIVE" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done

# until_moving: waits (at most 10 s) until rxe0 has sent 500 packets more than when called, i.e. until the
# loopback started in the background is moving data; the faults below land mid-transfer, not at start-up.
until_moving() {
    base=$(cat $P/hw_counters/sent_pkts)
    i=0
    while [ $(($(cat $P/hw_counters/sent_pkts) - base)) -lt 500 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
}

# The netdev taken down while rdma.loopback moves data: the queue pairs lose their path mid-transfer.
say "BEGIN fault-netdev-down-during-run"
fabric-preflight run --color never --only rdma.loopback --output json=/tmp/fault-netdev-down-during-run.json &
pid=$!
until_moving
ip link set eth0 down
wait $pid
echo $? >/out/fault-netdev-down-during-run.exit
cp /tmp/fault-netdev-down-during-run.json /out/ 2>/dev/null
ip link set eth0 up
i=0
while [ "$(cat $P/state)" != "4: ACTIVE" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
say "END fault-netdev-down-during-run exit $(cat /out/fault-netdev-down-during-run.exit)"

# The rxe link deleted while rdma.loopback moves data. The uptimes say whether the kernel made `rdma link delete`
# wait for the open verbs context.
say "BEGIN fault-link-deleted"
fabric-preflight run --color never --only rdma.loopback --output json=/tmp/fault-link-deleted.json &
pid=$!
until_moving
echo "delete-start $(up)" >/out/fault-link-deleted.times
rdma link delete rxe0
echo $? >/out/fault-link-deleted.delete-exit
echo "delete-end $(up)" >>/out/fault-link-deleted.times
wait $pid
echo $? >/out/fault-link-deleted.exit
echo "run-end $(up)" >>/out/fault-link-deleted.times
cp /tmp/fault-link-deleted.json /out/ 2>/dev/null
say "END fault-link-deleted exit $(cat /out/fault-link-deleted.exit), rdma link delete exit $(cat /out/fault-link-deleted.delete-exit); $(tr '\n' ' ' </out/fault-link-deleted.times)"
run after-link-deleted --only rdma.devices,rdma.loopback
finish
