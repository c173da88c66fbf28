# Shared helpers for the vm-images scripts. Sourced, not executed.
# shellcheck shell=bash
# shellcheck disable=SC2034 # HZ_REPO_ROOT is for the scripts that source this

HZ_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# Bumped when the toolchain recipe changes, so cached roots are rebuilt.
export HZ_STAMP_VERSION=1

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

hz_guest_kernel_version() {
	"$HZ_REPO_ROOT/scripts/guest-kernel-version.sh"
}
