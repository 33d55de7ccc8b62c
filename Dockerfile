# cmestreamd container image: multi-stage build on Debian bookworm with the same Debian
# packages as a developer machine (scripts/install-deps.sh).
#
#   podman build -t cmestream:dev .        (or docker build)
#   podman run --rm -p 50051:50051 -p 9464:9464 -v cmestream-data:/var/lib/cmestream cmestream:dev
#
# Inside the container the daemon listens on 0.0.0.0 (the container's network namespace is the
# boundary); on a host it defaults to loopback.

FROM debian:bookworm-slim AS build
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      cmake ninja-build g++ pkg-config libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev \
      protobuf-compiler libeigen3-dev libabsl-dev prometheus-cpp-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY proto proto
COPY core core
COPY service service
COPY client client
COPY tests tests
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMESTREAM_BUILD_TESTS=OFF -DCMESTREAM_BUILD_BENCHMARKS=OFF \
 && cmake --build /build -j2 --target cmestreamd cmestream \
 && strip /build/service/cmestreamd /build/client/cmestream

FROM debian:bookworm-slim AS runtime
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 cmestream \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/cmestream --shell /usr/sbin/nologin cmestream \
 && mkdir -p /var/lib/cmestream && chown cmestream:cmestream /var/lib/cmestream
COPY --from=build /build/service/cmestreamd /usr/local/bin/cmestreamd
COPY --from=build /build/client/cmestream /usr/local/bin/cmestream
USER 10001:10001
VOLUME ["/var/lib/cmestream"]
EXPOSE 50051 9464
ENTRYPOINT ["/usr/local/bin/cmestreamd"]
CMD ["--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9464", "--data-dir", "/var/lib/cmestream"]
