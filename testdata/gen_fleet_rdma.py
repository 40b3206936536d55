#!/usr/bin/env python3
"""Recorded trees for the RDMA classes of issue 19 (branch fleet-rdma): node shapes of real fleets, re-enacted
from public captures with their formats and values (sources in README.md, section "fleet-rdma"). Nothing here
is copied from those captures: the trees are written by the helpers of gen_hosts.py.

Usage: python3 testdata/gen_fleet_rdma.py            (rewrites every scenario of this file)
       python3 testdata/gen_fleet_rdma.py NAME...    (only those)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gen_hosts  # noqa: E402
from gen_hosts import (  # noqa: E402
    CPULIST, ENDPOINT, GEN5_X16, HW_ZERO, PMA_ZERO, ROOT_PORT, ACS_REDIRECT, Dev, Tree, hgx, place, rel_link,
    roce_gids, write_cpuinfo, write_modules,
)

NO_PMA = "N/A (no PMA)"
EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
DOWN_DISABLED = {"state": "1: DOWN", "phys_state": "3: Disabled", "rate": "10 Gb/sec (4X SDR)"}
ACTIVE = {"state": "4: ACTIVE", "phys_state": "5: LinkUp"}


class Uverbs:
    """Hands out uverbs numbers in the order devices are written."""

    def __init__(self, first=0):
        self.next = first

    def take(self):
        n = self.next
        self.next += 1
        return n


def netdev(t, parent_dir, ifname, mtu, *, address, speed=None, operstate="up"):
    """A netdev under `parent_dir` (a PCI function, or /sys/devices/virtual for a bond) and its class link."""
    n = parent_dir + "/net/" + ifname
    t.write(n + "/operstate", operstate)
    t.write(n + "/mtu", str(mtu))
    t.write(n + "/type", "1")
    if speed is not None:
        t.write(n + "/speed", str(speed))
    t.write(n + "/address", address)
    t.symlink("/sys/class/net/" + ifname, rel_link("/sys/class/net", n))
    return n


def port(*, state, phys_state, rate, link_layer, lid="0x0", sm_lid="0x0", gids=(), counters="zero",
         hw_counters=HW_ZERO):
    """One port. counters: "zero" (PMA counters at rest), "na" (every PMA file reads N/A (no PMA)), None (no
    counters/ directory: newer kernels create none without a PMA), or a dict of values over the zero set."""
    return dict(state=state, phys_state=phys_state, rate=rate, link_layer=link_layer, lid=lid, sm_lid=sm_lid,
                gids=list(gids), counters=counters, hw_counters=hw_counters)


def rdma_device(t, parent_dir, name, uverbs, *, ports, node_type="1: CA", fw_ver=None, hca_type=None,
                board_id=None, guid="946d:ae03:00cd:e700"):
    """An RDMA device below `parent_dir` with `ports` ({number: port(...)}), its class and verbs links."""
    d = parent_dir + "/infiniband/" + name
    t.write(d + "/node_type", node_type)
    for attr, value in (("fw_ver", fw_ver), ("hca_type", hca_type), ("board_id", board_id)):
        if value is not None:
            t.write(d + "/" + attr, value)
    t.write(d + "/node_guid", guid)
    t.write(d + "/sys_image_guid", guid)
    if not parent_dir.startswith("/sys/devices/virtual"):
        t.symlink(d + "/device", rel_link(d, parent_dir))
    for number, p in sorted(ports.items()):
        pd = d + "/ports/%d" % number
        for attr in ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid"):
            t.write(pd + "/" + attr, p[attr])
        t.write(pd + "/lid_mask_count", "0")
        t.write(pd + "/sm_sl", "0")
        t.write(pd + "/cap_mask", "0xa751e848" if p["link_layer"] == "InfiniBand" else "0x04010000")
        for i, (gid, gtype, ndev) in enumerate(p["gids"]):
            t.write(pd + "/gids/%d" % i, gid)
            if gtype:
                t.write(pd + "/gid_attrs/types/%d" % i, gtype)
            if ndev:
                t.write(pd + "/gid_attrs/ndevs/%d" % i, ndev)
        counters = p["counters"]
        if counters is not None:
            values = dict((c, 0) for c in PMA_ZERO)
            values.update({"port_xmit_wait": 0, "port_xmit_data": 0, "port_rcv_data": 0,
                           "port_xmit_packets": 0, "port_rcv_packets": 0})
            if counters == "na":
                values = dict((c, NO_PMA) for c in values)
            elif counters != "zero":
                values.update(counters)
            for c, v in sorted(values.items()):
                t.write(pd + "/counters/" + c, str(v))
        for c in p["hw_counters"]:
            t.write(pd + "/hw_counters/" + c, "0")
        if p["hw_counters"] is HW_ZERO:
            t.write(pd + "/hw_counters/lifespan", "10")
    t.symlink("/sys/class/infiniband/" + name, rel_link("/sys/class/infiniband", d))
    v = parent_dir + "/infiniband_verbs/uverbs%d" % uverbs
    t.write(v + "/ibdev", name)
    t.write(v + "/abi_version", "1")
    t.symlink("/sys/class/infiniband_verbs/uverbs%d" % uverbs, rel_link("/sys/class/infiniband_verbs", v))
    t.write("/dev/infiniband/uverbs%d" % uverbs, "", newline=False)
    return d


def ib_rail(i):
    """What gen_hosts writes for rail i of an HGX node (a ConnectX-7 NDR port), for rails written here."""
    return port(state="4: ACTIVE", phys_state="5: LinkUp", rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand",
                lid="0x%x" % (0x11 + i), sm_lid="0x1",
                gids=[("fe80:0000:0000:0000:946d:ae03:00cd:e7%02x" % i, "IB/RoCE v1", None)])


def ib_rails(t, nics, uverbs):
    for i, nic in enumerate(nics):
        rdma_device(t, nic.path, "mlx5_%d" % i, uverbs.take(), ports={1: ib_rail(i)}, fw_ver="28.39.1002",
                    hca_type="MT4129", board_id="MT_0000000838", guid="946d:ae03:00cd:e7%02x" % i)


CUFILE = """{
    "logging": { "dir": "/var/log/cufile", "level": "ERROR" },
    "properties": { "allow_compat_mode": false, "rdma_dev_addr_list": [] }
}
"""


def hgx_node(name, **kwargs):
    """gen_hosts' HGX node with GPUDirect Storage configured as a GDS node ships (compat mode forbidden)."""
    t = hgx(name, **kwargs)
    t.write("/etc/cufile.json", CUFILE, newline=False)
    return t


