#!/usr/bin/python3
"""Duffing demo picture: what a cmestreamd model learned from a stream of Duffing transitions.

Queries the model's leading Koopman eigenfunctions on a grid over [-2,2]^2 and its dictionary,
labels each grid point by the nearest attractor (+-1, 0) in the space of the two leading
eigenfunctions (docs/algorithms.md §1.9-1.10), compares with the true basins from long integration
(`cmestream simulate duffing-grid`) and writes a PNG. Prints the basin accuracy.

usage: duffing_demo.py --server HOST:PORT --model NAME --cli PATH/cmestream --out FILE.png
"""
import argparse
import subprocess
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from cmestream import Client  # noqa: E402
from cmestream.basins import classify_basins  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default="127.0.0.1:50051")
    ap.add_argument("--model", default="duffing")
    ap.add_argument("--cli", default="cmestream", help="path of the cmestream tool")
    ap.add_argument("--n-side", type=int, default=81)
    ap.add_argument("--out", default="duffing_koopman.png")
    a = ap.parse_args()

    grid_csv = subprocess.run([a.cli, "simulate", "duffing-grid", "--n-side", str(a.n_side)],
                              capture_output=True, text=True, check=True).stdout
    grid = np.loadtxt(grid_csv.splitlines(), delimiter=",")
    points, truth = grid[:, :2], grid[:, 2]
    k = a.n_side

    with Client(a.server) as c:
        info = c.describe(a.model)
        labels, kr = classify_basins(c, a.model, points, top=6)
        atoms, _, sigma = c.dictionary(a.model)
    accuracy = float(np.mean(labels == truth))
    ef = kr.eigenfunctions[:points.shape[0]]  # (n, k): one row per grid point
    mu = kr.eigenvalues

    extent = (-2, 2, -2, 2)
    img = lambda v: np.asarray(v).reshape(k, k)  # rows: x2 ascending, cols: x1 ascending
    fig, axes = plt.subplots(2, 3, figsize=(15, 9.5))
    panels = [(np.real(ef[:, 0]), f"Re g_0   mu_0 = {mu[0].real:.4f}{mu[0].imag:+.4f}i"),
              (np.real(ef[:, 1]), f"Re g_1   mu_1 = {mu[1].real:.4f}{mu[1].imag:+.4f}i"),
              (np.abs(ef[:, 2]), f"|g_2|   mu_2 = {mu[2].real:.4f}{mu[2].imag:+.4f}i")]
    for ax, (v, title) in zip(axes[0], panels):
        im = ax.imshow(img(v), origin="lower", extent=extent, cmap="viridis", aspect="equal")
        ax.scatter(atoms[:, 0], atoms[:, 1], s=6, c="white", edgecolors="black", linewidths=0.3,
                   label=f"{atoms.shape[0]} dictionary atoms")
        ax.set_title(title)
        ax.set_xlabel("x")
        ax.set_ylabel("x'")
        fig.colorbar(im, ax=ax, shrink=0.8)
    axes[0][0].legend(loc="lower left", fontsize=8)
    cmap = matplotlib.colors.ListedColormap(["#3b6fb6", "#e8a33d"])
    for ax, v, title in ((axes[1][0], labels, "basins from the eigenfunctions"),
                         (axes[1][1], truth, "true basins (integration)")):
        ax.imshow(img(v), origin="lower", extent=extent, cmap=cmap, vmin=-1, vmax=1,
                  aspect="equal")
        ax.plot([1, -1], [0, 0], "k*", markersize=12)
        ax.set_title(title)
        ax.set_xlabel("x")
        ax.set_ylabel("x'")
    wrong = img(labels != truth)
    axes[1][2].imshow(wrong, origin="lower", extent=extent, cmap="Greys", aspect="equal")
    axes[1][2].set_title(f"misclassified grid points ({int(wrong.sum())} of {wrong.size})")
    axes[1][2].set_xlabel("x")
    ts = ", ".join("inf" if not np.isfinite(t) else f"{t:.2f}" for t in kr.timescales[:4])
    sel = info.sigma_selection
    how = (f"auto (median distance {sel.median_distance:.2f})" if sel.automatic else "fixed")
    fig.suptitle(f"Duffing, compressed online CME: basin accuracy {accuracy:.3f}   |   "
                 f"{info.samples} samples, {info.dictionary_size} atoms, sigma {sigma:.3g} {how}"
                 f"\nleading timescales (s): {ts}", fontsize=12)
    fig.tight_layout()
    fig.savefig(a.out, dpi=90)
    print(f"basin accuracy {accuracy:.4f} on a {k}x{k} grid over [-2,2]^2 "
          f"({info.samples} samples, {info.dictionary_size} atoms, sigma {sigma:.4g} {how})")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
