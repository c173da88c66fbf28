#!/usr/bin/env python3
"""Writes the seed corpora of the vdev fuzz targets (run from this folder).

messages/: vhost-user streams in fuzz_messages.cc's step format.
ring/: RingParams + a guest memory image for fuzz_ring.cc.
snapshot/: a descriptor count byte + a hand-over snapshot for fuzz_snapshot.cc.
"""
import json
import struct

VERSION, NEED_REPLY = 0x1, 0x8
EVENTFD, MEMFD = 0, 1
UVA = 0x7F0000000000


def step(ctl, data):
    return bytes([ctl]) + data


def msg(request, payload=b"", nfds=0, kind=EVENTFD, flags=VERSION | NEED_REPLY):
    out = step((kind << 4) | nfds, struct.pack("<III", request, flags, len(payload)))
    if payload:
        out += step(0, payload)
    return out


def u64(v):
    return struct.pack("<Q", v)


def state(i, n):
    return struct.pack("<II", i, n)


def region(gpa, size, uva, off):
    return struct.pack("<QQQQ", gpa, size, uva, off)


def bringup(queue=0, ring=0x0, size=8):
    s = b""
    s += msg(1)                                   # GET_FEATURES
    s += msg(15)                                  # GET_PROTOCOL_FEATURES
    s += msg(16, u64(0x1822B))                    # SET_PROTOCOL_FEATURES
    s += msg(17)                                  # GET_QUEUE_NUM
    s += msg(3)                                   # SET_OWNER
    s += msg(13, u64(queue), 1)                   # SET_VRING_CALL
    s += msg(24, struct.pack("<III", 0, 16, 0) + bytes(16))  # GET_CONFIG
    s += msg(2, u64((1 << 32) | (1 << 30) | (1 << 29) | (1 << 28)))  # SET_FEATURES
    s += msg(5, struct.pack("<II", 1, 0) + region(0, 0x10000, UVA, 0), 1, MEMFD)
    s += msg(8, state(queue, size))
    s += msg(10, state(queue, 0))
    s += msg(9, struct.pack("<IIQQQQ", queue, 0, UVA + ring, UVA + ring + 0x2000,
                            UVA + ring + 0x1000, 0))
    s += msg(12, u64(queue), 1)                   # SET_VRING_KICK
    s += msg(18, state(queue, 1))                 # SET_VRING_ENABLE
    return s


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


s = bringup()
s += msg(11, state(0, 0))                         # GET_VRING_BASE
s += msg(37, u64(0) + region(0x100000, 0x8000, UVA + 0x100000, 0x8000), 1, MEMFD)
s += msg(38, u64(0) + region(0x100000, 0x8000, UVA + 0x100000, 0))
s += msg(39, u64(0xF))
s += msg(40)
s += msg(36)
s += msg(34)
write("corpus/messages/bringup", s)
write("corpus/messages/nofd_poll", bringup(1, 0x4000).replace(
    msg(12, u64(1), 1), msg(12, u64(1 | 0x100))))
write("corpus/messages/bad_header", step(0, struct.pack("<III", 5, 0x7, 4000)))
write("corpus/messages/config", msg(25, struct.pack("<III", 8, 4, 0) + b"abcd") +
      msg(24, struct.pack("<III", 250, 8, 0) + bytes(8)) + msg(21, b"", 1, 2))

# Ring seeds: RingParams <BBHHHHBB> then the image (region A = 8 KiB).
GPA = 0x1000
A_LEN = 0x2000


