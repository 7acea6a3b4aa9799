# The ptah image: one static binary on an empty base, run as a non-root
# user. The same image runs the manager (ptah serve) and the Jobs' Pods
# (ptah exec).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/ptah-run/ptah/internal/cli.version=${VERSION}" \
      -o /out/ptah ./cmd/ptah

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=build /out/ptah /ptah
USER 65532:65532
ENTRYPOINT ["/ptah"]
