// Shared numeric types for cmestream's core library.
#pragma once

#include <Eigen/Dense>

namespace cmestream {

// Point sets are n x d, one point per row, row-major (the wire layout of the API).
using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixXd = Eigen::MatrixXd;
using VectorXd = Eigen::VectorXd;
using VectorXcd = Eigen::VectorXcd;
using MatrixXcd = Eigen::MatrixXcd;

}  // namespace cmestream
