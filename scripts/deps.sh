#!/usr/bin/env bash
# Installs what warren needs on Debian, by package name, and builds its two
# binaries into bin/. Sourced by setup.sh and test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(debootstrap e2fsprogs xfsprogs util-linux iproute2 ca-certificates python3)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "warren: installing Debian packages: ${missing[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Go: the one on PATH, else the usual /usr/local/go. go.mod names the Go
# version; a go command of 1.21 or later fetches that toolchain through the
# module proxy by itself.
if ! command -v go >/dev/null; then
	export PATH="$PATH:/usr/local/go/bin"
fi
command -v go >/dev/null || { echo "warren: Go 1.21 or later is needed on PATH" >&2; exit 1; }

mkdir -p bin
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o bin/warren-agent ./cmd/warren-agent
go build -trimpath -o bin/warren ./cmd/warren
# The S3 blob-store tests run against versitygw, built from the Go module proxy.
[[ -x bin/versitygw ]] || GOBIN="$PWD/bin" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
