# cmestreamd container image: multi-stage build on Debian bookworm with the same Debian
# packages as a developer machine (scripts/install-deps.sh).
#
#   podman build --format docker --build-arg GIT_COMMIT=$(git rev-parse --short=12 HEAD) -t cmestream:dev .
#   podman run --rm -p 50051:50051 -p 9464:9464 -v cmestream-data:/var/lib/cmestream cmestream:dev
#
# Inside the container the daemon listens on 0.0.0.0 (the container's network namespace is the
# boundary); on a host it defaults to loopback.
#
# Runs as any UID (OpenShift style, e.g. `--user 123456:0`): the data directory belongs to
# group 0 and is group-writable, so whatever UID the platform assigns, in group 0, can lock and
# write it. (The daemon creates its files 0644: a volume written under one UID is not writable
# under another; keep the UID stable per volume, as OpenShift does per namespace.) HEALTHCHECK (docker image format; podman: --format docker) asks the gRPC health
# service, which needs no token.

FROM debian:bookworm-slim AS build
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      cmake ninja-build g++ pkg-config libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev \
      protobuf-compiler libeigen3-dev libabsl-dev prometheus-cpp-dev libspectra-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY proto proto
COPY core core
COPY service service
COPY client client
COPY tests tests
# The build context has no .git: the commit for --version comes in as a build argument.
ARG GIT_COMMIT=unknown
# Target ISA: the portable x86-64-v2 baseline by default, so the image runs on any x86-64 host;
# --build-arg CMESTREAM_ARCH=x86-64-v3 for AVX2 hosts (2-4x faster learning, docs/benchmarks.md).
ARG CMESTREAM_ARCH=x86-64-v2
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMESTREAM_ARCH="${CMESTREAM_ARCH}" \
      -DCMESTREAM_BUILD_TESTS=OFF -DCMESTREAM_BUILD_BENCHMARKS=OFF -DCMESTREAM_GIT_COMMIT="${GIT_COMMIT}" \
 && cmake --build /build -j2 --target cmestreamd cmestream \
 && strip /build/service/cmestreamd /build/client/cmestream

FROM debian:bookworm-slim AS runtime
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 cmestream \
 && useradd --system --uid 10001 --gid 0 --groups cmestream --home-dir /var/lib/cmestream \
      --shell /usr/sbin/nologin cmestream \
 && mkdir -p /var/lib/cmestream && chown 10001:0 /var/lib/cmestream && chmod 2775 /var/lib/cmestream
COPY --from=build /build/service/cmestreamd /usr/local/bin/cmestreamd
COPY --from=build /build/client/cmestream /usr/local/bin/cmestream
USER 10001:0
VOLUME ["/var/lib/cmestream"]
EXPOSE 50051 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["/usr/local/bin/cmestream", "--server", "127.0.0.1:50051", "--timeout", "3", "health"]
ENTRYPOINT ["/usr/local/bin/cmestreamd"]
CMD ["--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9464", "--data-dir", "/var/lib/cmestream"]
