"""ShardedClient: one client over several cmestreamd pods, each model on its owner pod.

    pods = {"cmestreamd-0": "cmestreamd-0.cmestreamd-headless:50051",
            "cmestreamd-1": "cmestreamd-1.cmestreamd-headless:50051",
            "cmestreamd-2": "cmestreamd-2.cmestreamd-headless:50051"}
    with cmestream.ShardedClient(pods) as c:
        m = c.create("duffing", dim=2)      # created on placement.owner("duffing", pods)
        m.ingest(x, y)                      # every call of the model goes to that pod

Placement is client-side rendezvous hashing of the model name over the pod identities
(cmestream.placement): every client given the same identities sends a model's calls to the
same pod. The daemons do not know about each other (a call sent to another pod answers
NOT_FOUND). Changing the pod set moves only the models whose owner changed; move them with
export/import (docs/user-guide.md "Several pods").
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Union

from . import placement
from .client import Client
from .model import Model

# Client methods whose first argument is the model name: routed to the owner pod.
_ROUTED = ("create_model", "describe", "delete_model", "producer_offset", "ingest_pairs",
           "ingest_trajectory", "ingest_ids", "ingest_state_ids", "refresh", "koopman",
           "predict", "dictionary", "counts", "embedding", "clusters", "aggregation", "latent",
           "forecast")


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
        self.clients: Dict[str, Client] = {i: Client(t, **client_options)
                                           for i, t in self.pods.items()}

    def owner(self, model: str) -> str:
        """The identity of the pod that holds `model`."""
        return placement.owner(model, self.pods)

    def client_for(self, model: str) -> Client:
        """The Client of the pod that holds `model`."""
        return self.clients[self.owner(model)]

    def __getattr__(self, attr):
        if attr in _ROUTED:
            return lambda model, *args, **kwargs: getattr(self.client_for(model), attr)(
                model, *args, **kwargs)
        raise AttributeError(attr)

    def create(self, name: str, dim: int = 0, sigma=None, **config) -> Model:
        """Creates the model on its owner pod; returns its Model handle."""
        return Model(self, name, self.create_model(name, dim=dim, sigma=sigma, **config))

    def model(self, name: str) -> Model:
        return Model(self, name, self.describe(name))

    def list_models(self) -> List:
        """ModelInfo of every model of every pod."""
        return [m for c in self.clients.values() for m in c.list_models()]

    def close(self) -> None:
        for c in self.clients.values():
            c.close()

    def __enter__(self) -> "ShardedClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
