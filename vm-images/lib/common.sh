# Shared helpers for the vm-images scripts. Sourced, not executed.
# shellcheck shell=bash
# shellcheck disable=SC2034 # HZ_REPO_ROOT is for the scripts that source this

HZ_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# Bumped when the toolchain recipe changes, so cached roots are rebuilt.
export HZ_STAMP_VERSION=1
# The same for the guest kernels installed into the root.
export HZ_KERNELS_STAMP_VERSION=1

hz_log() { echo "[$(basename "$0")] $*" >&2; }
hz_die() { echo "[$(basename "$0")] error: $*" >&2; exit 1; }

# The cache directory: first argument if given, else $HZ_VM_DIR, else build/vm.
hz_vm_dir() {
	local dir=${1:-${HZ_VM_DIR:-$HZ_REPO_ROOT/build/vm}}
	mkdir -p "$dir"
	(cd "$dir" && pwd)
}

hz_require_root() {
	[ "$(id -u)" -eq 0 ] || hz_die "must run as root (debootstrap, chroot and mounts need it)"
}

# The guest runners' --name and --test: they become file names and a kernel
# command-line word, so only a safe alphabet.
hz_check_guest_name() { # NAME TEST
	[[ $1 =~ ^[A-Za-z0-9_-]+$ ]] || hz_die "--name must be letters, digits, - or _"
	[[ $2 =~ ^[A-Za-z0-9_.-]*$ ]] || hz_die "--test must be letters, digits, ., - or _"
}

# Prints the Debian mirror URL the host's apt uses, read from
# /etc/apt/sources.list and /etc/apt/sources.list.d/*.list (one-line format) and
# *.sources (deb822 format). The first "deb" source whose URI is a Debian
# archive (path ending in /debian) wins; security and third-party sources are
# skipped. HZ_DEBIAN_MIRROR overrides the detection.
hz_debian_mirror() {
	if [ -n "${HZ_DEBIAN_MIRROR:-}" ]; then
		echo "${HZ_DEBIAN_MIRROR%/}"
		return
	fi
	local files=() f
	[ -f /etc/apt/sources.list ] && files+=(/etc/apt/sources.list)
	for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && files+=("$f")
	done
	local uri
	for f in "${files[@]}"; do
		case $f in
		*.sources) uri=$(hz_uris_deb822 "$f") ;;
		*) uri=$(hz_uris_oneline "$f") ;;
		esac
		uri=$(echo "$uri" | grep -E '^[a-z+]+://[^ ]*/debian/?$' | head -n1 || true)
		if [ -n "$uri" ]; then
			echo "${uri%/}"
			return
		fi
	done
	hz_die "no Debian mirror found in the host's apt sources (set HZ_DEBIAN_MIRROR)"
}

# URIs of "deb" lines: deb [options] URI suite components...
hz_uris_oneline() {
	sed -e 's/#.*//' "$1" | awk '$1 == "deb" {
		i = 2
		if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
		if (i <= NF) print $i
	}'
}

# URIs of enabled deb822 stanzas whose Types include "deb".
hz_uris_deb822() {
	awk '
	function flush() {
		if (types ~ /(^| )deb( |$)/ && enabled != "no") for (k = 1; k <= n; k++) print uris[k]
		types = ""; enabled = ""; n = 0
	}
	/^[ \t]*#/ { next }
	/^[ \t]*$/ { flush(); next }
	{
		line = $0
		if (match(line, /^[A-Za-z-]+:/)) {
			key = tolower(substr(line, 1, RLENGTH - 1))
			val = substr(line, RLENGTH + 1)
			gsub(/^[ \t]+|[ \t]+$/, "", val)
			if (key == "types") types = val
			else if (key == "enabled") enabled = tolower(val)
			else if (key == "uris") { n = split(val, uris, /[ \t]+/) }
		}
	}
	END { flush() }' "$1"
}

# The guest kernels the driver is built and tested for, named by the Debian
# suite they come from:
#   bookworm          Debian 12's linux-image-amd64 (6.1), installed on the
#                     host by scripts/install-deps.sh
#   trixie            Debian 13's linux-image-amd64 (6.12), in the toolchain root
#   trixie-backports  the newest kernel in trixie-backports, in the toolchain root
# build-toolchain.sh installs the last two and records their versions in
# DIR/kernels/. The scripts use $HZ_GUEST_KERNEL, bookworm when unset.
HZ_GUEST_KERNELS=(bookworm trixie trixie-backports)

