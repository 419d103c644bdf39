# Floe operator image: the `floe-operator` binary, which reconciles FlinkJob resources into
# JobManager/TaskManager Deployments and Services.
#
# Multi-stage: the binary is built inside the image build, on a Rust image of the same Debian
# release as the runtime base (Debian 12 "bookworm" for distroless cc-debian12). Build from the
# repository root:
#
#   docker build -f docker/operator.Dockerfile -t ghcr.io/floe-dev/floe-operator:0.1.0 .
#
# Build arguments: BUILDER_IMAGE, BASE_IMAGE and, with `--target prebuilt`, BINARY, as in
# worker.Dockerfile. Deployed by the Helm chart in charts/floe-operator, which passes
# `run --default-image ... --health-address [::]:8080` as args.

ARG BUILDER_IMAGE=docker.io/library/rust:1.95-slim-bookworm
ARG BASE_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BASE_IMAGE} AS runtime
USER 65532:65532
# 8080: health endpoint (/healthz).
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/floe-operator"]
CMD ["run"]

FROM runtime AS prebuilt
ARG BINARY=floe-operator
COPY ${BINARY} /usr/local/bin/floe-operator

# Nothing beyond the Rust image: ring, the operator's one C library, builds with its gcc (the
# containers test builds it on a stand-in for the Rust image).
FROM ${BUILDER_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p floe-operator --bin floe-operator \
 && cp target/release/floe-operator /floe-operator

FROM runtime
COPY --from=build /floe-operator /usr/local/bin/floe-operator
