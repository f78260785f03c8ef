#!/bin/sh
# Re-create the golden tars written by GNU tar (1.34 made the committed ones).
# Run from this folder: sh make_gnu_tars.sh
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
long="a-directory-name-long-enough-that-the-member-path-is-well-over-one-hundred-bytes-long-in-total"
mkdir -p "$work/ds/$long/deeper" "$work/ds/empty-dir"
printf 'cat' > "$work/ds/0001.cls"
printf '\377\330\377\340fake jpeg bytes' > "$work/ds/0001.jpg"
printf '{"w": 640}' > "$work/ds/0001.json"
head -c 3000 /dev/zero | tr '\0' 'x' > "$work/ds/$long/deeper/0002.seg.png"
printf 'dog' > "$work/ds/$long/deeper/0002.cls"
printf 'readme, no dot in the key part' > "$work/ds/README"
ln -s "0001.jpg" "$work/ds/0003.jpg"
# A basename over 100 bytes cannot be split into ustar prefix + name: pax 'path' / GNU 'L'.
base="0004-$(printf 'b%.0s' $(seq 1 110))"
printf 'long basename' > "$work/ds/$long/$base.txt"
printf 'x' > "$work/ds/$long/$base.cls"
printf 'grüße' > "$work/ds/ünïcode-0005.txt"
opts="--sort=name --mtime=@1700000000 --owner=0 --group=0 --numeric-owner -C $work"
tar $opts --format=gnu -cf gnu-longnames.tar ds
tar $opts --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -cf posix-longnames.tar ds
