"""ShardedClient: one client over several cmestreamd pods, each model on its owner pod.

    pods = {"cmestreamd-0": "cmestreamd-0.cmestreamd-headless:50051",
            "cmestreamd-1": "cmestreamd-1.cmestreamd-headless:50051",
            "cmestreamd-2": "cmestreamd-2.cmestreamd-headless:50051"}
    with cmestream.ShardedClient(pods) as c:
        m = c.create("duffing", dim=2)      # created on placement.owner("duffing", pods)
        m.ingest(x, y)                      # every call of the model goes to that pod

Placement is client-side rendezvous hashing of the model name over the pod identities
(cmestream.placement): every client given the same identities sends a model's calls to the
same pod. Daemons started with --shard-self/--shard-peers know the placement too: a call for a
model another pod owns answers FAILED_PRECONDITION naming the owner (trailer
`cmestream-owner: ID=HOST:PORT`), and ShardedClient follows it once (then the error stands).
So a client whose pod list is stale still reaches the owner. Changing the pod set moves only
the models whose owner changed: `python3 -m cmestream.rebalance` (service/README.md
"Several pods").
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Union

import grpc

from . import placement
from .client import Client, CmestreamError
from .model import Model

# Client methods whose first argument is the model name: routed to the owner pod.
_ROUTED = ("create_model", "describe", "delete_model", "export_model", "producer_offset", "ingest_pairs",
           "ingest_trajectory", "ingest_ids", "ingest_state_ids", "refresh", "koopman",
           "predict", "dictionary", "counts", "embedding", "clusters", "aggregation", "latent",
           "forecast", "forecast_series", "timescales", "cktest")


class ShardedClient:
    """Clients of several daemons. `pods` maps pod identities to targets, or is a list of
    targets (then each target is its own identity). Keyword arguments go to every Client."""

    def __init__(self, pods: Union[Mapping[str, str], Sequence[str]], **client_options):
        if isinstance(pods, str):
            pods = [t for t in pods.split(",") if t]
        if not isinstance(pods, Mapping):
            pods = {t: t for t in pods}
        if not pods:
            raise ValueError("pods: expected at least one pod")
        self.pods: Dict[str, str] = dict(pods)
        self._options = client_options
        self.clients: Dict[str, Client] = {i: Client(t, **client_options)
                                           for i, t in self.pods.items()}
        self._redirects: Dict[str, Client] = {}  # target -> Client, for owners not in `pods`
        self.redirects_followed = 0  # how many calls a daemon sent elsewhere (stale pod list)

    def owner(self, model: str) -> str:
        """The identity of the pod that holds `model`."""
        return placement.owner(model, self.pods)

    def client_for(self, model: str) -> Client:
        """The Client of the pod that holds `model`."""
        return self.clients[self.owner(model)]

    def _client_at(self, pod: str, target: str) -> Client:
        if self.pods.get(pod) == target:
            return self.clients[pod]
        if target not in self._redirects:
            self._redirects[target] = Client(target, **self._options)
        return self._redirects[target]

    def _routed(self, model: str, call):
        """call(client) on the owner's client; a daemon's redirect to another owner is followed
        once (a second refusal is raised)."""
        try:
            return call(self.client_for(model))
        except CmestreamError as e:
            if e.code != grpc.StatusCode.FAILED_PRECONDITION or e.owner is None:
                raise
            self.redirects_followed += 1
            return call(self._client_at(*e.owner))

    def __getattr__(self, attr):
        if attr in _ROUTED:
            return lambda model, *args, **kwargs: self._routed(
                model, lambda c: getattr(c, attr)(model, *args, **kwargs))
        raise AttributeError(attr)

    def import_model(self, data: bytes, name: str):
        """Imports exported bytes as `name` on its owner."""
        return self._routed(name, lambda c: c.import_model(data, name))

    def create(self, name: str, dim: int = 0, sigma=None, **config) -> Model:
        """Creates the model on its owner pod; returns its Model handle."""
        return Model(self, name, self.create_model(name, dim=dim, sigma=sigma, **config))

    def model(self, name: str) -> Model:
        return Model(self, name, self.describe(name))

    def list_models(self) -> List:
        """ModelInfo of every model of every pod."""
        return [m for c in self.clients.values() for m in c.list_models()]

    def close(self) -> None:
        for c in list(self.clients.values()) + list(self._redirects.values()):
            c.close()

    def __enter__(self) -> "ShardedClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
