# Floe worker image: the `floe` binary, run as a JobManager or a TaskManager.
#
# The image copies a prebuilt binary from the build context (no Rust toolchain
# in the image, only a runtime base). Build from the repository root:
#
#   cargo build --release -p floe
#   docker build -f docker/worker.Dockerfile \
#     --build-arg BINARY=target/release/floe -t floe/worker:0.1.0 .
#
# The binary must be inside the build context (here the repository root), and
# must not be excluded by a .dockerignore.
#
# Build arguments:
#   BASE_IMAGE  runtime base image (default distroless cc, non-root). A local
#               test build may pass a base image it built from the host's
#               shared libraries instead; the rest of this file is the same.
#   BINARY      path of the prebuilt `floe` binary inside the build context.
#
# The container runs `floe jobmanager ...` or `floe taskmanager ...`, given as
# the container's args; the default CMD starts a JobManager listening on all
# interfaces.
#
# The working directory /var/lib/floe is where the operator mounts the job's
# `file://` storage, so a job's relative paths (e.g. `data/words.txt`) resolve
# under it. A WORKDIR that does not exist in the base image is created owned by
# root; the operator mounts a writable volume there, so that is fine.

ARG BASE_IMAGE=gcr.io/distroless/cc-debian12:nonroot
FROM ${BASE_IMAGE}

ARG BINARY=floe
COPY ${BINARY} /usr/local/bin/floe

WORKDIR /var/lib/floe
USER 65532:65532

# 6123: JobManager RPC, 8081: JobManager REST,
# 6121: TaskManager endpoint (`floe taskmanager --bind 0.0.0.0:6121 ...`).
EXPOSE 6123 8081 6121

ENTRYPOINT ["/usr/local/bin/floe"]
CMD ["jobmanager", "--rpc-address", "0.0.0.0:6123", "--rest-address", "0.0.0.0:8081"]
