#!/bin/sh
# pair-group.sh NODES REPORT TEST BASE TOKEN: the measure COMMAND of `isolate` in the rxe VMs
# (`isolate … -- pair-group.sh {nodes} {report} {test} BASE TOKEN`): `pair --ring` over one group's nodes, each
# node's end started by its tests/vm/pair-serve.sh (this node's directly, the others' over `nc NODE 7000`, as
# `srun` starts a step's tasks), each node's report beside REPORT, then `pair --summarize` over them into REPORT:
# exit 0 only when every link of the ring passed. The ring's port is BASE + 16 * round + index (TEST is rNtM), so
# no ring meets an earlier one's listener.
set -u
nodes=$1 report=$2 test=$3 base=$4 token=$5
t=${test#r}
port=$((base + ${t%t*} * 16 + ${t#*t}))
rank=0
for node in $(echo "$nodes" | tr , ' '); do
    request="pair $nodes $rank $port $token-$test"
    if [ "$node" = "$(hostname)" ]; then
        echo "$request" | /opt/isolate/pair-serve.sh >"$report.$node.json" &
    else
        echo "$request" | nc "$node" 7000 >"$report.$node.json" &
    fi
    rank=$((rank + 1))
done
wait
exec fabric-preflight pair --summarize "$report".*.json --color never --output "json=$report"
