"""cmestream: Python client of cmestreamd (streaming conditional-mean-embedding models).

    import cmestream
    with cmestream.Client("127.0.0.1:50051") as c:    # a target without a port means :50051
        m = c.create("duffing", dim=2, sigma=0.5)
        m.ingest(X, Y)
        m.refresh()
        print(m.koopman().eigenvalues)

`Client` speaks to one daemon (every RPC, results as numpy arrays); `Model` is a handle on one
model with estimator-like methods (ingest / partial_fit, refresh, koopman, predict, transform,
clusters, ...). Every input is checked before anything is sent: a wrong shape or dtype, a NaN or
infinity (named by row and column), a state id out of range, an argument out of range is a
ValueError naming it; an unknown keyword argument a TypeError. Server errors are CmestreamError
(gRPC code + message; INVALID_ARGUMENT answers are InvalidArgumentError, also a ValueError).
Results are dataclasses of numpy arrays, samples first: `koopman(points=P).eigenfunctions` is
(n, k), one row per point, like `transform(P)` (n, r); describe() returns a ModelInfo and
refresh() a ViewInfo (cmestream.info). The generated gRPC stubs are `cmestream.v1`.

Install: `pip install --no-deps --no-build-isolation ./client/python` (needs Debian's protoc,
grpc_python_plugin, python3-grpcio, python3-protobuf, python3-numpy; see client/python/README.md).
"""
from .client import Client, CmestreamError, InvalidArgumentError
from .info import (FitSummary, InputScaling, KoopmanHeadline, ModelConfig, ModelFailure, ModelInfo, SigmaSelection,
                   SpectrumInfo, Cycle,
                   SubViewStatus, TimescaleComparison, ViewInfo)
from .model import Model
from .results import (AggregationResult, CkResult, CkTestResult, ClustersResult, CountsResult,
                      EmbeddingResult, ForecastHorizonSkill, ForecastResult, ForecastSkill,
                      IngestResult,
                      KoopmanResult, LagScan, LatentResult, SeriesForecast, TimescalesResult)
from .sharded import ShardedClient
from . import placement

__version__ = "0.1.0"  # = project(cmestream VERSION) in CMakeLists.txt (a test checks)

__all__ = ["AggregationResult", "CkResult", "CkTestResult", "Client", "ClustersResult",
           "CmestreamError", "CountsResult", "Cycle", "EmbeddingResult", "FitSummary", "ForecastHorizonSkill",
           "ForecastResult", "ForecastSkill",
           "IngestResult", "InputScaling", "InvalidArgumentError", "KoopmanHeadline", "KoopmanResult", "LagScan", "LatentResult",
           "Model", "ModelConfig", "ModelFailure", "ModelInfo", "SeriesForecast", "ShardedClient", "SigmaSelection", "SpectrumInfo",
           "SubViewStatus", "TimescaleComparison", "TimescalesResult", "ViewInfo", "placement",
           "__version__"]