def mlx_function(bdf, device, cls, link, numa, subsystem=(0x15B3, 0x0041)):
    return Dev(bdf, 0x15B3, device, cls, link, ENDPOINT, numa=numa, cpulist=CPULIST[numa], subsystem=subsystem)


def root_port(bus, numa, link=GEN5_X16):
    return Dev("0000:%02x:01.0" % bus, 0x8086, 0x352A, 0x060400, link, ROOT_PORT, ACS_REDIRECT, numa=numa,
               cpulist=CPULIST[numa])


# ---------------------------------------------------------------------------------------------------------
# 8 NDR rails and a BlueField-3 RoCE bond (gpud's H100 capture: mlx5_bond_0, MT41692, 200 Gb/sec (2X NDR),
# Ethernet, beside eight MT4129 NDR InfiniBand rails)

BF3_BUS = 0x5A


def h100_bond(name):
    rp = root_port(BF3_BUS, 0)
    pf0 = rp.add(mlx_function("0000:%02x:00.0" % (BF3_BUS + 1), 0xA2DC, 0x020000, GEN5_X16, 0,
                              subsystem=(0x15B3, 0x0051)))
    pf1 = rp.add(mlx_function("0000:%02x:00.1" % (BF3_BUS + 1), 0xA2DC, 0x020000, GEN5_X16, 0,
                              subsystem=(0x15B3, 0x0051)))

    def rdma(t, nics):
        uverbs = Uverbs()
        ib_rails(t, nics, uverbs)
        # RoCE LAG: both PFs' netdevs are enslaved to bond0; one RDMA device on PF0, its GIDs on the bond.
        for k, pf in enumerate((pf0, pf1)):
            netdev(t, pf.path, "ens%df%dnp%d" % (BF3_BUS + 1, k, k), 9000,
                   address="a0:88:c2:3b:5e:%02x" % (0x10 + k), speed=200000)
        netdev(t, "/sys/devices/virtual", "bond0", 9000, address="a0:88:c2:3b:5e:10", speed=400000)
        gids = [(g, gt, "bond0" if nd else None) for g, gt, nd in roce_gids(0x40, "bond0")]
        rdma_device(t, pf0.path, "mlx5_bond_0", uverbs.take(), fw_ver="32.38.3056", hca_type="MT41692",
                    board_id="MT_0000000884", guid="a088:c203:003b:5e10",
                    ports={1: port(rate="200 Gb/sec (2X NDR)", link_layer="Ethernet", gids=gids, **ACTIVE)})

    return hgx_node(name, extra=[("pci0000:%02x" % BF3_BUS, rp)], rdma=rdma)


