#!/bin/busybox sh
# /init of the rxe test VMs (tests/vm/rxe-vm.sh builds the initramfs): loads the RDMA modules, brings up rxe0 on
# eth0, then runs the scenario of its role and writes every report under /out, which goes back to the host as a
# tar on /dev/vda.
#   VM a: the node under test: runs fabric-preflight healthy, records a snapshot, then applies faults live.
#   VM b: its peer: serves ibv_rc_pingpong so real RDMA traffic crosses the link, runs fabric-preflight once.
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

finish() {
    say "DONE"
    touch /out/DONE
    tar -cf /dev/vda -C /out .
    sync
    poweroff -f
}

if [ "$ROLE" = b ]; then
    timeout 120 ibv_rc_pingpong -d rxe0 -g "$GIDX" -s 4096 -n 200 >/out/pingpong.txt 2>&1
    echo $? >/out/pingpong.exit
    run peer-generic
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
