#!/bin/sh
# Every function NVIDIA's nccl.h declares (nccl* and its pnccl* twin) must be
# a defined dynamic symbol of our libnccl.so.2. The list comes from the
# header itself, so a newer header with more functions fails this test.
#   check_exports.sh <NVIDIA nccl.h> <libnccl.so.2>
set -eu
header=$1
lib=$2
names=$(grep -oE '^[[:space:]]*(ncclResult_t|const char[[:space:]]*\*|void)[[:space:]]+p?nccl[A-Za-z0-9_]+[[:space:]]*\(' "$header" |
  sed -E 's/.*[[:space:]*](p?nccl[A-Za-z0-9_]+)[[:space:]]*\($/\1/' | sort -u)
count=$(printf '%s\n' "$names" | grep -c . || true)
if [ "$count" -eq 0 ]; then
  echo "FAIL: no function declarations found in $header"
  exit 1
fi
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "W" { print $3 }' | sort -u)
missing=0
for n in $names; do
  if ! printf '%s\n' "$exported" | grep -qx "$n"; then
    echo "MISSING: $n"
    missing=$((missing + 1))
  fi
done
plain=$(printf '%s\n' "$names" | grep -c '^nccl' || true)
echo "$header declares $count functions ($plain nccl*, the rest pnccl*); $missing missing from $lib"
[ "$missing" -eq 0 ]
