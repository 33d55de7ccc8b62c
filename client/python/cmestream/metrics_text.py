"""Parser of the Prometheus text exposition format (what cmestreamd serves on /metrics), for
tests and scripts that check the daemon's series without a Prometheus server."""
from __future__ import annotations

import re
from typing import Dict, List, Tuple

_SAMPLE = re.compile(r'^([A-Za-z_:][\w:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$')
_LABEL = re.compile(r'([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> List[Tuple[str, Dict[str, str], float]]:
    """[(sample name, labels, value)] of every sample line; histogram samples keep their
    _bucket/_sum/_count names. Comment lines (# HELP, # TYPE) are skipped."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"not an exposition sample line: {line!r}")
        labels = {k: bytes(v, "utf-8").decode("unicode_escape") for k, v in _LABEL.findall(m.group(3) or "")}
        out.append((m.group(1), labels, float(m.group(4))))
    return out
