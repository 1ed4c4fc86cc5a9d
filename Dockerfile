# syncer's image: a static binary on a small base.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/syncer ./cmd/syncer

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/syncer /usr/local/bin/syncer
ENTRYPOINT ["/usr/local/bin/syncer"]
CMD ["run"]
