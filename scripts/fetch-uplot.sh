#!/usr/bin/env bash
# Fetches uPlot, the status page's chart library, from the npm registry at the
# pinned version and copies its built files and licence into
# server/statusui/, where go:embed picks them up. Run it to refresh or bump
# the copy (change UPLOT_VERSION), then commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
UPLOT_VERSION=${UPLOT_VERSION:-1.6.32}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$UPLOT_VERSION" >/dev/null && tar -xzf "uplot-$UPLOT_VERSION.tgz")
dest=server/statusui
cp "$tmp/package/dist/uPlot.iife.min.js" "$dest/uPlot.iife.min.js"
cp "$tmp/package/dist/uPlot.min.css" "$dest/uPlot.min.css"
cp "$tmp/package/LICENSE" "$dest/uPlot.LICENSE"
echo "uplot@$UPLOT_VERSION" > "$dest/uPlot.VERSION"
echo "fetch-uplot.sh: uplot@$UPLOT_VERSION copied to $dest"
