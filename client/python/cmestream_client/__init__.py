"""Python client of cmestreamd: a thin, typed wrapper over the generated v1 stubs with numpy arrays.

Requires the generated stubs (`cmestream.v1.cmestream_pb2`, built into <build>/python by the CMake
target cmestream_proto_python) on sys.path, plus Debian's python3-grpcio and python3-numpy.
"""
from .client import (AggregationResult, Client, ClustersResult, CmestreamError, CountsResult,
                     EmbeddingResult, ForecastResult, IngestResult, KoopmanResult, LatentResult)

__all__ = ["AggregationResult", "Client", "ClustersResult", "CmestreamError", "CountsResult",
           "EmbeddingResult", "ForecastResult", "IngestResult", "KoopmanResult", "LatentResult"]
