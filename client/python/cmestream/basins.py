"""Basins of attraction from Koopman eigenfunctions (docs/algorithms.md §1.10, paper 004 sec. 5).

Duffing's eigenvalue 1 is (nearly) double: the constant function and the basin indicator mix,
so the sign of one eigenfunction is not a reliable basin rule. What works: map each point to the
values of the `count` leading eigenfunctions (real and imaginary parts) and give it the label of
the nearest known attractor in that feature space.
"""
from __future__ import annotations

import numpy as np


def eigenfunction_features(eigenfunctions: np.ndarray, count: int = 2) -> np.ndarray:
    """(k, n) complex eigenfunction values -> (n, 2*count) real features [Re g_0, Im g_0, ...]."""
    g = np.asarray(eigenfunctions)[:count]
    return np.concatenate([g.real, g.imag], axis=0).T


def nearest_attractor(features: np.ndarray, attractor_features: np.ndarray,
                      attractor_labels) -> np.ndarray:
    """Label of the nearest attractor (rows of attractor_features) for each row of features."""
    d = ((features[:, None, :] - attractor_features[None, :, :]) ** 2).sum(axis=2)
    return np.asarray(attractor_labels)[np.argmin(d, axis=1)]


def classify_basins(client, model: str, points, attractors=((1.0, 0.0), (-1.0, 0.0)),
                    attractor_labels=(1, -1), count: int = 2, top: int = 6):
    """Queries the model's eigenfunctions at `points` and at the attractors; returns
    (labels per point, KoopmanResult of the query; its eigenfunctions cover points+attractors)."""
    points = np.asarray(points, dtype=np.float64)
    attractors = np.asarray(attractors, dtype=np.float64)
    k = client.koopman(model, points=np.vstack([points, attractors]), top=max(top, count))
    f = eigenfunction_features(k.eigenfunctions, count)
    n = points.shape[0]
    return nearest_attractor(f[:n], f[n:], attractor_labels), k
