#!/usr/bin/env bash
# Builds the training corpora from real English text that Debian/Ubuntu packages ship.
#   data/corpus.txt (default, ~2.7 MB): the fortune cookie collections (package fortunes:
#     quotations, literature, humour) and the license texts in /usr/share/common-licenses, less
#     data/corpus-val.txt, the validation split (data.val): every 20th 64 KiB block of the text
#     (scripts/split_corpus.py), which no training step reads.
#   data/corpus-large.txt.gz (--large, ~24 MB of text): the above plus the Perl manual
#     (package perl-doc, /usr/share/perl/*/pod) and the Python manual's reST sources (package
#     python3.X-doc, /usr/share/doc/python3.X/html/_sources), for runs long enough to see the
#     small corpus many times (2000 steps of gpt2-124m read 32.8M bytes). Gzipped so that it
#     travels to the GPU node beside the bundle; the configs that use it read
#     data/corpus-large.txt, which `gunzip -k` makes; its validation split (every 20th 64 KiB
#     block, not in the training text) is data/corpus-large-val.txt.gz.
# Idempotent. --large installs the two doc packages (root or sudo) when they are missing.
set -euo pipefail
case "${1:-}" in
  "" | --large) ;;
  *) echo "make-corpus: unknown argument '$1' (usage: make-corpus.sh [--large])" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
mkdir -p data
small=data/corpus.txt
small_val=data/corpus-val.txt
if [ -s "$small" ] && [ -s "$small_val" ]; then
  echo "make-corpus: $small exists ($(wc -c <"$small") bytes), and $small_val ($(wc -c <"$small_val") bytes)"
else
  # (A corpus.txt from before the validation split is rebuilt: it held the validation text.)
  tmp=$(mktemp)
  if [ -d /usr/share/games/fortunes ]; then
    # The text files are the ones without an extension (.dat are indexes, .u8 links).
    find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' | sort | xargs cat >> "$tmp"
  fi
  find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat >> "$tmp"
  python3 scripts/split_corpus.py "$tmp" "$small.part" "$small_val.part"
  rm -f "$tmp"
  mv "$small_val.part" "$small_val"
  mv "$small.part" "$small"
  echo "make-corpus: wrote $small ($(wc -c <"$small") bytes) and $small_val ($(wc -c <"$small_val") bytes)"
fi
[ "${1:-}" = "--large" ] || exit 0

large=data/corpus-large.txt.gz
large_val=data/corpus-large-val.txt.gz
if [ -s "$large" ] && [ -s "$large_val" ]; then
  echo "make-corpus: $large exists ($(wc -c <"$large") bytes), and $large_val"
  exit 0
fi
sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
pydoc=$(ls -d /usr/share/doc/python3.*/html/_sources 2>/dev/null | sort -V | tail -1 || true)
if ! ls -d /usr/share/perl/*/pod >/dev/null 2>&1 || [ -z "$pydoc" ]; then
  pyver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -q perl-doc \
    "python${pyver}-doc" >/dev/null
  pydoc=$(ls -d /usr/share/doc/python3.*/html/_sources | sort -V | tail -1)
fi
tmp=$(mktemp)
cat "$small" "$small_val" >> "$tmp"
find /usr/share/perl/*/pod -type f -name '*.pod' | sort | xargs cat >> "$tmp"
find "$pydoc" -type f -name '*.txt' | sort | xargs cat >> "$tmp"
python3 scripts/split_corpus.py "$tmp" "$tmp.train" "$tmp.val"
bytes=$(wc -c <"$tmp.train")
gzip -9 -c "$tmp.train" > "$large.part"
gzip -9 -c "$tmp.val" > "$large_val.part"
rm -f "$tmp" "$tmp.train" "$tmp.val"
mv "$large_val.part" "$large_val"
mv "$large.part" "$large"
echo "make-corpus: wrote $large ($bytes bytes of text, $(wc -c <"$large") compressed) and $large_val"
