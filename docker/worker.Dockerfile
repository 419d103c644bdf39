# Floe worker image: the `floe` binary, run as a JobManager or a TaskManager.
#
# Multi-stage: the binary is built inside the image build, on a Rust image of the same Debian
# release as the runtime base (Debian 12 "bookworm" for distroless cc-debian12), so the glibc and
# libstdc++ symbol versions it needs are the ones the base has. Build from the repository root:
#
#   docker build -f docker/worker.Dockerfile -t ghcr.io/floe-dev/floe-worker:0.1.0 .
#
# (BuildKit, the default builder of current Docker, builds only the stages the target needs.)
#
# Build arguments:
#   BUILDER_IMAGE  the Rust image the binary is built on; keep its Debian release the base's.
#   BASE_IMAGE     the runtime base (glibc, libgcc, libstdc++, no shell, user 65532).
#   BINARY         with `--target prebuilt`: a binary in the build context instead of the build
#                  stage (tests, and binaries built elsewhere on the same Debian release).
#
# The container runs `floe jobmanager ...` or `floe taskmanager ...`, given as the container's
# args; the default CMD starts a JobManager listening on all interfaces. The operator's pods run
# with a read-only root file system and mount a writable working directory.

ARG BUILDER_IMAGE=docker.io/library/rust:1.95-slim-bookworm
ARG BASE_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# What every worker image is, whichever way its binary came.
FROM ${BASE_IMAGE} AS runtime
WORKDIR /var/lib/floe
USER 65532:65532
# 6123: JobManager RPC, 8081: JobManager REST,
# 6121: TaskManager endpoint (`floe taskmanager --bind [::]:6121 ...`).
EXPOSE 6123 8081 6121
ENTRYPOINT ["/usr/local/bin/floe"]
CMD ["jobmanager", "--rpc-address", "[::]:6123", "--rest-address", "[::]:8081"]

# A binary from the build context (`--target prebuilt --build-arg BINARY=path`).
FROM runtime AS prebuilt
ARG BINARY=floe
COPY ${BINARY} /usr/local/bin/floe

# What the build calls beyond the Rust image (which has gcc and libc6-dev): RocksDB's C++ is
# compiled with `c++` (clang++ here) and its bindings generated with libclang; librdkafka (bundled
# by rdkafka-sys) runs its own `./configure` (a shell script) and then `make`. The containers test
# runs this stage on a clean Debian 12 and builds librdkafka in it.
FROM ${BUILDER_IMAGE} AS build-tools
RUN apt-get update \
 && apt-get install -y --no-install-recommends clang libclang-dev make \
 && rm -rf /var/lib/apt/lists/*

# The binary built here.
FROM build-tools AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p floe --bin floe \
 && cp target/release/floe /floe

# The default target: the runtime with the binary built above.
FROM runtime
COPY --from=build /floe /usr/local/bin/floe
