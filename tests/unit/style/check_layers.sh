#!/usr/bin/env bash
# Usage: check_layers.sh SOURCE_ROOT
# Fails, naming each file:line, when a source file includes a header of a
# layer it must not depend on. The layers (README.md): protocol/ is the
# contract both sides share; vdev/ is generic vhost-user plumbing; the
# engines under hypervisor/ know no rings and no service; tenant code
# (guest/, include/) and provider code (hypervisor/) meet only in protocol/.
# The build exports each layer's own include root only, so most such includes
# would not compile anyway; this check also catches the ones that would, such
# as a path that climbs out of its directory. Tests are not checked: they
# drive both sides on purpose. Files not yet added to git are checked too.
set -euo pipefail
cd "$1"
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.c' '*.cc' '*.h' '*.hpp')
if [ "${#files[@]}" -eq 0 ]; then
  echo "check_layers: no sources found (not a git checkout?)" >&2
  exit 1
fi

violations=0

# rule WHY FILES INCLUDE: the files whose path matches FILES (an extended
# regular expression) must not have an #include whose argument, opening "
# or < included, matches INCLUDE (a Perl regular expression).
rule() {
  local why=$1 where=$2 what=$3 hits
  local -a scope
  mapfile -t scope < <(printf '%s\n' "${files[@]}" | grep -E "$where" || true)
  [ "${#scope[@]}" -gt 0 ] || return 0
  hits=$(grep -sHnP "^\s*#\s*include\s*($what)" "${scope[@]}" || true)
  [ -n "$hits" ] || return 0
  while IFS= read -r hit; do
    echo "$hit" >&2
    echo "    forbidden: $why" >&2
    violations=$((violations + 1))
  done <<<"$hits"
}

engines='hypervisor/(collectives|checkpoint|events|scheduler|negotiation|cluster|common)/'
vdev_backend='vdev/(?!frontend/|vhost_user\.h)'

rule "the contract includes no header of the tree" \
  '^protocol/' '"'
rule "vdev is generic: it includes no HarmonAIze header" \
  '^vdev/' '[<"]((protocol|hz|guest|hypervisor)/|[^">]*harmonaize)'
rule "the vdev front-end (linked by libharmonaize) uses no back-end header, Asio or spdlog" \
  '^vdev/(src|include/vdev)/frontend/' "[<\"]($vdev_backend|boost/|asio|spdlog/|fmt/)"
rule "an engine includes neither vdev nor the service" \
  "^$engines" '[<"](vdev|hz/service)/'
rule "tenant code includes no provider header (hypervisor/, the vdev back-end)" \
  '^(guest|include)/' "[<\"](hz/|hypervisor/|$vdev_backend)"
rule "provider code includes no tenant header (guest/, include/harmonaize/, the driver's uapi)" \
  '^hypervisor/' '[<"](guest/|harmonaize/|harmonaize_uapi\.h|nccl\.h)'
rule "an include path climbs out of its directory; name the header from an include root" \
  '^(protocol|vdev|hypervisor|guest|include)/' '"[^"]*\.\./'

if [ "$violations" -ne 0 ]; then
  echo "check_layers: $violations include(s) across the layers" >&2
  exit 1
fi
echo "check_layers: ${#files[@]} files, no include across the layers"