hz_guest_kernel() {
	local k=${HZ_GUEST_KERNEL:-bookworm}
	case $k in
	bookworm | trixie | trixie-backports) echo "$k" ;;
	*) hz_die "HZ_GUEST_KERNEL=$k is not one of: ${HZ_GUEST_KERNELS[*]}" ;;
	esac
}

# hz_guest_kernel_version [KERNEL [DIR]]: the kernel's version (its uname -r).
hz_guest_kernel_version() {
	local k=${1:-$(hz_guest_kernel)} dir
	if [ "$k" = bookworm ]; then
		"$HZ_REPO_ROOT/scripts/guest-kernel-version.sh"
		return
	fi
	dir=$(hz_vm_dir "${2:-}")
	[ -f "$dir/kernels/$k.unavailable" ] && hz_die "no $k kernel: $(cat "$dir/kernels/$k.unavailable")"
	[ -s "$dir/kernels/$k" ] || hz_die "the $k kernel is not installed in $dir/root (run vm-images/build-toolchain.sh)"
	cat "$dir/kernels/$k"
}

# hz_guest_kernel_unavailable KERNEL DIR: succeeds, printing why, when the
# toolchain found no such kernel in Debian's archive.
hz_guest_kernel_unavailable() {
	[ "$1" != bookworm ] && [ -f "$2/kernels/$1.unavailable" ] && cat "$2/kernels/$1.unavailable"
}

# hz_guest_kernel_root KERNEL DIR: the root its image, modules and headers are
# in (and its module build runs in); empty for the host's bookworm kernel.
hz_guest_kernel_root() {
	[ "$1" = bookworm ] || echo "$2/root"
}

# hz_guest_dir DIR KERNEL: where build-guest.sh puts the kernel's modules.
hz_guest_dir() {
	if [ "$2" = bookworm ]; then echo "$1/guest"; else echo "$1/guest-$2"; fi
}

# hz_guest_initramfs DIR KERNEL: the kernel's guest image.
hz_guest_initramfs() {
	if [ "$2" = bookworm ]; then echo "$1/images/initramfs.gz"; else echo "$1/images/initramfs-$2.gz"; fi
}

# hz_libvirt_qemu_conf FILE: libvirt's QEMU driver configuration for a
# libvirtd in the toolchain root (a chroot without cgroups, namespaces or a
# security driver), mounted over the root's /etc/libvirt for one run only.
hz_libvirt_qemu_conf() {
	cat >"$1" <<-'CONF'
		user = "root"
		group = "root"
		dynamic_ownership = 0
		remember_owner = 0
		security_driver = "none"
		cgroup_controllers = [ ]
		namespaces = [ ]
		stdio_handler = "file"
	CONF
}

# hz_guest_kernel_image DIR NAME: the image of $HZ_GUEST_KERNEL's kernel
# (logged for guest NAME).
hz_guest_kernel_image() {
	local guest_kernel kver
	guest_kernel=$(hz_guest_kernel)
	kver=$(hz_guest_kernel_version "$guest_kernel" "$1")
	hz_log "$2: guest kernel $guest_kernel ($kver)"
	echo "$(hz_guest_kernel_root "$guest_kernel" "$1")/boot/vmlinuz-$kver"
}

# hz_guest_exit NAME RC TIMEOUT_S LOG TEST [PREFIX]: exits as the run scripts
# do: 124 when QEMU ran out of time, QEMU's status without a test, else 0 on
# "HZ-RESULT: PASS TEST" in LOG (after PREFIX, when the console's lines carry
# one), 1 on FAIL and 2 without a result.
hz_guest_exit() {
	local name=$1 rc=$2 timeout_s=$3 log=$4 test_name=$5 prefix=${6:-}
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		hz_log "$name: timed out after $timeout_s s"
		exit 124
	fi
	[ -n "$test_name" ] || exit "$rc"
	if grep -q "^${prefix}HZ-RESULT: FAIL $test_name" "$log"; then
		exit 1
	elif grep -q "^${prefix}HZ-RESULT: PASS $test_name\b" "$log"; then
		exit 0
	fi
	hz_log "$name: the guest gave no result for $test_name"
	exit 2
}
