#!/bin/sh
# Installs a prebuilt Memex: downloads the release archive for this machine and its SHA-256
# sum, checks the sum, and puts `memex` and `memex-inject` into ~/.local/bin.
#
#   curl -fsSL https://github.com/OWNER/REPO/releases/latest/download/install.sh | sh
#
# The copy attached to a release knows its repository; this one in the source tree needs
# MEMEX_REPO=owner/name (or MEMEX_INSTALL_BASE). Settings, all optional:
#   MEMEX_VERSION       a release tag (v0.1.0); the latest release by default
#   MEMEX_INSTALL_DIR   where the binaries go (~/.local/bin)
#   MEMEX_INSTALL_BASE  a folder URL holding the archives (a mirror); replaces the GitHub URL
set -eu

REPO="${MEMEX_REPO:-@MEMEX_REPO@}"
VERSION="${MEMEX_VERSION:-latest}"
BASE="${MEMEX_INSTALL_BASE:-}"
DEST="${MEMEX_INSTALL_DIR:-${HOME:?HOME is not set}/.local/bin}"

say() { echo "memex install: $*" >&2; }
die() { say "$*"; exit 1; }

os=$(uname -s)
arch=$(uname -m)
case "$os/$arch" in
  Linux/x86_64 | Linux/amd64) target=x86_64-unknown-linux-gnu ;;
  Linux/aarch64 | Linux/arm64) target=aarch64-unknown-linux-gnu ;;
  Darwin/arm64) target=aarch64-apple-darwin ;;
  Darwin/x86_64) target=x86_64-apple-darwin ;;
  *) die "no prebuilt binary for $os $arch; build from source (README, quick start)" ;;
esac

if [ -z "$BASE" ]; then
  case "$REPO" in
    */*) ;;
    *) die "set MEMEX_REPO=owner/name (or MEMEX_INSTALL_BASE=URL): this copy does not know its repository" ;;
  esac
  if [ "$VERSION" = latest ]; then
    BASE="https://github.com/$REPO/releases/latest/download"
  else
    BASE="https://github.com/$REPO/releases/download/$VERSION"
  fi
fi

if command -v curl >/dev/null 2>&1; then
  fetch() { curl --proto '=https,http' -fsSL "$1" -o "$2"; }
elif command -v wget >/dev/null 2>&1; then
  fetch() { wget -q "$1" -O "$2"; }
else
  die "needs curl or wget"
fi
if command -v sha256sum >/dev/null 2>&1; then
  digest() { sha256sum "$1" | cut -d' ' -f1; }
elif command -v shasum >/dev/null 2>&1; then
  digest() { shasum -a 256 "$1" | cut -d' ' -f1; }
else
  die "needs sha256sum or shasum to check what it downloads"
fi

name="memex-$target"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
say "downloading $BASE/$name.tar.gz"
fetch "$BASE/$name.tar.gz" "$tmp/$name.tar.gz" || die "could not download $BASE/$name.tar.gz"
fetch "$BASE/$name.tar.gz.sha256" "$tmp/$name.tar.gz.sha256" \
  || die "could not download $BASE/$name.tar.gz.sha256"
want=$(cut -d' ' -f1 <"$tmp/$name.tar.gz.sha256" | tr 'A-F' 'a-f')
got=$(digest "$tmp/$name.tar.gz")
case "$want" in
  *[!0-9a-f]* | "") die "the checksum file holds no SHA-256 sum" ;;
esac
[ "${#want}" -eq 64 ] || die "the checksum file holds no SHA-256 sum"
[ "$want" = "$got" ] || die "checksum mismatch for $name.tar.gz (expected $want, got $got): nothing installed"

mkdir "$tmp/x"
tar -xzf "$tmp/$name.tar.gz" -C "$tmp/x"
for b in memex memex-inject; do
  [ -f "$tmp/x/$name/$b" ] || die "the archive has no $name/$b"
done
mkdir -p "$DEST"
for b in memex memex-inject; do
  # Replace atomically, so a running service keeps its binary.
  cp "$tmp/x/$name/$b" "$DEST/.$b.new"
  chmod 755 "$DEST/.$b.new"
  mv -f "$DEST/.$b.new" "$DEST/$b"
done
say "installed $("$DEST/memex" --version) in $DEST"
case ":$PATH:" in
  *":$DEST:"*) ;;
  *) say "add $DEST to your PATH" ;;
esac
