#!/usr/bin/env bash
# The second of warren's two commands: the whole test suite. Run as root
# (tests that need root or a capability skip, saying why, without it).
#   sudo ./scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/deps.sh

# Templates built by tests are cached across runs here (debootstrap takes a
# minute or two the first time).
export WARREN_TEST_TEMPLATE_CACHE="${WARREN_TEST_TEMPLATE_CACHE:-/var/cache/warren-test}"
mkdir -p "$WARREN_TEST_TEMPLATE_CACHE"
export WARREN_BIN="$PWD/bin"
# What tests leave to look at afterwards (the web console's screenshots).
export WARREN_TEST_ARTIFACTS="${WARREN_TEST_ARTIFACTS:-$PWD/test-artifacts}"
# The real e2b SDK, pinned by e2e/e2b/package-lock.json, for the E2B
# compatibility tests (e2e/e2b_test.go).
npm ci --prefix e2e/e2b --no-audit --no-fund --loglevel=error
# The TypeScript SDK's unit tests (deps.sh built it: e2e/typescript_test.go
# runs its live tests).
npm test --prefix sdk/typescript --silent

unformatted=$(gofmt -l . | grep -v '^internal/agent/pb/' || true)
if [[ -n "$unformatted" ]]; then
	echo "not gofmt-formatted:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
"$WARREN_STATICCHECK" ./...
# The CLI drives a remote warren from a Mac: everything but the server
# builds there.
GOOS=darwin GOARCH=arm64 go build -o /dev/null ./cmd/warren
GOOS=darwin go vet ./cmd/warren ./client ./api

# The race detector runs over the packages whose tests need no root: none
# of them asks for it or skips without it (checked as nobody), so they run
# the same as root, which CI is, as not. They hold the concurrent logic:
# store, sandbox manager, blob stores, client, CLI. The rest need root in
# some part (runtimes, network, disks, the agent, layer and snapshot through
# disktest's xfs image, the end-to-end suite) and run after, once, without
# -race; so does a new package until it is listed here.
race=(
	./client ./cmd/warren ./internal/archive ./internal/atomicfile ./internal/backoff ./internal/blob
	./internal/blob/file ./internal/blob/s3 ./internal/blockdev ./internal/blockdev/nbd ./internal/chunkstore ./internal/cleanup ./internal/consolelog
	./internal/buildspec ./internal/control ./internal/e2b ./internal/fleet ./internal/guest ./internal/hostclaim ./internal/ident ./internal/metrics ./internal/mountinfo ./internal/network/policy
	./internal/network/resolver ./internal/node ./internal/pgtest ./internal/pki
	./internal/runtime/container/spawner ./internal/runtime/inproc ./internal/sandbox ./internal/store ./internal/tenanttpl ./internal/unixmode ./internal/vmm
	./internal/vmm/accel ./internal/vmport ./internal/wait ./internal/warmpool
)
go test -race -count=1 -timeout 20m "${race[@]}"
mapfile -t rest < <(go list ./... | grep -vxF -f <(go list "${race[@]}"))
# -p 1: the end-to-end and runtime tests start real sandboxes and daemons;
# running packages one at a time keeps their timing honest on 2 cores.
go test -p 1 -count=1 -timeout 40m "${rest[@]}"
# The Python SDK against a real daemon on the same data directory, after the
# Go suite (one server per data directory at a time).
python3 -m unittest discover -s sdk/python/tests -t sdk/python -v
