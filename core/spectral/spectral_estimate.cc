// Consistent Koopman spectrum from streaming moments (see spectral_estimate.h).
#include "core/spectral/spectral_estimate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <limits>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/linalg/leading_eigen.h"
#include "core/linalg/symmetric.h"

namespace cmestream {
namespace {

// C + r R with R = diag(0, 1, ..., 1): the constant feature (index 0) is never regularized.
MatrixXd Ridged(const MatrixXd& c, double r) {
  MatrixXd out = c;
  out.diagonal().tail(out.rows() - 1).array() += r;
  return out;
}

struct Normalized {
  MatrixXd c00, c01, c11;
};

Normalized Fold(const SpectralEpochMoments& m, int f) {
  const double inv = 1.0 / m.n[f];
  return {m.c00[f] * inv, m.c01[f] * inv, m.c11[f] * inv};
}

// Both folds pooled; reversible: symmetrized (C00 + C11)/2 and (C01 + C01^T)/2.
Normalized Pooled(const SpectralEpochMoments& m, bool reversible) {
  const double inv = 1.0 / m.total_weight();
  Normalized p{(m.c00[0] + m.c00[1]) * inv, (m.c01[0] + m.c01[1]) * inv, (m.c11[0] + m.c11[1]) * inv};
  if (reversible) {
    const MatrixXd s00 = 0.5 * (p.c00 + p.c11);
    const MatrixXd s01 = 0.5 * (p.c01 + p.c01.transpose());
    p = {s00, s01, s00};
  }
  return p;
}

// Floor for whitening: relative to the largest eigenvalue (the constant's, ~1), far below any
// ridge of the grid, so it only guards exact zeros.
double WhiteningFloor(const MatrixXd& c) { return 1e-14 * std::max(1.0, c.diagonal().maxCoeff()); }

}  // namespace

absl::Status SpectralFitOptions::Validate() const {
  if (top < 1) return absl::InvalidArgumentError(absl::StrCat("Violated constraint: top >= 1 (got ", top, ")"));
  if (!(dt > 0) || !std::isfinite(dt))
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: dt > 0 (got ", dt, ")"));
  if (ridge_grid.empty()) return absl::InvalidArgumentError("Violated constraint: ridge_grid non-empty");
  for (double r : ridge_grid) {
    if (!(r > 0) || !std::isfinite(r)) {
      return absl::InvalidArgumentError(absl::StrCat("Violated constraint: every ridge_grid entry > 0 (got ", r, ")"));
    }
  }
  if (score_rank < 1)
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: score_rank >= 1 (got ", score_rank, ")"));
  if (!(score_tolerance >= 0) || !std::isfinite(score_tolerance)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Violated constraint: score_tolerance >= 0 (got ", score_tolerance, ")"));
  }
  if (!(min_share >= 0 && min_share <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: 0 <= min_share <= 1 (got ", min_share, ")"));
  }
  if (!(unit_circle_tolerance >= 0)) {
    return absl::InvalidArgumentError("Violated constraint: unit_circle_tolerance >= 0");
  }
  return absl::OkStatus();
}

VampFactors FitVampFactors(const MatrixXd& c00, const MatrixXd& c01, const MatrixXd& c11, double ridge, int rank) {
  const MatrixXd r00 = Ridged(c00, ridge), r11 = Ridged(c11, ridge);
  // Whitening by Cholesky factors R00 = L0 L0^T, R11 = L1 L1^T: L0^{-1} C01 L1^{-T} differs from
  // the symmetric R00^{-1/2} C01 R11^{-1/2} by orthogonal factors on both sides, so it has the
  // same singular values and L0^{-T} u, L1^{-T} v are the same singular functions as
  // R00^{-1/2} u, R11^{-1/2} v (equal up to rounding; the sign of a pair is free either way).
  // Each factorization costs p^3/3 instead of a symmetric eigendecomposition; C + r R is
  // positive definite for r > 0 (the unregularized constant has C(0,0) = 1). If a factorization
  // still fails numerically, the floored inverse square roots below are used.
  // Only the k leading right singular vectors V of W = L0^{-1} C01 L1^{-T} are needed, and
  // U S = W V: they are the top eigenvectors of W^T W (LeadingGramEigenvectors: truncated
  // Lanczos for large bases, the dense symmetric solver for small ones and heavy spectra; the
  // dense one took a third of BDCSVD's time at p = 191). Squaring limits the accuracy of sigma_i
  // to eps sigma_1^2 / sigma_i, immaterial for the leading k that VAMP keeps (sigma near 1 on
  // the chosen ridges). docs/benchmarks.md "Refresh cost per view" and "Truncated eigensolvers".
  const Eigen::LLT<MatrixXd> f0(r00), f1(r11);
  if (f0.info() == Eigen::Success && f1.info() == Eigen::Success) {
    MatrixXd w = f0.matrixL().solve(c01);               // L0^{-1} C01
    w = f1.matrixL().solve(w.transpose()).transpose();  // ... L1^{-T}
    const int k = std::min<int>(rank, static_cast<int>(w.cols()));
    const MatrixXd v = LeadingGramEigenvectors(w, k);  // descending sigma
    VampFactors f;
    f.su = f0.matrixU().solve(w * v);
    f.v = f1.matrixU().solve(v);
    return f;
  }
  const MatrixXd l0 = InverseSqrtPsd(r00, WhiteningFloor(r00)), l1 = InverseSqrtPsd(r11, WhiteningFloor(r11));
  Eigen::BDCSVD<MatrixXd> svd(l0 * c01 * l1, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const int k = std::min<int>(rank, static_cast<int>(svd.singularValues().size()));
  VampFactors f;
  // Singular functions f = psi^T u (weighted by S) and g = psi^T v of the training moments.
  f.su = l0 * svd.matrixU().leftCols(k) * svd.singularValues().head(k).asDiagonal();
  f.v = l1 * svd.matrixV().leftCols(k);
  return f;
}

double VampEScore(const VampFactors& f, const MatrixXd& t00, const MatrixXd& t01, const MatrixXd& t11) {
  // VAMP-E (Wu & Noe 2020): tr(2 S U^T C01t V - S U^T C00t U S V^T C11t V).
  const MatrixXd a = f.su.transpose() * t01 * f.v;   // S U^T C01t V
  const MatrixXd b = f.su.transpose() * t00 * f.su;  // S U^T C00t U S
  const MatrixXd c = f.v.transpose() * t11 * f.v;    // V^T C11t V
  return 2 * a.trace() - (b * c).trace();
}

double HeldOutVampE(const MatrixXd& c00, const MatrixXd& c01, const MatrixXd& c11, const MatrixXd& t00,
                    const MatrixXd& t01, const MatrixXd& t11, double ridge, int rank) {
  return VampEScore(FitVampFactors(c00, c01, c11, ridge, rank), t00, t01, t11);
}

double SpectralFit::SlowestTimescale() const {
  for (Eigen::Index l = 0; l < koopman.timescales.size(); ++l) {
    if (l != koopman.stationary_index) return koopman.timescales[l];
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::string SpectralFit::BriefReport() const {
  std::string scored;
  for (size_t i = 0; i < candidates.size(); ++i) {
    absl::StrAppend(&scored, i ? ", " : " (scores: ", candidates[i], " ", absl::StrFormat("%.6g", candidate_scores[i]),
                    i + 1 == candidates.size() ? ")" : "");
  }
  return absl::StrFormat(
      "epoch %d of %d (%s basis%s of %d atoms, %d samples = %.1f %% of the stream, weight %.6g%s): ridge %.3g, "
      "held-out VAMP-E %.6g (rank %d), slowest timescale %.6g; %s",
      epoch, epochs, basis_candidate, scored, koopman.x_atoms.rows(), samples, 100 * share, weight,
      ready ? "" : ", not ready", ridge, score, score_rank, SlowestTimescale(), message);
}

namespace {

// One candidate basis with its moments (true sums per fold) and the held-out split its ridge
// and its score come from.
struct Candidate {
  const char* name = "";
  int size = 0;               // atoms: the first `size` rows of the snapshot's basis
  SpectralEpochMoments sums;  // both folds, over [1, first `size` atoms]
  // Held-out split: score = mean over s of VAMP-E(fit on train[s], test on test[s]).
  std::array<Normalized, 2> train, test;
  bool ready = false;
};

// The top-left q x q blocks of the sums (the moments of the first q - 1 atoms' features).
SpectralEpochMoments Prefix(const SpectralEpochMoments& m, int q) {
  SpectralEpochMoments out = m;
  for (int f = 0; f < 2; ++f) {
    out.c00[f] = m.c00[f].topLeftCorner(q, q);
    out.c01[f] = m.c01[f].topLeftCorner(q, q);
    out.c11[f] = m.c11[f].topLeftCorner(q, q);
  }
  return out;
}

Normalized Scaled(const MatrixXd& c00, const MatrixXd& c01, const MatrixXd& c11, double n) {
  return {c00 / n, c01 / n, c11 / n};
}

// Ridge by the held-out VAMP-E score over the candidate's split. Returns false if no ridge of
// the grid gives a finite score.
bool ChooseRidge(const Candidate& c, const SpectralFitOptions& options, int rank, double& ridge, double& score,
                 std::vector<double>& scores) {
  double best = -std::numeric_limits<double>::infinity();
  scores.clear();
  for (double r : options.ridge_grid) {
    double s = 0;
    for (int k = 0; k < 2; ++k) {
      const Normalized& a = c.train[k];
      const Normalized& b = c.test[k];
      s += 0.5 * HeldOutVampE(a.c00, a.c01, a.c11, b.c00, b.c01, b.c11, r, rank);
    }
    scores.push_back(s);
    if (std::isfinite(s)) best = std::max(best, s);
  }
  if (!std::isfinite(best)) return false;
  // The largest ridge whose score is within score_tolerance (relative) of the best. VAMP-E
  // ranks singular functions; when it is flat across ridges (a deterministic map: every
  // singular value ~1, Duffing scores 5.9956..5.9964 over 1e-3..1e-7) it cannot see that
  // small ridges give noisy eigenvectors (Duffing at sigma 0.4: basins 0.49 at r = 1e-5,
  // 0.97 at 1e-3), so near-ties go to the smoother fit; the eigenvalues lose the ridge's
  // shrinkage in the Rayleigh-Ritz step anyway.
  const double tol = options.score_tolerance * std::max(1.0, std::abs(best));
  ridge = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (std::isfinite(scores[i]) && scores[i] >= best - tol && options.ridge_grid[i] > ridge) {
      ridge = options.ridge_grid[i];
      score = scores[i];
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<SpectralFit> FitSpectrum(const SpectralMomentsSnapshot& snap, const SpectralFitOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  SpectralFit fit;
  const SpectralEpochMoments& mom = snap.moments;
  fit.epoch = mom.epoch;
  fit.samples = mom.samples;
  fit.weight = mom.total_weight();
  fit.ready = snap.ready;
  fit.epochs = snap.live_epoch;
  fit.share = snap.samples > 0 ? static_cast<double>(mom.samples) / static_cast<double>(snap.samples) : 0.0;
  fit.koopman.x_atoms = snap.basis;
  fit.koopman.sigma = snap.sigma;
  fit.koopman.dt = options.dt;
  if (mom.epoch == 0 || mom.c00[0].size() == 0) {
    fit.message = "no epoch yet (the moments start with the first dictionary atoms)";
    return fit;
  }

  // 1. Candidates (spectral_moments.h, EPOCHS): "live" = the full basis over the live epoch;
  // "prefix" = the frozen prefix basis over the frozen pairs and the live epoch's. When both
  // are ready they are scored on the same held-out data, the live epoch's folds (the prefix
  // candidate trains on all frozen pairs plus the other live fold: more data, fewer atoms); a
  // lone candidate is scored on its own two folds.
  Candidate live;
  live.name = "live";
  live.size = static_cast<int>(snap.basis.rows());
  live.sums = mom;
  live.ready = snap.ready;
  const bool live_folds = mom.n[0] > 0 && mom.n[1] > 0;
  if (live_folds) {
    const Normalized a = Fold(mom, 0), b = Fold(mom, 1);
    live.train[0] = a, live.test[0] = b;
    live.train[1] = b, live.test[1] = a;
  }
  std::optional<Candidate> prefix;
  if (snap.has_frozen() && snap.prefix_size <= live.size && snap.frozen.c00[0].rows() == snap.prefix_size + 1) {
    Candidate c;
    c.name = "prefix";
    c.size = snap.prefix_size;
    const int q = c.size + 1;
    const SpectralEpochMoments lp = Prefix(mom, q);
    const SpectralEpochMoments& fr = snap.frozen;
    c.sums = fr;
    for (int f = 0; f < 2; ++f) {
      c.sums.c00[f] += lp.c00[f];
      c.sums.c01[f] += lp.c01[f];
      c.sums.c11[f] += lp.c11[f];
      c.sums.n[f] += lp.n[f];
      c.sums.fold_samples[f] += lp.fold_samples[f];
    }
    c.sums.samples = fr.samples + lp.samples;
    c.ready = c.sums.samples >= snap.min_epoch_samples && c.sums.n[0] > 0 && c.sums.n[1] > 0;
    if (live.ready) {
      // Same test data as the live candidate: train on every frozen pair + the other live fold.
      const MatrixXd f00 = fr.c00[0] + fr.c00[1], f01 = fr.c01[0] + fr.c01[1], f11 = fr.c11[0] + fr.c11[1];
      const double fn = fr.total_weight();
      for (int k = 0; k < 2; ++k) {
        const int tr = k, te = 1 - k;
        c.train[k] = Scaled(f00 + lp.c00[tr], f01 + lp.c01[tr], f11 + lp.c11[tr], fn + lp.n[tr]);
        c.test[k] = Fold(lp, te);
      }
    } else if (c.sums.n[0] > 0 && c.sums.n[1] > 0) {
      const Normalized a = Fold(c.sums, 0), b = Fold(c.sums, 1);
      c.train[0] = a, c.test[0] = b;
      c.train[1] = b, c.test[1] = a;
    }
    if (c.sums.n[0] > 0 && c.sums.n[1] > 0) prefix = std::move(c);
  }
  if (!live_folds && !prefix) {
    fit.message = absl::StrCat("epoch ", mom.epoch, " has ", mom.samples,
                               " samples: both held-out folds (contiguous blocks) need data");
    return fit;
  }
  // Which candidates compete: the ready ones (both when both are); if none is ready, the one
  // with more pairs (the prefix one includes the live pairs), with a not-ready warning below.
  std::vector<const Candidate*> compete;
  if (live.ready && live_folds) compete.push_back(&live);
  if (prefix && prefix->ready && (live.ready || compete.empty())) compete.push_back(&*prefix);
  if (compete.empty()) compete.push_back(prefix ? &*prefix : &live);
  // Share of the stream (spectral_moments.h, RE-BASE SCHEDULE): a candidate holding less than
  // min_share of the pairs competes only when no other ready one holds that much. Right after
  // a re-base the live epoch is young while the prefix candidate keeps >= 80 % of the stream;
  // a score on the young epoch's folds would trade most of the data for the newest atoms.
  const double all_pairs = static_cast<double>(std::max<int64_t>(1, snap.samples));
  const auto share_of = [&](const Candidate& c) { return static_cast<double>(c.sums.samples) / all_pairs; };
  if (compete.size() == 2 && share_of(*compete[0]) < options.min_share && share_of(*compete[1]) >= options.min_share) {
    compete.erase(compete.begin());
  }
  // A ready full basis holding min_share of the stream serves without a contest: the prefix
  // basis is the landmark set of an epoch five-fold younger, and the held-out score cannot see
  // what its missing atoms cost (four-well seed 6, 100k pairs: the 39-atom prefix on 99 % of
  // the pairs outscored the 46-atom live basis on 84 % by 0.7 % and missed the slowest
  // timescales by 8.0 % against 7.1 %).
  if (options.min_share > 0 && compete.size() == 2 && compete[0] == &live && share_of(live) >= options.min_share) {
    compete.pop_back();
  }

  const Candidate* chosen = nullptr;
  std::vector<double> chosen_scores;
  for (const Candidate* c : compete) {
    const int rank = std::min(options.score_rank, c->size + 1);
    double ridge = 0, score = 0;
    std::vector<double> scores;
    if (!ChooseRidge(*c, options, rank, ridge, score, scores)) continue;
    fit.candidates.emplace_back(c->name);
    fit.candidate_scores.push_back(score);
    // The prefix candidate (scored second) must beat the live one by more than
    // score_tolerance: near-ties keep the full basis, whose atoms cover the states visited
    // since the last restart (Duffing, sigma auto, seeds 7 / 9: basins 0.976 / 0.974 with the
    // 159-atom prefix against 0.982 / 0.979 with all 182 atoms at equal scores).
    const double tol = options.score_tolerance * std::max(1.0, std::abs(fit.score));
    const bool better = chosen == nullptr || score > fit.score + tol;
    if (better) {
      chosen = c;
      fit.ridge = ridge;
      fit.score = score;
      fit.score_rank = rank;
      chosen_scores = std::move(scores);
    }
  }
  if (chosen == nullptr) {
    fit.termination = SpectralFit::Termination::kNumericalFailure;
    fit.message = "the held-out score is not finite for any ridge of the grid";
    return fit;
  }
  fit.basis_candidate = chosen->name;
  fit.ridge_grid = options.ridge_grid;
  fit.ridge_scores = chosen_scores;
  fit.epoch = chosen->sums.epoch;
  fit.samples = chosen->sums.samples;
  fit.weight = chosen->sums.total_weight();
  fit.ready = chosen->ready;
  fit.share = share_of(*chosen);
  const int m = chosen->size;
  const int p = m + 1;
  if (m < fit.koopman.x_atoms.rows()) fit.koopman.x_atoms = snap.basis.topRows(m);

  // 2. K = (C00 + r R)^{-1} C01 on both folds (Cholesky: C00 + r R is positive definite).
  const Normalized pooled = Pooled(chosen->sums, options.reversible);
  // The rank-k VAMP model of the final fit: what the prequential score tests on new pairs.
  fit.vamp = FitVampFactors(pooled.c00, pooled.c01, pooled.c11, fit.ridge, fit.score_rank);
  Eigen::LLT<MatrixXd> llt(Ridged(pooled.c00, fit.ridge));
  if (llt.info() != Eigen::Success) {
    fit.termination = SpectralFit::Termination::kNumericalFailure;
    fit.message = absl::StrCat("Cholesky of C00 + r R failed (ridge ", fit.ridge, ")");
    return fit;
  }
  const MatrixXd kmat = llt.solve(pooled.c01);
  // K e0 = e0 holds exactly in exact arithmetic; a visible deviation means broken moments.
  const double col0 = (kmat.col(0) - VectorXd::Unit(p, 0)).cwiseAbs().maxCoeff();
  if (!(col0 < 1e-6)) {
    fit.warnings.push_back(
        absl::StrCat("K e0 deviates from e0 by ", col0, " (expected ~1e-12): the moments are inconsistent"));
  }

  // 3. Block form K = [[1, a^T], [0, K']]: the stationary mode is exactly (1, e0); the others
  // are the eigenpairs of K' lifted by the constant coefficient c = a^T v' / (mu - 1).
  std::vector<std::complex<double>> mu{1.0};
  std::vector<VectorXcd> vecs;
  VectorXcd e0 = VectorXcd::Zero(p);
  e0[0] = 1.0;
  vecs.push_back(e0);
  const auto lift = [&](const MatrixXd& kfull, const MatrixXd& basis) -> bool {
    // kfull: (q+1) x (q+1) in the coordinates [constant, basis columns]; basis: m x q.
    const int q = static_cast<int>(kfull.rows()) - 1;
    const MatrixXd kp = kfull.bottomRightCorner(q, q);
    const VectorXd arow = kfull.row(0).tail(q).transpose();
    Eigen::EigenSolver<MatrixXd> es(kp, /*computeEigenvectors=*/true);
    if (es.info() != Eigen::Success) return false;
    const VectorXcd& ev = es.eigenvalues();
    const MatrixXcd evec = basis.cast<std::complex<double>>() * es.eigenvectors();           // m x q
    const VectorXcd aw = es.eigenvectors().transpose() * arow.cast<std::complex<double>>();  // a^T w
    for (int l = 0; l < q; ++l) {
      VectorXcd v(p);
      v.tail(m) = evec.col(l);
      const std::complex<double> den = ev[l] - 1.0;
      v[0] = std::abs(den) > 1e-300 ? aw[l] / den : 0.0;
      mu.push_back(ev[l]);
      vecs.push_back(v);
    }
    return true;
  };
  if (m > 0) {
    const int q = std::min(options.refine_modes, m);
    if (q <= 0 || q >= m) {
      if (!lift(kmat, MatrixXd::Identity(m, m))) {
        fit.termination = SpectralFit::Termination::kNumericalFailure;
        fit.message = "the eigensolver did not converge on K'";
        return fit;
      }
    } else {
      // 3b. Rayleigh-Ritz without the ridge on the span of the q leading ridged eigenvectors
      // (real and imaginary parts of complex ones). The ridge r R shrinks slow eigenvalues by
      // about r |v|^2 / (v^T C00 v) (four-well, 100k pairs: -3 % at r = 1e-5, -14 % at 1e-3);
      // on a q-dimensional subspace of well-separated eigenvectors the Galerkin problem is
      // well conditioned without it, so the eigenvalues lose that shrinkage while the
      // subspace keeps the ridge's protection against the ill-conditioned full basis.
      // The q leading eigenpairs of K' (two more, so that a conjugate pair at the boundary is
      // whole; all m from the dense solver when m is small: core/linalg/leading_eigen.h).
      VectorXcd ev;
      MatrixXcd evec;
      if (!LeadingEigenpairs(kmat.bottomRightCorner(m, m), std::min(q + 2, m - 1), &ev, &evec)) {
        fit.termination = SpectralFit::Termination::kNumericalFailure;
        fit.message = "the eigensolver did not converge on K'";
        return fit;
      }
      const int found = static_cast<int>(ev.size());
      std::vector<int> lead(found);
      std::iota(lead.begin(), lead.end(), 0);
      std::stable_sort(lead.begin(), lead.end(), [&](int i, int j) { return std::abs(ev[i]) > std::abs(ev[j]); });
      MatrixXd w(m, q + 1);
      int cols = 0;
      for (int idx = 0; idx < found && cols < q; ++idx) {
        const VectorXcd v = evec.col(lead[idx]);
        if (ev[lead[idx]].imag() < 0) continue;  // its conjugate contributes both parts
        w.col(cols++) = v.real();
        if (ev[lead[idx]].imag() > 0) w.col(cols++) = v.imag();
      }
      Eigen::HouseholderQR<MatrixXd> qr(w.leftCols(cols));
      const MatrixXd basis = qr.householderQ() * MatrixXd::Identity(m, cols);
      MatrixXd vfull = MatrixXd::Zero(p, cols + 1);
      vfull(0, 0) = 1.0;
      vfull.bottomRightCorner(m, cols) = basis;
      const MatrixXd a = vfull.transpose() * pooled.c00 * vfull;
      const MatrixXd b = vfull.transpose() * pooled.c01 * vfull;
      Eigen::LLT<MatrixXd> small(a);
      if (small.info() != Eigen::Success) {
        fit.termination = SpectralFit::Termination::kNumericalFailure;
        fit.message = "the Rayleigh-Ritz Gram matrix is not positive definite";
        return fit;
      }
      if (!lift(small.solve(b), basis)) {
        fit.termination = SpectralFit::Termination::kNumericalFailure;
        fit.message = "the eigensolver did not converge on the Rayleigh-Ritz matrix";
        return fit;
      }
    }
  }

  // 4. Order: stationary first, then |mu| descending (ties: real part, then +imag first).
  std::vector<int> order(mu.size() - 1);
  std::iota(order.begin(), order.end(), 1);
  const double tie = 1e-12;
  std::sort(order.begin(), order.end(), [&](int i, int j) {
    const double ai = std::abs(mu[i]), aj = std::abs(mu[j]);
    if (std::abs(ai - aj) > tie * std::max(1.0, ai)) return ai > aj;
    if (std::abs(mu[i].real() - mu[j].real()) > tie) return mu[i].real() > mu[j].real();
    return mu[i].imag() > mu[j].imag();
  });
  order.insert(order.begin(), 0);
  const int k = std::min<int>(options.top, p);
  KoopmanDecomposition& kd = fit.koopman;
  kd.eigenvalues.resize(k);
  kd.rates.resize(k);
  kd.timescales.resize(k);
  kd.eigenvectors.resize(m, k);
  kd.constants.resize(k);
  kd.stationary_index = 0;
  fit.excess = VectorXd::Zero(k);
  const MatrixXcd c00c = pooled.c00.cast<std::complex<double>>();
  for (int l = 0; l < k; ++l) {
    const std::complex<double> z = mu[order[l]];
    VectorXcd v = vecs[order[l]];
    kd.eigenvalues[l] = z;
    kd.rates[l] = std::log(z) / options.dt;
    const double r = std::abs(z);
    if (l == 0) {
      kd.timescales[l] = std::numeric_limits<double>::infinity();
    } else {
      kd.timescales[l] =
          r >= 1.0 ? std::numeric_limits<double>::infinity() : (r == 0.0 ? 0.0 : -options.dt / std::log(r));
      if (r > 1.0 + options.unit_circle_tolerance) {
        fit.excess[l] = r - 1.0;
        fit.warnings.push_back(absl::StrFormat(
            "eigenvalue %d has |mu| = %.6f > 1 (excess %.3g): not a decaying mode of a stationary process "
            "(typical of transient, non-invariant sampling); its timescale is reported as infinite",
            l, r, r - 1.0));
      }
    }
    // Normalization: E|g|^2 = v^H C00 v / n = 1 over the epoch's samples, then the first
    // significant atom coefficient real positive (stable across refreshes; conjugate pairs
    // pick the same index and stay conjugate). The stationary mode is g = 1.
    if (l > 0) {
      const double norm2 = std::real(v.dot(c00c * v));
      if (norm2 > 0) v /= std::sqrt(norm2);
      const double vmax = v.tail(m).cwiseAbs().maxCoeff();
      for (int j = 1; j < p; ++j) {
        if (std::abs(v[j]) > 1e-8 * vmax) {
          v *= std::conj(v[j]) / std::abs(v[j]);
          v[j] = std::complex<double>(v[j].real(), 0.0);
          break;
        }
      }
    }
    kd.constants[l] = v[0];
    kd.eigenvectors.col(l) = v.tail(m);
  }
  if (!fit.ready) {
    fit.warnings.push_back(absl::StrCat("the spectrum rests on epoch ", fit.epoch, " with only ", fit.samples,
                                        " samples (not yet ready: the estimate is noisy)"));
  }
  const auto [lo, hi] = std::minmax_element(options.ridge_grid.begin(), options.ridge_grid.end());
  if (options.ridge_grid.size() > 1 && fit.ridge == *lo) {
    fit.warnings.push_back(absl::StrCat("the chosen ridge ", fit.ridge,
                                        " is the smallest of the grid: the held-out score may prefer less "
                                        "regularization than the grid offers"));
  }
  fit.termination = SpectralFit::Termination::kOk;
  fit.message = "ok";
  return fit;
}

}  // namespace cmestream
