# Floe operator image: the `floe-operator` binary, which reconciles FlinkJob
# resources into JobManager/TaskManager Deployments and Services.
#
# The image copies a prebuilt binary from the build context (no Rust toolchain
# in the image, only a runtime base). Build from the repository root:
#
#   cargo build --release -p floe-operator
#   docker build -f docker/operator.Dockerfile \
#     --build-arg BINARY=target/release/floe-operator -t floe/operator:0.1.0 .
#
# The binary must be inside the build context (here the repository root), and
# must not be excluded by a .dockerignore.
#
# Build arguments:
#   BASE_IMAGE  runtime base image (default distroless cc, non-root). A local
#               test build may pass a base image it built from the host's
#               shared libraries instead; the rest of this file is the same.
#   BINARY      path of the prebuilt `floe-operator` binary inside the build
#               context.
#
# Deployed by the Helm chart in charts/floe-operator, which passes
# `run --default-image ... --health-address 0.0.0.0:8080` as args.

ARG BASE_IMAGE=gcr.io/distroless/cc-debian12:nonroot
FROM ${BASE_IMAGE}

ARG BINARY=floe-operator
COPY ${BINARY} /usr/local/bin/floe-operator

USER 65532:65532

# 8080: health endpoint (/healthz).
EXPOSE 8080

ENTRYPOINT ["/usr/local/bin/floe-operator"]
CMD ["run"]
