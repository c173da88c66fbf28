#!/usr/bin/env python3
"""Writes the seed corpus of service_fuzz_requests (see fuzz_requests.cc).

Each seed is a sequence of records: u8 queue, u8 chunk, u16 writable,
u16 readable_len, readable bytes (request header, arguments, data).
"""
import os
import struct

RAM = 1 << 20  # GuestRam's base; its first half is free for regions
HDR = "<HHIQ"


def req(opcode, args=b"", data=b"", rid=7, flags=0, args_len=None):
    n = len(args) if args_len is None else args_len
    return struct.pack(HDR, opcode, flags, n, rid) + args + data


def rec(queue, body, writable=280, chunk=0):
    return struct.pack("<BBHH", queue, chunk, writable, len(body)) + body


def region(gpa, ln, flags=3):
    return req(0x0100, struct.pack("<IIQ", 1, flags, ln), struct.pack("<QQ", gpa, ln))


def slice_(region_id, off, ln):
    return struct.pack("<IIQQ", region_id, 0, off, ln)


def coll(op, comm, seq, count, send, recv, dtype=7, redop=0, peer=0):
    return req(op, struct.pack("<QQQBBHI", comm, seq, count, dtype, redop, 0, peer) + send + recv)


UID1 = bytes([1]) + bytes(31)  # the scripted backend's first uid
init1 = req(0x0201, UID1 + struct.pack("<II", 1, 0) + bytes(16))

POLICY = req(0x0400, struct.pack("<IIIIII", 1, 1, 2, 1, 100, 0))
NEG = struct.pack("<HHBBHQQQ", 0, 1, 0, 1, 0, 1000, 2000, 60)

seeds = {
    "register_and_unregister": rec(0, region(RAM + 4096, 8192)) +
    rec(0, req(0x0101, struct.pack("<II", 1, 0))),
    "comm_one_rank_allreduce": rec(0, req(0x0200)) + rec(0, init1) +
    rec(0, region(RAM, 4096)) + rec(2, coll(0x0300, 1, 0, 16, slice_(1, 0, 64), slice_(1, 64, 64))),
    "inline_allreduce": rec(0, req(0x0200)) + rec(0, init1) +
    rec(2, coll(0x0300, 1, 0, 4, slice_(0xffffffff, 0, 16), slice_(0xffffffff, 0, 16)) + bytes(16)),
    "split_segments": rec(0, region(RAM + 8192, 4096), chunk=5),
    "bad_framing": rec(0, req(0x0001, args_len=0xffffffff)) + rec(0, req(0x0100, flags=1)) +
    rec(1, req(0x0200)) + rec(2, req(0x0200), writable=3),
    "comm_destroy_abort": rec(0, req(0x0200)) + rec(0, init1) +
    rec(0, req(0x0203, struct.pack("<Q", 1))) + rec(0, req(0x0202, struct.pack("<Q", 1))),
    "checkpoint_family": rec(0, region(RAM, 8192)) + rec(0, POLICY) +
    rec(2, req(0x0401, struct.pack("<IIQII", 1, 1, 3, 4, 0), slice_(1, 64, 4096) + b"meta")) +
    rec(2, req(0x0402, struct.pack("<IIQ", 1, 1, 3), slice_(1, 64, 4096))) +
    rec(0, req(0x0403, struct.pack("<IIQ", 1, 8, 0))) +
    rec(0, req(0x0405, struct.pack("<II", 1, 0) + slice_(1, 0, 16) + struct.pack("<II", 1, 0),
               slice_(1, 4096, 4096))) +
    rec(0, req(0x0404, struct.pack("<IIQ", 1, 0, 3))),
    "event_family": rec(0, req(0x0500, struct.pack("<QQ", 0xffff, 0))) +
    rec(1, b"", writable=112) + rec(0, req(0x0501, struct.pack("<QII", 1, 1, 0))),
    "provider_family": rec(0, req(0x0600), writable=512) + rec(0, req(0x0700, NEG), writable=400) +
    rec(0, req(0x0703, struct.pack("<Q", 1) + NEG), writable=400) +
    rec(0, req(0x0701, struct.pack("<Q", 1))) + rec(0, req(0x0702, struct.pack("<Q", 1))) +
    rec(0, req(0x0704, struct.pack("<QHHI", 5, 0, 0, 0))) +
    rec(0, req(0x0800, struct.pack("<IIII", 1, 64, 1, 0))),
}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "requests")
os.makedirs(out, exist_ok=True)
for name, blob in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(blob)
