#!/usr/bin/python3
"""Plain pair-at-a-time numpy implementation of the compressed online CME recursion
(docs/algorithms.md §1: one-sided admission, relative jitter, dictionary cap with forced
projections, drift check on a sample-count schedule), used as the baseline that
docs/benchmarks.md divides the C++ figures by.

It does what tests/bench/bench_cme.cc does, on the same data: fill the dictionary to exactly
m atoms per side (max_dict = m, epsilon 1e-7, sigma 0.1), then time pairs at the cap (each one a
forced projection: the full O(m^2) per-pair work). Prints pairs per CPU second per m
(and wall time per pair), single-threaded BLAS.

Same data as the C++ benchmark (SimulateDuffing(40000, seed 1)):
    build/client/cli/cmestream simulate duffing --n 40000 --seed 1 > /tmp/duffing.csv
    /usr/bin/python3 scripts/cme_numpy_baseline.py --pairs /tmp/duffing.csv --m 160 500 1000
Without --pairs the script simulates the same Duffing system itself (RK4, uniform starts in
[-2,2]^2, dt 0.25) with numpy's generator: other points, the same per-pair work at the cap.
"""
import argparse
import os
import sys
import time

# One core, like the C++ learner (a model's learning is single-threaded): no BLAS threads.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402


def duffing(n, seed, dt=0.25, substeps=10, box=2.0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-box, box, size=(n, 2))

    def rhs(s):
        return np.stack([s[:, 1], -0.5 * s[:, 1] - s[:, 0] * (-1.0 + s[:, 0] ** 2)], axis=1)

    s = x.copy()
    h = dt / substeps
    for _ in range(substeps):
        k1 = rhs(s)
        k2 = rhs(s + 0.5 * h * k1)
        k3 = rhs(s + 0.5 * h * k2)
        k4 = rhs(s + h * k3)
        s = s + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)
    return x, s


class NumpyCme:
    """The recursion with capacity-sized arrays (like the C++ learner before batching)."""

    def __init__(self, dim, sigma, eta, lam, eps, max_dict, jitter=1e-6, drift_tol=1e-3, drift_every=1000):
        self.d, self.sigma, self.eta, self.lam, self.eps, self.cap = dim, sigma, eta, lam, eps, max_dict
        self.gamma, self.drift_tol, self.drift_every = jitter, drift_tol, drift_every
        c = max_dict
        self.X = np.zeros((c, dim)); self.Y = np.zeros((c, dim))
        self.W = np.zeros((c, c)); self.Gx = np.zeros((c, c)); self.Gy = np.zeros((c, c))
        self.Gxi = np.zeros((c, c)); self.Gyi = np.zeros((c, c))
        self.mx = self.my = 0
        self.samples = 0
        self.since_check = 0
        self.forced = 0

    def k(self, atoms, p):
        diff = atoms - p
        return np.exp(-np.einsum("ij,ij->i", diff, diff) / (2 * self.sigma ** 2))

    @staticmethod
    def grow(G, Gi, m, kn, c, delta):
        G[:m, m] = kn; G[m, :m] = kn; G[m, m] = 1.0
        Gi[:m, :m] += np.outer(c, c) / delta
        Gi[:m, m] = -c / delta; Gi[m, :m] = -c / delta; Gi[m, m] = 1.0 / delta

    def observe(self, x, y):
        mx, my, eta, g = self.mx, self.my, self.eta, self.gamma
        decay = 1.0 - eta * self.lam
        kx = self.k(self.X[:mx], x); ky = self.k(self.Y[:my], y)
        W = self.W[:my, :mx]
        a = W @ kx
        b = self.Gyi[:my, :my] @ ky
        c = self.Gxi[:mx, :mx] @ kx
        pv = kx @ c
        dx = max(0.0, 1.0 - pv); dy = max(0.0, 1.0 - ky @ b)
        amb = a - b
        pu = max(0.0, amb @ (self.Gy[:my, :my] @ amb))
        choice = self.decide(pv, dx, dy, pu)
        if choice == "c":
            W *= decay
            W -= eta * np.outer(amb, c)
        elif choice == "y":
            W *= decay
            W -= eta * np.outer(a, c)
            self.W[my, :mx] = eta * c
        elif choice == "x":
            W *= decay
            self.W[:my, mx] = -eta * amb
        else:
            W *= decay
            self.W[:my, mx] = -eta * a
            self.W[my, :mx] = 0.0
            self.W[my, mx] = eta
        if choice in "yb":
            self.Y[my] = y
            self.grow(self.Gy, self.Gyi, my, ky, b, dy + g)
            self.my += 1
        if choice in "xb":
            self.X[mx] = x
            self.grow(self.Gx, self.Gxi, mx, kx, c, dx + g)
            self.mx += 1
        return self.after_pair(kx, mx, y)

    def decide(self, pv, dx, dy, pu):
        """Compress ("c") or admit y, x or both (docs/algorithms.md §1.4-1.6); counts forced steps."""
        mx, my, g, e2 = self.mx, self.my, self.gamma, self.eta * self.eta
        err2 = e2 * (pu * dx + dy * pv + dx * dy)
        must = mx == 0 or my == 0
        if not (err2 > self.eps ** 2 or must):
            return "c"
        can_y = my < self.cap and dy > g
        can_x = mx < self.cap and dx > g
        ey = e2 * (pu + dy) * dx; ex = e2 * dy * (pv + dx)
        eps2 = self.eps ** 2
        if not must and can_y and ey <= eps2 and (not can_x or ex > eps2 or ey <= ex):
            return "y"
        if not must and can_x and ex <= eps2:
            return "x"
        if can_x and can_y:
            return "b"
        self.forced += 1
        choice, r = "c", err2
        if can_y and ey <= r:
            choice, r = "y", ey
        if can_x and ex < r:
            choice = "x"
        return choice

    def after_pair(self, kx, mx, y):
        """Counts the pair, finds the nearest X atoms of x and y (the daemon's transition counts
        need them) and runs the drift check on its sample-count schedule."""
        self.samples += 1
        nx = int(np.argmax(kx)) if mx > 0 else -1
        ny = int(np.argmax(self.k(self.X[:self.mx], y))) if self.mx > 0 else -1
        self.since_check += 1
        if self.since_check >= max(self.drift_every, self.mx + self.my):
            self.since_check = 0
            self.check_drift()
        return nx, ny

    def check_drift(self):
        worst = 0.0
        for G, Gi, m in ((self.Gx, self.Gxi, self.mx), (self.Gy, self.Gyi, self.my)):
            if m:
                r = (G[:m, :m] + self.gamma * np.eye(m)) @ Gi[:m, :m] - np.eye(m)
                worst = max(worst, np.linalg.norm(r))
        if worst > self.drift_tol:
            for G, Gi, m in ((self.Gx, self.Gxi, self.mx), (self.Gy, self.Gyi, self.my)):
                if m:
                    Gi[:m, :m] = np.linalg.inv(G[:m, :m] + self.gamma * np.eye(m))


