#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/), hand-encoded protobuf wire
format so no generated module is needed. Re-run after changing the seeds; the files are committed.
fuzz_batch input = 1 selector byte (bit 0: discrete; bits 1..: dim-1 or num_states-1) + IngestBatch."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def string(field, s):
    b = s.encode()
    return key(field, 2) + varint(len(b)) + b


def doubles(field, vals):
    body = b"".join(struct.pack("<d", v) for v in vals)
    return key(field, 2) + varint(len(body)) + body


def ints(field, vals):
    body = b"".join(varint(v) for v in vals)
    return key(field, 2) + varint(len(body)) + body


def uint(field, v):
    return key(field, 0) + varint(v)


def selector(discrete, k):  # k = dim - 1 or num_states - 1
    return bytes([(k << 1) | (1 if discrete else 0)])


SEEDS = {
    # continuous dim 2: two pairs, producer with offset
    "pairs_d2": selector(False, 1) + string(1, "m") + string(2, "p") + uint(3, 5)
    + doubles(4, [0.1, 0.2, 0.3, 0.4]) + doubles(5, [0.2, 0.3, 0.4, 0.5]),
    # continuous dim 1: a trajectory of four states with an episode
    "states_d1": selector(False, 0) + string(1, "m") + doubles(6, [0.0, 0.5, 1.0, 1.5]) + string(7, "ep"),
    # NaN in y (rejected: non_finite)
    "nan_d1": selector(False, 0) + string(1, "m") + doubles(4, [1.0]) + doubles(5, [float("nan")]),
    # mismatched sizes (rejected: size)
    "size_d3": selector(False, 2) + string(1, "m") + doubles(4, [1.0, 2.0, 3.0]) + doubles(5, [1.0, 2.0]),
    # discrete 5 states: id pairs, one out of range variant
    "ids_p5": selector(True, 4) + string(1, "m") + ints(8, [0, 1, 2]) + ints(9, [1, 2, 4]),
    "ids_bad_p5": selector(True, 4) + string(1, "m") + ints(8, [0, 1]) + ints(9, [1, 7]),
    # discrete trajectory of state ids
    "state_ids_p3": selector(True, 2) + string(1, "m") + ints(10, [0, 1, 2, 0, 1]),
    # both payload forms (rejected: payload_form)
    "both_forms": selector(False, 0) + doubles(4, [1.0]) + doubles(5, [2.0]) + doubles(6, [1.0, 2.0]),
}

if __name__ == "__main__":
    out = os.path.join(HERE, "corpus", "fuzz_batch")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {out}")
