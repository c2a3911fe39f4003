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

unformatted=$(gofmt -l . | grep -v '^internal/agent/pb/' || true)
if [[ -n "$unformatted" ]]; then
	echo "not gofmt-formatted:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
# -p 1: the end-to-end and runtime tests start real sandboxes and daemons;
# running packages one at a time keeps their timing honest on 2 cores.
go test -p 1 -count=1 -timeout 40m ./...
# The Python SDK against a real daemon on the same data directory, after the
# Go suite (one server per data directory at a time).
python3 -m unittest discover -s sdk/python/tests -t sdk/python -v