class NumpyCmeWhitened(NumpyCme):
    """The same recursion in whitened bases, as the C++ learner computes it (docs/algorithms.md
    §1.3.1): W~ = L_Y^T W L_X and the inverse Cholesky factors R = L^-1 instead of W and the Gram
    inverses; numpy has no triangular matrix-vector product, so R @ k is a full m^2 GEMV here
    (4 m^2 per pair instead of 5)."""

    def observe(self, x, y):
        mx, my, eta, g = self.mx, self.my, self.eta, self.gamma
        decay = 1.0 - eta * self.lam
        Rx, Ry = self.Gxi, self.Gyi  # the buffers hold R_X, R_Y here
        kx = self.k(self.X[:mx], x); ky = self.k(self.Y[:my], y)
        W = self.W[:my, :mx]
        s = Rx[:mx, :mx] @ kx
        t = Ry[:my, :my] @ ky
        r = W @ s - t
        pv = s @ s
        dx = max(0.0, 1.0 - pv); dy = max(0.0, 1.0 - t @ t)
        pu = r @ r
        choice = self.decide(pv, dx, dy, pu)
        W *= decay
        W -= eta * np.outer(r, s)
        lx = np.sqrt(dx + g) if choice in "xb" else 0.0
        ly = np.sqrt(dy + g) if choice in "yb" else 0.0
        if choice in "xb":
            self.W[:my, mx] = -eta * lx * r
            c = Rx[:mx, :mx].T @ s
            self.X[mx] = x
            self.Gx[:mx, mx] = kx; self.Gx[mx, :mx] = kx; self.Gx[mx, mx] = 1.0
            Rx[mx, :mx] = -c / lx; Rx[mx, mx] = 1.0 / lx
            self.mx += 1
        if choice in "yb":
            self.W[my, :mx] = eta * ly * s
            if choice == "b":
                self.W[my, mx] = eta * lx * ly
            c = Ry[:my, :my].T @ t
            self.Y[my] = y
            self.Gy[:my, my] = ky; self.Gy[my, :my] = ky; self.Gy[my, my] = 1.0
            Ry[my, :my] = -c / ly; Ry[my, my] = 1.0 / ly
            self.my += 1
        return self.after_pair(kx, mx, y)

    def check_drift(self):
        # Exact ||R (G + gamma I) R^T - I||_F (the C++ learner estimates it from probes); on drift,
        # re-factorize and re-express W~ in the new bases.
        worst = 0.0
        for G, R, m in ((self.Gx, self.Gxi, self.mx), (self.Gy, self.Gyi, self.my)):
            if m:
                e = R[:m, :m] @ (G[:m, :m] + self.gamma * np.eye(m)) @ R[:m, :m].T - np.eye(m)
                worst = max(worst, np.linalg.norm(e))
        if worst > self.drift_tol:
            mx, my = self.mx, self.my
            w = self.Gyi[:my, :my].T @ self.W[:my, :mx] @ self.Gxi[:mx, :mx]
            lx = np.linalg.cholesky(self.Gx[:mx, :mx] + self.gamma * np.eye(mx))
            ly = np.linalg.cholesky(self.Gy[:my, :my] + self.gamma * np.eye(my))
            self.W[:my, :mx] = ly.T @ w @ lx
            self.Gxi[:mx, :mx] = np.linalg.inv(lx)
            self.Gyi[:my, :my] = np.linalg.inv(ly)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", help="CSV x1,x2,y1,y2 ('#' header), e.g. from `cmestream simulate duffing`")
    ap.add_argument("--m", type=int, nargs="+", default=[160, 500, 1000], help="dictionary sizes (atoms per side)")
    ap.add_argument("--timed", type=int, default=0, help="timed pairs per m (default: about 2 s worth)")
    ap.add_argument("--stream", type=float, metavar="SIGMA",
                    help="instead: learn every pair of --pairs once, in order, with a daemon model's defaults "
                         "(this sigma, eta 0.1, lambda 1e-3, epsilon 1e-3, max_dict 1000), i.e. the CME "
                         "recursion of `cmestream model create --sigma SIGMA` on the same data")
    ap.add_argument("--whitened", action="store_true",
                    help="the recursion in whitened bases, as the C++ learner computes it (docs/algorithms.md §1.3.1)")
    args = ap.parse_args()
    impl = NumpyCmeWhitened if args.whitened else NumpyCme
    if args.stream is not None:
        if not args.pairs:
            ap.error("--stream needs --pairs")
        data = np.loadtxt(args.pairs, delimiter=",", comments="#")
        xs, ys = data[:, :2].copy(), data[:, 2:4].copy()
        cme = impl(xs.shape[1], sigma=args.stream, eta=0.1, lam=1e-3, eps=1e-3, max_dict=1000)
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(len(xs)):
            cme.observe(xs[i], ys[i])
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        variant = "whitened bases" if args.whitened else "explicit Gram inverses"
        print(f"# numpy {np.__version__}, data: {args.pairs}, sigma {args.stream}, CME recursion only ({variant})")
        print("pairs,cpu_s,wall_s,pairs_per_cpu_s,m_x,m_y")
        print(f"{len(xs)},{cpu:.3f},{wall:.3f},{len(xs) / cpu:.1f},{cme.mx},{cme.my}")
        return
    if args.pairs:
        data = np.loadtxt(args.pairs, delimiter=",", comments="#")
        xs, ys = data[:, :2].copy(), data[:, 2:4].copy()
        source = args.pairs
    else:
        xs, ys = duffing(40000, 1)
        source = "numpy Duffing (40000 pairs, seed 1)"
    n = len(xs)
    print(f"# numpy {np.__version__}, data: {source}")
    print("m,pairs_per_cpu_s,cpu_us_per_pair,wall_us_per_pair,timed_pairs,m_x,m_y")
    for m in args.m:
        cme = impl(2, sigma=0.1, eta=0.1, lam=1e-3, eps=1e-7, max_dict=m)
        i = 0
        while (cme.mx < m or cme.my < m) and cme.samples < 200 * n:
            cme.observe(xs[i], ys[i]); i = (i + 1) % n
        timed = args.timed or max(200, int(4e8 / (m * m)))
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(timed):
            cme.observe(xs[i], ys[i]); i = (i + 1) % n
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        # CPU time, like Google Benchmark's CPU column (the machine may be shared).
        print(f"{m},{timed / cpu:.1f},{1e6 * cpu / timed:.2f},{1e6 * wall / timed:.2f},{timed},{cme.mx},{cme.my}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