def ring_seed(descs, heads, tables=(), flags=3, size_log2=3):
    img = bytearray(0x4000)
    for i, (addr, ln, fl, nxt) in enumerate(descs):
        struct.pack_into("<QIHH", img, 16 * i, addr, ln, fl, nxt)
    struct.pack_into("<H", img, 0x1002, len(heads))
    for i, h in enumerate(heads):
        struct.pack_into("<H", img, 0x1004 + 2 * i, h)
    for off, entries in tables:
        for i, (addr, ln, fl, nxt) in enumerate(entries):
            struct.pack_into("<QIHH", img, off + 16 * i, addr, ln, fl, nxt)
    params = struct.pack("<BBHHHHBB", size_log2, flags, 0, 0, 0x1000, 0x1800, 16, A_LEN // 256)
    return params + bytes(img).rstrip(b"\0")  # the target zero-pads the image


write("corpus/ring/simple", ring_seed(
    [(GPA + 0x3000, 16, 1, 1), (GPA + 0x3100, 16, 2, 0)], [0]))
write("corpus/ring/indirect", ring_seed(
    [(GPA + 0x1E00, 32, 4, 0)], [0],
    tables=[(0x1E00, [(GPA + 0x3000, 8, 1, 1), (GPA + 0x3100, 8, 2, 0)])]))
write("corpus/ring/cross_region", ring_seed(
    [(GPA + A_LEN - 8, 16, 1, 1), (GPA + 0x3100, 16, 2, 0)], [0]))
write("corpus/ring/loop", ring_seed([(GPA + 0x3000, 8, 1, 1), (GPA + 0x3000, 8, 1, 0)], [0, 1]))
# Compare mode (flag 16, batches of 3): a mix of chains, one looping.
write("corpus/ring/batch", ring_seed(
    [(GPA + 0x3000, 16, 1, 1), (GPA + 0x3100, 16, 2, 0), (GPA + 0x3200, 0, 2, 0),
     (GPA + 0x1E00, 32, 4, 0), (GPA + 0x3300, 8, 1, 4), (GPA + 0x3300, 8, 1, 4)],
    [0, 2, 3, 4, 1], tables=[(0x1E00, [(GPA + 0x3000, 8, 1, 1), (GPA + 0x3100, 8, 2, 0)])],
    flags=3 | 16 | (2 << 5), size_log2=4))


# Snapshot seeds: the descriptor count, then the JSON EncodeSnapshot writes.
def queue(size, kick, call, err=-1, last_avail=0, addrs=True):
    base = UVA if addrs else 0
    return {"size": size, "has_addresses": addrs, "desc_addr": base,
            "avail_addr": base + 0x400 if addrs else 0, "used_addr": base + 0x1000 if addrs else 0,
            "last_avail": last_avail, "started": addrs, "enabled": addrs,
            "nofd_kick": kick == -1 and addrs, "kick": kick, "call": call, "err": err}


def connection(socket, first_fd, queues, partial=b"", partial_fds=()):
    fd = first_fd
    regions = []
    for i in range(2):
        regions.append({"guest_phys_addr": i * 0x100000, "size": 0x100000,
                        "userspace_addr": UVA + i * 0x100000, "mmap_offset": 0, "fd": fd})
        fd += 1
    qs = []
    for i in range(queues):
        qs.append(queue(64, fd, fd + 1, last_avail=i * 7))
        fd += 2
    session = {"acked_features": 0x170000000, "features_set": True, "acked_protocol": 0x1822B,
               "status": 15, "ever_started": True, "backend_channel": -1, "regions": regions,
               "queues": qs, "device_state": "deadbeef"}
    return {"socket": socket, "session": session, "partial_message": partial.hex(),
            "partial_fds": list(partial_fds), "unsent_replies": ""}


def snapshot(num_fds, servers, app=b"", version=1):
    doc = {"format": "vdev-handoff", "version": version, "servers": servers,
           "application_state": app.hex()}
    return bytes([num_fds]) + json.dumps(doc, separators=(",", ":")).encode()


write("corpus/snapshot/idle", snapshot(1, [{"path": "/run/a.sock", "listener": 0,
                                            "has_connection": False}]))
write("corpus/snapshot/connected", snapshot(9, [
    {"path": "/run/a.sock", "listener": 0, "has_connection": True,
     "connection": connection(1, 2, 2, b"\x18\x00\x00", [8])}], b"{}\x00"))
write("corpus/snapshot/two_servers", snapshot(13, [
    {"path": "/run/a.sock", "listener": 0, "has_connection": True,
     "connection": connection(1, 2, 4)},
    {"path": "/run/b.sock", "listener": 12, "has_connection": False}]))
write("corpus/snapshot/newer_version", snapshot(0, [], version=2))
