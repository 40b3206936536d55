#!/bin/sh
# roce-drop.sh on|off: starts or stops dropping the RoCE v2 traffic (UDP 4791) that reaches this guest's eth0, as
# a switch port with a bad ACL or VLAN would, while TCP (pair's handshake) still passes. The senders hear nothing
# back and exhaust their retries, as on a real fabric. (Dropping on egress instead is no fabric fault: a packet
# refused by its own qdisc comes back to rxe as a send error, and rxe 6.1 kept retrying it until the kernel
# reported a soft lockup of the vCPU and the run hung to its watchdog.) iproute2's tc by path: busybox's shell
# prefers its own applet, which lacks clsact.
case $1 in
on)
    /usr/sbin/tc qdisc add dev eth0 clsact &&
        /usr/sbin/tc filter add dev eth0 ingress protocol ip u32 match ip protocol 17 0xff match ip dport 4791 0xffff action drop
    ;;
off) /usr/sbin/tc qdisc del dev eth0 clsact ;;
*)
    echo "usage: roce-drop.sh on|off" >&2
    exit 2
    ;;
esac
