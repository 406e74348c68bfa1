# syntax=docker/dockerfile:1
# quorate's image: the one static binary on distroless, run as a non-root
# user. deploy/README.md says how to build and run it:
#
#   docker build -t quorate:local .
#
# The "credentials" stage is the same binary beside a shell, for
# docker-compose.yml's one-shot service that makes the credentials
# (deploy/credentials.sh); the last stage, the default target, is the node.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# The modules first: a source change then reuses the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
# CGO off: a static binary with no interpreter, which distroless/static needs.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/quorate ./cmd/quorate
# Mount points owned by the nonroot user: a new named volume takes its owner
# from the image, so the node can write /data without running as root.
RUN mkdir -p /out/data /out/credentials

FROM busybox:1.37-musl AS credentials
COPY --from=build /out/quorate /usr/local/bin/quorate
COPY --chmod=0755 deploy/credentials.sh /usr/local/bin/quorate-credentials
COPY --from=build --chown=65532:65532 /out/credentials /credentials
USER 65532:65532
VOLUME /credentials
ENTRYPOINT ["/usr/local/bin/quorate-credentials"]

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/quorate /quorate
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build --chown=65532:65532 /out/credentials /credentials
USER 65532:65532
# gRPC (clients), HTTP (/healthz, /readyz, /metrics), peers (mutual TLS),
# gossip (TCP and UDP).
EXPOSE 7401/tcp 7501/tcp 7601/tcp 7301/tcp 7301/udp
VOLUME /data
ENTRYPOINT ["/quorate"]
CMD ["--help"]
