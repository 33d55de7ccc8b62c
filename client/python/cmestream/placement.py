"""Model placement over several cmestreamd pods by rendezvous (highest-random-weight) hashing.

Every model lives on exactly one daemon: the pod whose identity scores highest for the model's
name. Identities are stable names such as a StatefulSet's pod names (cmestreamd-0,
cmestreamd-1, ...), not addresses, so placement survives pod restarts and IP changes. Adding
or removing one pod moves only the models whose highest score changes: about 1/(n+1) of them
when growing from n to n+1 pods, all onto the new pod.

The score is defined byte for byte so other languages can reproduce it:
    h = FNV-1a 64 (offset 0xcbf29ce484222325, prime 0x100000001b3) over
        UTF-8(identity) + b"\\x00" + UTF-8(model)
    score = splitmix64 finalizer of h:
        z = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
        z ^ (z >> 31)      (all mod 2^64)
Ties (practically impossible) go to the smaller identity.
"""
from __future__ import annotations

from typing import Iterable, Sequence

_MASK = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    """FNV-1a, 64 bits."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & _MASK
    return h


def mix64(h: int) -> int:
    """The splitmix64 output finalizer (a bijection of 64-bit integers)."""
    z = ((h ^ (h >> 30)) * 0xbf58476d1ce4e5b9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & _MASK
    return z ^ (z >> 31)


def score(identity: str, model: str) -> int:
    """The rendezvous weight of `model` on the pod `identity` (an unsigned 64-bit integer)."""
    return mix64(fnv1a64(identity.encode() + b"\x00" + model.encode()))


def owner(model: str, identities: Iterable[str]) -> str:
    """The identity that owns `model` among `identities` (ValueError if there is none)."""
    ids: Sequence[str] = sorted(set(identities))
    if not ids:
        raise ValueError("owner: expected at least one pod identity")
    return max(ids, key=lambda i: (score(i, model), [-ord(c) for c in i]))
