#!/usr/bin/env bash
# Opens an HTML report of moeplan (whatif, reproduce) in headless Chromium, as a person would,
# and checks that it renders: the browser loads it without a console message, its parsed DOM
# holds at least MIN_CHARTS charts with marks drawn in them, and the screenshot shows the
# series colour (so the SVG was painted, not just parsed).
#
#   tools/check_report.sh REPORT.html [MIN_CHARTS] [SCREENSHOT.png]
#
# Exits 0 when it renders, 1 with one line saying what failed, 77 when no browser is installed
# (tools/install-deps.sh installs chromium-headless-shell).
set -euo pipefail
report=${1:?usage: tools/check_report.sh REPORT.html [MIN_CHARTS] [SCREENSHOT.png]}
min_charts=${2:-1}
[ -f "$report" ] || { echo "check_report: $report: no such file" >&2; exit 1; }
browser=""
for b in chromium-headless-shell chromium google-chrome; do
  if command -v "$b" >/dev/null; then browser=$b; break; fi
done
[ -n "$browser" ] || { echo "check_report: no headless Chromium found" >&2; exit 77; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
url="file://$(realpath "$report")"
shot=${3:-$work/shot.png}
# As root (CI, containers) Chromium needs --no-sandbox; the report is a local file without script.
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --enable-logging=stderr --v=0)

"$browser" "${flags[@]}" --dump-dom "$url" >"$work/dom.html" 2>"$work/dom.log" || {
  echo "check_report: $report: $browser exited $? loading it" >&2
  exit 1
}
if grep -q ':CONSOLE' "$work/dom.log"; then
  echo "check_report: $report: console says $(grep -m1 ':CONSOLE' "$work/dom.log" | cut -d']' -f2-)" >&2
  exit 1
fi
charts=$(grep -o '<svg' "$work/dom.html" | wc -l || true)
marks=$(grep -oE '<(polyline|rect) ' "$work/dom.html" | wc -l || true)
if [ "$charts" -lt "$min_charts" ] || [ "$marks" -lt "$charts" ]; then
  echo "check_report: $report: the rendered page has $charts chart(s) and $marks mark(s); expected at least $min_charts chart(s), each with a line or bar" >&2
  exit 1
fi

# Tall enough for every chart (300 px each) plus the tables; wide enough for a chart (560 px).
height=$((charts * 320 + 1200))
"$browser" "${flags[@]}" --screenshot="$shot" --window-size=800,"$height" "$url" \
  >/dev/null 2>"$work/shot.log" || {
  echo "check_report: $report: $browser could not take a screenshot" >&2
  exit 1
}
# Count the pixels painted in the first series colour (#1f77b4, svg_chart.cpp) in the PNG.
painted=$(python3 - "$shot" <<'EOF'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width, height, kind = 8, b"", 0, 0, 0
while pos < len(data):
    length, tag = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if tag == b"IHDR":
        width, height, depth, kind = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and kind in (2, 6), "unexpected PNG format"
    elif tag == b"IDAT":
        idat += body
    pos += 12 + length
bpp = 3 if kind == 2 else 4
raw, stride = zlib.decompress(idat), width * bpp
prev, hits, at = bytearray(stride), 0, 0
for _ in range(height):
    f, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
    at += 1 + stride
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for i in range(0, stride, bpp):
        r, g, bl = line[i], line[i + 1], line[i + 2]
        if abs(r - 31) < 24 and abs(g - 119) < 24 and abs(bl - 180) < 24:
            hits += 1
    prev = line
print(hits)
EOF
)
if [ "$charts" -gt 0 ] && [ "$painted" -lt $((charts * 50)) ]; then
  echo "check_report: $report: the screenshot shows $painted pixel(s) of the series colour for $charts chart(s); the charts did not paint" >&2
  exit 1
fi
echo "check_report: $report renders in $browser: $charts chart(s), $marks mark(s), $painted series pixel(s), no console message"
