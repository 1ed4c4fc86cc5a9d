# syncer's image: two static binaries (the daemon, /syncer, and the lab beside
# it, /syncer-lab) on distroless, run as a non-root user.
#
#   docker build \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg COMMIT="$(git rev-parse HEAD)" -t syncer .
#
# Without the build arguments, `syncer version` falls back to what the Go
# toolchain recorded in the binary.
FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so a change of source does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
ARG COMMIT=""
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/syncer-dev/syncer/internal/buildinfo.Version=${VERSION} -X github.com/syncer-dev/syncer/internal/buildinfo.Commit=${COMMIT}" \
      -o /out/syncer ./cmd/syncer && \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/syncer-dev/syncer/internal/buildinfo.Version=${VERSION} -X github.com/syncer-dev/syncer/internal/buildinfo.Commit=${COMMIT}" \
      -o /out/syncer-lab ./cmd/syncer-lab

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=""
ARG COMMIT=""
LABEL org.opencontainers.image.title="syncer" \
      org.opencontainers.image.source="https://github.com/syncer-dev/syncer" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY --from=build /out/syncer /syncer
# The lab (bench, soak, fake third party) is a binary of its own, which the
# daemon never loads: `/syncer fake-thirdparty` (docker-compose.yml) runs
# /syncer-lab, found beside /syncer. An image for production only may drop it.
COPY --from=build /out/syncer-lab /syncer-lab
# The daemon's default address is loopback, which nothing outside the
# container can reach: in a container, health and metrics listen on all
# interfaces of the container's own network namespace.
ENV SYNCER_HTTP_ADDR=:8080
EXPOSE 8080
# A numeric user, so Kubernetes' runAsNonRoot can check it (distroless's
# "nonroot" is uid 65532).
USER 65532:65532
# distroless has no shell and no curl: the binary checks its own /healthz
# (GET http://127.0.0.1:8080/healthz, exit 0 on 200).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/syncer", "healthcheck"]
ENTRYPOINT ["/syncer"]
CMD ["run"]