# ---------------------------------------------------------------------------------------------------------
# A DGX-style node: 8 NDR compute rails and two Ethernet storage ports, one per socket, on CPU root ports

STORAGE_BUSES = ((0x50, 0), (0xD0, 1))


def dgx_storage(name, storage_down=None):
    """storage_down: index (0, 1) of a storage port that is down (its netdev down, its GIDs kept)."""
    extra, storage = [], []
    for bus, numa in STORAGE_BUSES:
        rp = root_port(bus, numa)
        storage.append(rp.add(mlx_function("0000:%02x:00.0" % (bus + 1), 0x1021, 0x020000, GEN5_X16, numa)))
        extra.append(("pci0000:%02x" % bus, rp))

    def rdma(t, nics):
        uverbs = Uverbs()
        ib_rails(t, nics, uverbs)
        for k, nic in enumerate(storage):
            index = 8 + k
            ifname = "enp%ds0np0" % (STORAGE_BUSES[k][0] + 1)
            down = storage_down == k
            netdev(t, nic.path, ifname, 9000, address="94:6d:ae:cd:e8:%02x" % index, speed=200000,
                   operstate="down" if down else "up")
            state = {"state": "1: DOWN", "phys_state": "3: Disabled"} if down else ACTIVE
            rdma_device(t, nic.path, "mlx5_%d" % index, uverbs.take(), fw_ver="28.39.1002", hca_type="MT4129",
                        board_id="MT_0000000838", guid="946d:ae03:00cd:e8%02x" % index,
                        ports={1: port(rate="200 Gb/sec (4X HDR)", link_layer="Ethernet",
                                       gids=roce_gids(index, ifname), **state)})

    return hgx_node(name, extra=extra, rdma=rdma)


# ---------------------------------------------------------------------------------------------------------
# The DGX-style node reading WekaFS through GPUDirect Storage (issue 31 section 9): cufile.json's
# fs.weka.rdma_dev_addr_list names the client addresses of the RDMA NICs cuFile reaches the filesystem through
# (cuFile's documented format: IP address strings). The storage ports carry 10.0.8.1 and 10.0.9.1 (their RoCE
# GIDs, gen_hosts.roce_gids); the management NIC eno1 carries 10.0.7.1 (no RDMA). Shapes re-enacted: the GDS
# configuration guide's fs.weka section and WekaFS's mount (type wekafs, source the backend's filesystem).

WEKA_MOUNT = "24 22 0:52 / /mnt/weka rw,relatime shared:7 - wekafs weka-backend/default rw,relatime"

CUFILE_WEKA = """{
    "logging": { "dir": "/var/log/cufile", "level": "ERROR" },
    "properties": { "allow_compat_mode": false, "rdma_dev_addr_list": [] },
    "fs": {
        "weka": {
            // the client addresses of the RDMA NICs that reach the WekaFS backends
            "rdma_dev_addr_list": [%s]
        }
    }
}
"""


def fib_trie(addresses):
    """/proc/net/fib_trie with each address LOCAL (one /24 per address, as the storage subnets are)."""
    main = ["Main:", "  +-- 0.0.0.0/0 3 0 5"]
    local = ["Local:"]
    for a in addresses:
        net = a.rsplit(".", 1)[0] + ".0"
        main += ["     +-- %s/24 2 0 2" % net, "        |-- %s" % net, "           /24 link UNICAST",
                 "        |-- %s" % a, "           /32 host LOCAL"]
        local += ["  |-- %s" % a, "     /32 host LOCAL"]
    return "\n".join(main + ["  +-- 127.0.0.0/8 2 0 2", "     |-- 127.0.0.1", "        /32 host LOCAL"] + local)


def dgx_weka(listed, *, mounted=True, storage_down=None):
    """listed: the addresses in fs.weka.rdma_dev_addr_list."""
    def build(name):
        t = dgx_storage(name, storage_down=storage_down)
        netdev(t, "/sys/devices/pci0000:00/0000:00:1f.6", "eno1", 1500, address="3c:ec:ef:10:07:01", speed=1000)
        t.write("/proc/net/fib_trie", fib_trie(["10.0.7.1", "10.0.8.1", "10.0.9.1"]))
        mounts = "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro"
        if mounted:
            mounts += "\n" + WEKA_MOUNT
        t.write("/proc/self/mountinfo", mounts)
        t.write("/etc/cufile.json", CUFILE_WEKA % ", ".join('"%s"' % a for a in listed), newline=False)
        return t
    return build


