#!/usr/bin/env bash
# Installs what warren needs on Debian, by package name, and builds its two
# binaries into bin/ and the tools its tests use into ~/.cache/warren. Sourced by setup.sh and test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(debootstrap e2fsprogs xfsprogs util-linux iproute2 ca-certificates python3 qemu-system-x86)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "warren: installing Debian packages: ${missing[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The microVM runtime's guest kernel: Debian's cloud kernel, extracted (never
# installed on the host) into /var/cache/warren/guest-kernel/<version>/
# (vmlinuz, config, lib/modules/<version>/). The metapackage names the current
# versioned package; a version already extracted is not fetched again.
guest_kernels=/var/cache/warren/guest-kernel
guest_kernel_package() {
	apt-cache depends linux-image-cloud-amd64 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9].*-cloud-amd64$/ { print $2; exit }'
}
kpkg=$(guest_kernel_package)
if [[ -z $kpkg ]]; then
	apt-get update -qq
	kpkg=$(guest_kernel_package)
fi
[[ -n $kpkg ]] || { echo "warren: no linux-image-cloud-amd64 in the apt sources (the vm runtime's guest kernel)" >&2; exit 1; }
kver=${kpkg#linux-image-}
if [[ ! -f $guest_kernels/$kver/vmlinuz || ! -d $guest_kernels/$kver/lib/modules/$kver ]]; then
	echo "warren: fetching the guest kernel $kpkg" >&2
	(
		tmp=$(mktemp -d)
		trap 'rm -rf "$tmp"' EXIT
		cd "$tmp"
		# As root into a private directory: apt's _apt user could not write it.
		apt-get download -qq -o APT::Sandbox::User=root "$kpkg"
		dpkg-deb -x "$kpkg"_*.deb deb
		mkdir -p "$kver/lib/modules"
		mv "deb/boot/vmlinuz-$kver" "$kver/vmlinuz"
		mv "deb/boot/config-$kver" "$kver/config"
		mv "deb/lib/modules/$kver" "$kver/lib/modules/"
		# /tmp may be another filesystem: copy next to the target, then
		# rename, so that a half-copied kernel is never found.
		mkdir -p "$guest_kernels"
		rm -rf "${guest_kernels:?}/.$kver.tmp" "${guest_kernels:?}/$kver"
		cp -a "$kver" "$guest_kernels/.$kver.tmp"
		mv -T "$guest_kernels/.$kver.tmp" "$guest_kernels/$kver"
	)
fi
echo "warren: guest kernel $kver in $guest_kernels/$kver" >&2

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
# The S3 blob-store tests run against versitygw, built from the Go module
# proxy (about 3 minutes on 2 cores) once per machine into a cache outside
# the clone, as Go caches its builds: every clone after the first reuses it.
versitygw_version=v1.8.0
versitygw_dir="${XDG_CACHE_HOME:-$HOME/.cache}/warren/versitygw@$versitygw_version"
if [[ ! -x $versitygw_dir/versitygw ]]; then
	echo "warren: building versitygw $versitygw_version into $versitygw_dir (once per machine)" >&2
	mkdir -p "$versitygw_dir"
	(
		# Built aside and renamed in: a failed build leaves nothing behind.
		tmp=$(mktemp -d "$versitygw_dir/.build-XXXXXX")
		trap 'rm -rf "$tmp"' EXIT
		GOBIN="$tmp" go install "github.com/versity/versitygw/cmd/versitygw@$versitygw_version"
		mv "$tmp/versitygw" "$versitygw_dir/versitygw"
	)
fi
export WARREN_VERSITYGW="$versitygw_dir/versitygw"

# staticcheck, which test.sh runs, likewise built from the Go module proxy
# once per machine, and per Go version: it must know the Go that compiles
# warren.
staticcheck_version=v0.8.2
staticcheck_dir="${XDG_CACHE_HOME:-$HOME/.cache}/warren/staticcheck@$staticcheck_version-$(go env GOVERSION)"
if [[ ! -x $staticcheck_dir/staticcheck ]]; then
	echo "warren: building staticcheck $staticcheck_version into $staticcheck_dir (once per machine)" >&2
	mkdir -p "$staticcheck_dir"
	(
		tmp=$(mktemp -d "$staticcheck_dir/.build-XXXXXX")
		trap 'rm -rf "$tmp"' EXIT
		GOBIN="$tmp" go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"
		mv "$tmp/staticcheck" "$staticcheck_dir/staticcheck"
	)
fi
export WARREN_STATICCHECK="$staticcheck_dir/staticcheck"
