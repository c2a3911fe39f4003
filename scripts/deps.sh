#!/usr/bin/env bash
# Installs what warren needs on Debian, by package name, and builds its two
# binaries into bin/ and the tools its tests use into ~/.cache/warren. Sourced by setup.sh and test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# debian-archive-keyring: the keys template builds' apt steps check
# packages with; busybox-static: the small OCI image the tests push;
# qemu-utils: qemu-io and qemu-img, QEMU's NBD client in the blockdev/nbd
# tests.
packages=(debootstrap debian-archive-keyring e2fsprogs xfsprogs util-linux iproute2 ca-certificates python3 qemu-system-x86 qemu-utils postgresql nodejs chromium busybox-static)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "warren: installing Debian packages: ${missing[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# gVisor's runsc, the gvisor runtime: Debian 13's build (20240729, with the
# systrap platform and checkpoints), by name from Debian's own archive. On
# Debian 12, whose own runsc is a 2022 build, trixie is added as a source
# pinned at priority 100: nothing else is taken from it unless asked for.
release_of() { grep -o '20[0-9]\{6\}' | head -1; }
if [[ $(runsc --version 2>/dev/null | release_of) < 20240729 ]]; then
	target=()
	if [[ $(apt-cache policy runsc 2>/dev/null | awk '$1 == "Candidate:" { print $2 }' | release_of) < 20240729 ]]; then
		if ! grep -qs trixie /etc/apt/sources.list /etc/apt/sources.list.d/*; then
			echo "warren: adding Debian 13 (trixie) as an apt source pinned at priority 100, for runsc" >&2
			printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' >/etc/apt/sources.list.d/warren-trixie.sources
			printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' >/etc/apt/preferences.d/warren-trixie
		fi
		apt-get update -qq
		target=(-t trixie)
	fi
	echo "warren: installing runsc (gVisor) from Debian 13" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${target[@]}" runsc >/dev/null
fi
# npm, for the e2b SDK the E2B compatibility tests install: some nodejs
# builds ship it, Debian's comes apart. chromium runs the web console's
# end-to-end test (e2e/console_test.go), headless.
if ! command -v npm >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
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
# The TypeScript SDK (sdk/typescript), with its pinned compiler, and the web
# console (console/), compiled with the SDK's sources into
# internal/console/dist, which bin/warren embeds and serves at /console.
npm ci --prefix sdk/typescript --no-audit --no-fund --loglevel=error
npm run build --prefix sdk/typescript --silent
npm ci --prefix console --no-audit --no-fund --loglevel=error
npm run build --prefix console --silent
go build -trimpath -o bin/warren ./cmd/warren
# cached_tool DIR PKG@VERSION builds the command PKG from the Go module proxy
# into DIR, once per machine: a cache outside the clone, as Go caches its
# builds, so that every clone after the first reuses it. It is built aside
# and renamed in: a failed build leaves nothing behind.
cached_tool() {
	local dir=$1 pkg=$2 name
	name=$(basename "${pkg%@*}")
	[[ -x $dir/$name ]] && return
	echo "warren: building $name ${pkg#*@} into $dir (once per machine)" >&2
	mkdir -p "$dir"
	(
		tmp=$(mktemp -d "$dir/.build-XXXXXX")
		trap 'rm -rf "$tmp"' EXIT
		GOBIN="$tmp" go install "$pkg"
		mv "$tmp/$name" "$dir/$name"
	)
}
cache="${XDG_CACHE_HOME:-$HOME/.cache}/warren"
# The S3 blob-store tests run against versitygw (about 3 minutes to build on
# 2 cores).
cached_tool "$cache/versitygw@v1.8.0" github.com/versity/versitygw/cmd/versitygw@v1.8.0
export WARREN_VERSITYGW="$cache/versitygw@v1.8.0/versitygw"
# staticcheck, which test.sh runs, per Go version too: it must know the Go
# that compiles warren.
staticcheck_dir="$cache/staticcheck@v0.8.2-$(go env GOVERSION)"
cached_tool "$staticcheck_dir" honnef.co/go/tools/cmd/staticcheck@v0.8.2
export WARREN_STATICCHECK="$staticcheck_dir/staticcheck"
