#!/usr/bin/env bash
# Builds data/corpus.txt: real English text that Debian/Ubuntu packages ship -- the fortune
# cookie collections (package fortunes: quotations, literature, humour) and the license texts in
# /usr/share/common-licenses (package base-files). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data
out=data/corpus.txt
[ -s "$out" ] && { echo "make-corpus: $out exists ($(wc -c <"$out") bytes)"; exit 0; }
tmp=$(mktemp)
if [ -d /usr/share/games/fortunes ]; then
  # The text files are the ones without an extension (.dat are indexes, .u8 links).
  find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' | sort | xargs cat >> "$tmp"
fi
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat >> "$tmp"
mv "$tmp" "$out"
echo "make-corpus: wrote $out ($(wc -c <"$out") bytes)"