# ---------------------------------------------------------------------------------------------------------
# ConnectX-8 multi-plane RoCE (sichek PR #98: B300 NVL8, 12 ports per ConnectX-8 device, data only on ports
# 3/6/9/12 (netdevs eth_rX_p0..p3), the other ports disabled by the platform; a ConnectX-7 mezzanine on an HDR
# InfiniBand management fabric). GPUs are the HGX H100 baseboard of gen_hosts: the shape under test is the NIC's.

CX8_DATA_PORTS = (3, 6, 9, 12)
MEZZ_BUS = 0x60


def cx8_multiplane(name):
    rp = root_port(MEZZ_BUS, 0)
    mezz = rp.add(mlx_function("0000:%02x:00.0" % (MEZZ_BUS + 1), 0x1021, 0x020700, GEN5_X16, 0))

    def rdma(t, nics):
        uverbs = Uverbs()
        for r, nic in enumerate(nics):
            ports = {}
            for n in range(1, 13):
                if n not in CX8_DATA_PORTS:
                    ports[n] = port(link_layer="Ethernet", **DOWN_DISABLED)
                    continue
                plane = CX8_DATA_PORTS.index(n)
                ifname = "eth_r%d_p%d" % (r, plane)
                netdev(t, nic.path, ifname, 9000, address="7c:8c:09:a1:%02x:%02x" % (r, plane), speed=200000)
                ports[n] = port(rate="200 Gb/sec (2X NDR)", link_layer="Ethernet",
                                gids=roce_gids(r * 4 + plane, ifname), **ACTIVE)
            rdma_device(t, nic.path, "roce_r%d" % r, uverbs.take(), ports=ports, fw_ver="40.48.1000",
                        hca_type="MT4131", board_id="NVD0000000072", guid="7c8c:0903:00a1:%02x00" % r)
        rdma_device(t, mezz.path, "mezz_0", uverbs.take(), fw_ver="28.47.2526", hca_type="MT4129",
                    board_id="NVD0000000079", guid="7c8c:0903:00a1:ff00",
                    ports={1: port(rate="200 Gb/sec (4X HDR)", link_layer="InfiniBand", lid="0x2a", sm_lid="0x1",
                                   gids=[("fe80:0000:0000:0000:7c8c:0903:00a1:ff00", "IB/RoCE v1", None)],
                                   **ACTIVE)})

    return hgx_node(name, roce={"mtu": 9000}, nic_device=0x1023, extra=[("pci0000:%02x" % MEZZ_BUS, rp)], rdma=rdma)


# ---------------------------------------------------------------------------------------------------------
# iWARP and Intel RDMA: small servers without GPUs, one Intel Ethernet controller each.
# i40iw on an X722 (node_exporter's fixture: node_type RNIC, hca_type I40IW, "10 Gb/sec (4X)", every PMA counter
# "N/A (no PMA)"); irdma on an E810 with one PF in iWARP mode (iwp…, 4: RNIC) and one in RoCE mode (rocep…,
# 1: CA, RoCE v2 GIDs), as devlink's enable_iwarp / enable_roce set per PF. The kernel reports the link layer of
# an iWARP port as Ethernet (rdma_port_get_link_layer); node_exporter's fixture file says InfiniBand.

IRDMA_HW = ["ip4InDiscards", "ip4InReceives", "ip4OutNoRoutes", "tcpInSegs", "tcpInErrs", "tcpRetransSegs",
            "tcpOutSegs", "tcpOutRsts", "iwInRdmaReads", "iwInRdmaWrites", "RxUDP", "TxUDP", "RxECNMrkd",
            "cnpHandled", "cnpSent"]


def intel_server(name, functions, modules, write_rdma):
    """functions: [(bdf tail, device id, link)] on one root port; write_rdma(t, pci_devs) writes the rest."""
    t = Tree(name)
    place(t, "pci0000:00", Dev("0000:00:00.0", 0x8086, 0x09A2, 0x060000, None, numa=0, cpulist=CPULIST[0],
                               config_len=256))
    rp = root_port(0x17, 0, link=(16.0, 16, 16.0, 16))
    devs = [rp.add(Dev("0000:18:00.%d" % fn, 0x8086, device, 0x020000, link, ENDPOINT, numa=0,
                       cpulist=CPULIST[0], subsystem=(0x8086, 0x0001)))
            for fn, device, link in functions]
    place(t, "pci0000:17", rp)
    write_rdma(t, devs)
    t.write("/sys/class/infiniband_verbs/abi_version", "6")
    t.write("/dev/infiniband/rdma_cm", "", newline=False)
    write_modules(t, modules)
    t.write("/proc/cmdline", "BOOT_IMAGE=/vmlinuz-5.15.0-122-generic root=UUID=4f2b8a4e ro quiet")
    t.write("/proc/sys/kernel/osrelease", "5.15.0-122-generic")
    t.write("/proc/sys/kernel/hostname", name)
    write_cpuinfo(t, False, 2, "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz")
    return t


