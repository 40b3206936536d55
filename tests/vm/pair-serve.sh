#!/bin/sh
# pair-serve.sh: a node's side of `isolate`'s measure in the rxe VMs, as slurmd is srun's. busybox
# `nc -ll -p 7000 -e` runs it per connection, stdin and stdout the socket (tests/vm/pair-group.sh runs it
# directly for its own node). One request line:
#   hello                      answers ok (the server is up)
#   pair NODES RANK PORT TOKEN this node's end of `pair --ring --peers NODES --rank RANK`; answers its JSON report,
#                              nothing where it wrote none
#   fault on|off               tests/vm/roce-drop.sh on|off here; answers ok or failed
#   done                       the isolate phase is over (tests/vm/guest.sh waits for /tmp/isolate-done)
# Anything else is refused on stderr and answered with nothing. The table of each run goes to stderr (the log).
read -r what nodes rank port token
word() { case $1 in '' | *[!A-Za-z0-9.,-]*) return 1 ;; esac; }
num() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }
case $what in
hello) echo ok ;;
pair)
    if ! word "$nodes" || ! num "$rank" || ! num "$port" || ! word "$token"; then
        echo "pair-serve: refused request: pair $nodes $rank $port $token" >&2
        exit 2
    fi
    json=/tmp/serve-$port-$rank.json
    # --ack-timeout 17: as guest.sh's pair_run, a loaded host's TCG guests pause longer than 67 ms a try.
    fabric-preflight pair --color never --ack-timeout 17 --ring --peers "$nodes" --rank "$rank" --port "$port" --token "$token" \
        --timeout 60 --message-size 64 --messages 64 --phase-time 2 --pings 200 --output "json=$json" >&2
    echo "pair-serve: $(hostname) rank $rank of $nodes on port $port: exit $?" >&2
    cat "$json" 2>/dev/null
    ;;
fault)
    if [ "$nodes" = on ] || [ "$nodes" = off ]; then
        /opt/isolate/roce-drop.sh "$nodes" && echo ok || echo failed
    else
        echo "pair-serve: refused request: fault $nodes" >&2
    fi
    ;;
done)
    touch /tmp/isolate-done
    echo ok
    ;;
*) echo "pair-serve: refused request: $what" >&2 ;;
esac
