"""Move models between cmestreamd pods after the pod set changed (e.g. 3 -> 4 replicas).

    python3 -m cmestream.rebalance --from-servers ID=HOST:PORT,... --to-servers ID=HOST:PORT,...
                                   [--dry-run] [--json] [--token-file FILE] [--tls-ca FILE ...]

Every model found on any pod of either list whose owner under --to-servers (rendezvous
placement, cmestream.placement) is another pod is moved there: exported from the pod that
holds it, imported on its new owner under the same name, verified (state digest and samples
equal on both sides, and the source unchanged since the export), then deleted from the old
pod. Models whose owner did not change are not touched: growing n -> n+1 pods moves about
1/(n+1) of them, all onto the new pod. The calls carry `cmestream-placement: ignore`, so the
tool works whichever --shard-peers list the daemons run with at the moment (admin scope is
needed for export/import/delete when the daemons use --auth-tokens).

Safe to re-run: a model already imported on its owner with the same digest (an interrupted
run) is only deleted from the old pod; a different copy there is an error and nothing of
that model is changed. The first error stops the run (exit 1) and names the model and pods.
--dry-run prints the plan only. Procedure: service/README.md "Several pods".
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, List, Optional, Tuple

import grpc

from . import placement
from .client import Client, CmestreamError


def parse_pods(text: str) -> Dict[str, str]:
    """"ID=HOST:PORT,..." or "HOST:PORT,..." (each target its own id) -> {id: target}."""
    pods: Dict[str, str] = {}
    for entry in text.split(","):
        if not entry:
            raise ValueError(f"server list '{text}': empty entry")
        pod, _, target = entry.partition("=")
        target = target if target else pod
        if pod in pods:
            raise ValueError(f"server list: '{pod}' twice")
        pods[pod] = target
    return pods


def plan(holdings: Dict[str, List[str]], old: Dict[str, str],
         new: Dict[str, str]) -> Tuple[List[Tuple[str, str, str]], int]:
    """The moves (model, from pod, to pod) for the models each pod holds, and how many models
    placement alone predicts to move (owner under `old` != owner under `new`)."""
    moves = []
    predicted = 0
    for pod, models in sorted(holdings.items()):
        for m in sorted(models):
            target_owner = placement.owner(m, new)
            if target_owner != pod:
                moves.append((m, pod, target_owner))
            if placement.owner(m, old) != target_owner:
                predicted += 1
    return moves, predicted


def move(model: str, src: Client, dst: Client) -> str:
    """Export, import, verify, delete. Returns "moved" or "already there" (then only deleted)."""
    before = src.describe(model, state_digest=True)
    data = src.export_model(model)
    outcome = "moved"
    try:
        there = dst.describe(model, state_digest=True)
    except CmestreamError as e:
        if e.code != grpc.StatusCode.NOT_FOUND:
            raise
        there = None
    if there is not None:
        if there.state_digest != before.state_digest or there.samples != before.samples:
            raise RuntimeError(f"model '{model}': the new owner already holds a different copy "
                               f"(digest {there.state_digest:#x}, {there.samples} samples; source "
                               f"{before.state_digest:#x}, {before.samples}): resolve by hand")
        outcome = "already there"
    else:
        dst.import_model(data, model)
    after = dst.describe(model, state_digest=True)
    again = src.describe(model, state_digest=True)
    if not (after.state_digest == before.state_digest == again.state_digest
            and after.samples == before.samples == again.samples):
        raise RuntimeError(
            f"model '{model}': verification failed (source digest {before.state_digest:#x} -> "
            f"{again.state_digest:#x}, samples {before.samples} -> {again.samples}; copy "
            f"{after.state_digest:#x}, {after.samples}): the source changed during the move or "
            f"the copy differs; the source was kept")
    src.delete_model(model)
    return outcome


def rebalance(old: Dict[str, str], new: Dict[str, str], dry_run: bool = False,
              log=print, **client_options) -> dict:
    """Moves every model held by a pod of `old` or `new` onto its owner under `new`. Returns
    {"moves": [[model, from, to], ...], "predicted": P, "kept": K, "done": [...]}."""
    targets = dict(old)
    targets.update(new)  # a pod in both lists is reached at its new address
    clients = {p: Client(t, ignore_placement=True, **client_options) for p, t in targets.items()}
    try:
        holdings = {p: [i.config.name for i in c.list_models()] for p, c in clients.items()}
        moves, predicted = plan(holdings, old, new)
        total = sum(len(v) for v in holdings.values())
        report = {"models": total, "moves": [list(m) for m in moves], "predicted": predicted,
                  "kept": total - len(moves), "done": []}
        log(f"rebalance: {total} models on {len(holdings)} pods; {len(moves)} to move "
            f"(placement predicts {predicted}), {total - len(moves)} stay")
        for model, src, dst in moves:
            if dry_run:
                log(f"  would move {model}: {src} -> {dst}")
                continue
            outcome = move(model, clients[src], clients[dst])
            report["done"].append([model, src, dst, outcome])
            log(f"  {model}: {src} -> {dst} ({outcome}, verified)")
        return report
    finally:
        for c in clients.values():
            c.close()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m cmestream.rebalance",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--from-servers", required=True, help="the pod list before: ID=HOST:PORT,...")
    ap.add_argument("--to-servers", required=True, help="the pod list after: ID=HOST:PORT,...")
    ap.add_argument("--dry-run", action="store_true", help="print the moves, change nothing")
    ap.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    ap.add_argument("--token-file", help="bearer token (first line), admin scope")
    ap.add_argument("--tls-ca")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args(argv)
    try:
        old, new = parse_pods(a.from_servers), parse_pods(a.to_servers)
    except ValueError as e:
        print(f"rebalance: {e}", file=sys.stderr)
        return 2
    options = {"timeout": a.timeout, "tls_ca": a.tls_ca, "tls_cert": a.tls_cert,
               "tls_key": a.tls_key}
    if a.token_file:
        with open(a.token_file) as f:
            options["token"] = f.readline().strip()
    log = (lambda *x: print(*x, file=sys.stderr)) if a.json else print
    try:
        report = rebalance(old, new, a.dry_run, log=log, **options)
    except (CmestreamError, RuntimeError) as e:
        print(f"rebalance: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
