#!/usr/bin/env bash
# Installs what warren needs on Debian, by package name, and builds its two
# binaries into bin/. Sourced by setup.sh and test.sh; safe to run again.
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
# versioned package; an extracted version is kept and not fetched again. A
# host that cannot fetch it still gets the container runtime: only warn.
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
kver=${kpkg#linux-image-}
if [[ -z $kpkg ]]; then
	echo "warren: warning: no linux-image-cloud-amd64 in the apt sources: the vm runtime has no guest kernel" >&2
elif [[ -f $guest_kernels/$kver/vmlinuz && -d $guest_kernels/$kver/lib/modules/$kver ]]; then
	echo "warren: guest kernel $kver in $guest_kernels/$kver" >&2
elif ! (
	set -euo pipefail
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	chmod 755 "$tmp" # apt-get download drops to the _apt user
	(cd "$tmp" && apt-get download -qq "$kpkg" 2>/dev/null)
	dpkg-deb -x "$tmp"/"$kpkg"_*.deb "$tmp/deb"
	stage="$tmp/$kver"
	mkdir -p "$stage/lib/modules"
	mv "$tmp/deb/boot/vmlinuz-$kver" "$stage/vmlinuz"
	mv "$tmp/deb/boot/config-$kver" "$stage/config"
	mv "$tmp/deb/lib/modules/$kver" "$stage/lib/modules/"
	mkdir -p "$guest_kernels"
	rm -rf "${guest_kernels:?}/$kver"
	# Staged on /tmp, which may be another filesystem: copy next to the
	# target, then rename, so a half-copied kernel is never found.
	cp -a "$stage" "$guest_kernels/.$kver.tmp"
	mv -T "$guest_kernels/.$kver.tmp" "$guest_kernels/$kver"
); then
	rm -rf "${guest_kernels:?}/.$kver.tmp"
	echo "warren: warning: could not fetch the guest kernel $kpkg: the vm runtime has none" >&2
else
	echo "warren: guest kernel $kver extracted into $guest_kernels/$kver" >&2
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
