"""cmestream: Python client of cmestreamd (streaming conditional-mean-embedding models).

    import cmestream
    with cmestream.Client("127.0.0.1:50051") as c:    # a target without a port means :50051
        m = c.create("duffing", dim=2, sigma=0.5)
        m.ingest(X, Y)
        m.refresh()
        print(m.koopman().eigenvalues)

`Client` speaks to one daemon (every RPC, results as numpy arrays); `Model` is a handle on one
model with estimator-like methods (ingest / partial_fit, refresh, koopman, predict, transform,
clusters, ...). Input arrays are checked against the model's dimension before anything is sent:
a wrong shape or dtype is a ValueError naming the expected shape. Server errors are
CmestreamError (gRPC code + message). The generated gRPC stubs are `cmestream.v1`.

Install: `pip install --no-deps --no-build-isolation ./client/python` (needs Debian's protoc,
grpc_python_plugin, python3-grpcio, python3-protobuf, python3-numpy; see client/python/README.md).
"""
from .client import (AggregationResult, CkResult, CkTestResult, Client, ClustersResult,
                     CmestreamError, CountsResult, EmbeddingResult, FitSummary, ForecastResult,
                     ForecastSkill, IngestResult, KoopmanResult, LagScan, LatentResult,
                     SeriesForecast, TimescalesResult)
from .model import Model
from .sharded import ShardedClient
from . import placement

__version__ = "0.1.0"  # = project(cmestream VERSION) in CMakeLists.txt (a test checks)

__all__ = ["AggregationResult", "Client", "ClustersResult", "CmestreamError", "CountsResult",
           "EmbeddingResult", "FitSummary", "ForecastResult", "ForecastSkill", "IngestResult",
           "KoopmanResult",
           "LatentResult", "LagScan", "TimescalesResult", "CkResult", "CkTestResult", "Model",
           "SeriesForecast", "ShardedClient", "placement", "__version__"]
