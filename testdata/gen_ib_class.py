#!/usr/bin/env python3
"""Captures of /sys/class/infiniband alone (issue 31 §9): the RDMA devices as directories with their ports, no
`device` link, no PCI tree to place them by, as monitoring agents keep them (the shape of leptonai/gpud's
`sys-class-infiniband-h100.0` testdata, re-enacted with our own values: 8 ConnectX-7 NDR rails, MT4129, firmware
28.x, and a BlueField-3 RoCE bond `mlx5_bond_0`, MT41692, firmware 32.x, its GIDs on `bond0`).

Usage: python3 testdata/gen_ib_class.py [NAME...]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gen_hosts as g  # noqa: E402

CX7 = dict(hca_type="MT4129", fw_ver="28.39.1002", board_id="MT_0000000838")
BF3 = dict(hca_type="MT41692", fw_ver="32.38.3056", board_id="MT_0000000884")
NDR_IB = dict(state="4: ACTIVE", phys_state="5: LinkUp", rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand")


def device(t, name, model, port, *, gids, index):
    d = "/sys/class/infiniband/" + name
    t.write(d + "/node_type", "1: CA")
    for attr, value in sorted(model.items()):
        t.write(d + "/" + attr, value)
    guid = "946d:ae03:00cd:e7%02x" % index
    t.write(d + "/node_guid", guid)
    t.write(d + "/sys_image_guid", guid)
    p = d + "/ports/1"
    for attr, value in sorted(port.items()):
        t.write(p + "/" + attr, value)
    t.write(p + "/lid", "0x%x" % (0x11 + index) if port["link_layer"] == "InfiniBand" else "0x0")
    t.write(p + "/sm_lid", "0x1" if port["link_layer"] == "InfiniBand" else "0x0")
    for i, (gid, gtype, ndev) in enumerate(gids):
        t.write(p + "/gids/%d" % i, gid)
        if gtype:
            t.write(p + "/gid_attrs/types/%d" % i, gtype)
        if ndev:
            t.write(p + "/gid_attrs/ndevs/%d" % i, ndev)


def capture(name, *, rails_roce=False, bond=True):
    """8 CX-7 rails (NDR InfiniBand, or 400G RoCE) and, where `bond`, the BlueField-3 bond (200G Ethernet)."""
    t = g.Tree(name)
    for i in range(8):
        if rails_roce:
            ifname = "eth%d" % i
            port = dict(NDR_IB, link_layer="Ethernet")
            gids = g.roce_gids(i, ifname)
        else:
            port = NDR_IB
            gids = [("fe80:0000:0000:0000:946d:ae03:00cd:e7%02x" % i, "IB/RoCE v1", None)]
        device(t, "mlx5_%d" % i, CX7, port, gids=gids, index=i)
    if bond:
        device(t, "mlx5_bond_0", BF3, dict(NDR_IB, rate="200 Gb/sec (2X NDR)", link_layer="Ethernet"),
               gids=g.roce_gids(0x40, "bond0"), index=0x40)
    return t


SCENARIOS = {
    # gpud's shape: InfiniBand rails and the Ethernet bond
    "ib-class-only-bond": lambda n: capture(n),
    # RoCE rails: the bond shares their link layer, not their model
    "ib-class-only-roce-bond": lambda n: capture(n, rails_roce=True),
}


if __name__ == "__main__":
    g.main(sys.argv[1:], SCENARIOS)