def mac_gid(mac):
    """iWARP GID 0: the netdev's MAC in the first six bytes (i40iw_query_gid, irdma_query_gid)."""
    b = mac.split(":")
    return "%s%s:%s%s:%s%s:0000:0000:0000:0000:0000" % tuple(b)


def iwarp_i40iw(name):
    def rdma(t, devs):
        mac = "3c:fd:fe:9f:12:34"
        netdev(t, devs[0].path, "eno1", 1500, address=mac, speed=10000)
        rdma_device(t, devs[0].path, "i40iw0", 0, node_type="4: RNIC", fw_ver="0.2", hca_type="I40IW",
                    board_id="I40IW Board ID", guid="3cfd:fe9f:1234:0000",
                    ports={1: port(rate="10 Gb/sec (4X)", link_layer="Ethernet", counters="na", hw_counters=(),
                                   gids=[(mac_gid(mac), "IB/RoCE v1", None)], **ACTIVE)})

    return intel_server(name, [(0, 0x37D2, (8.0, 4, 8.0, 4))],
                        [("i40iw", 196608, 0, "-", "", None), ("iw_cm", 49152, 1, "i40iw,", "", None),
                         ("ib_uverbs", 163840, 1, "i40iw,", "", None),
                         ("ib_core", 417792, 3, "i40iw,iw_cm,ib_uverbs,", "", None),
                         ("i40e", 487424, 1, "i40iw,", "", None)], rdma)


def irdma_mixed(name):
    def rdma(t, devs):
        macs = ["b4:96:91:d2:0a:%02x" % k for k in (0, 1)]
        for k, dev in enumerate(devs):
            netdev(t, dev.path, "ens1f%d" % k, 9000, address=macs[k], speed=100000)
        rdma_device(t, devs[0].path, "iwp24s0f0", 0, node_type="4: RNIC", fw_ver="1.70",
                    guid="b696:91ff:fed2:0a00",
                    ports={1: port(rate="100 Gb/sec (4X EDR)", link_layer="Ethernet", counters=None,
                                   hw_counters=IRDMA_HW, gids=[(mac_gid(macs[0]), "IB/RoCE v1", None)],
                                   **ACTIVE)})
        gids = roce_gids(0x50, "ens1f1")
        rdma_device(t, devs[1].path, "rocep24s0f1", 1, node_type="1: CA", fw_ver="1.70",
                    guid="b696:91ff:fed2:0a01",
                    ports={1: port(rate="100 Gb/sec (4X EDR)", link_layer="Ethernet", counters=None,
                                   hw_counters=IRDMA_HW, gids=gids, **ACTIVE)})

    link = (16.0, 16, 16.0, 16)
    return intel_server(name, [(0, 0x1592, link), (1, 0x1592, link)],
                        [("irdma", 344064, 0, "-", "", None), ("iw_cm", 49152, 1, "irdma,", "", None),
                         ("ib_uverbs", 163840, 1, "irdma,", "", None),
                         ("ib_core", 417792, 3, "irdma,iw_cm,ib_uverbs,", "", None),
                         ("ice", 1064960, 1, "irdma,", "", None)], rdma)


SCENARIOS = {
    "h100-ib-bond0-storage": h100_bond,
    "dgx-ib-storage-eth": dgx_storage,
    "dgx-gds-weka": dgx_weka(["10.0.8.1", "10.0.9.1"]),
    "dgx-gds-weka-addr-no-rdma": dgx_weka(["10.0.8.1", "10.0.7.1", "10.0.6.1"]),
    "dgx-gds-weka-addr-port-down": dgx_weka(["10.0.8.1", "10.0.9.1"], storage_down=1),
    "dgx-gds-weka-not-mounted": dgx_weka(["10.0.6.1"], mounted=False),
    "cx8-multiplane-roce": cx8_multiplane,
    "iwarp-i40iw": iwarp_i40iw,
    "irdma-iwarp-roce": irdma_mixed,
}


if __name__ == "__main__":
    gen_hosts.main(sys.argv[1:], SCENARIOS)
