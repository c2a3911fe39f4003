#!/usr/bin/env bash
# The first of warren's two commands: install what is needed, build, build
# the default template (once; cached in the data directory) and start the
# single-node server in the foreground. Run as root.
#   sudo ./scripts/setup.sh [--data-dir DIR] [--listen ADDR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/deps.sh
exec bin/warren server "$@"
