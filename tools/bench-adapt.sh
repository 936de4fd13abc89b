#!/bin/bash
# bench-adapt.sh - watch tierfs move its shares when a tier slows down mid-run.
#
#   tools/bench-adapt.sh          (root: tierbed tiers "adapt-a" 1200/800 and "adapt-b" 400/300 MB/s)
#   ADAPT_PREFIX=h5 TIERBED_HOME=/var/lib/tierbed-h5 tools/bench-adapt.sh   (other tier names)
#
# Writes new files with fio (O_DIRECT 1 MiB, 6 jobs x QD 8) for 6 s, prints each tier's
# online estimate and share, caps tier b at a tenth (40/30 MB/s) with `tierbed.sh rate`,
# writes for 8 s more and prints them again. Then gives tier b its caps back and leaves the
# mount idle for IDLE seconds (default 20): only the recovery probes (small O_DIRECT
# write+read in the tier's .tierfs-meta, while its share is cut and it sees no traffic)
# can measure it then; prints the shares, writes 6 s more and prints them a last time.
# Needs fio.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
TB=${TIERBED:-$HERE/../shared/tierbed/tierbed.sh}
TIERFS=${TIERFS:-$HERE/target/release/tierfs}
export TIERBED_HOME=${TIERBED_HOME:-/var/lib/tierbed-adapt}
P=${ADAPT_PREFIX:-adapt}
IDLE=${IDLE:-20}
W=$(mktemp -d /tmp/tierfs-adapt.XXXXXX)
[ -x "$TIERFS" ] || (cd "$HERE" && cargo build --release)
cleanup() {
  mountpoint -q "$W/mnt" && "$TIERFS" unmount "$W/mnt" || true
  bash "$TB" down $P-a >/dev/null 2>&1 || true
  bash "$TB" down $P-b >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
bash "$TB" up $P-a 3 1200 800 /mnt/tb-$P-a --ram --force >/dev/null
bash "$TB" up $P-b 3 400 300 /mnt/tb-$P-b --ram --force >/dev/null
mkdir -p "$W/mnt"
cat >"$W/c.toml" <<EOT
[[tier]]
name = "a"
path = "/mnt/tb-$P-a/t"
create = true
read_bandwidth = "1200MB/s"
write_bandwidth = "800MB/s"
[[tier]]
name = "b"
path = "/mnt/tb-$P-b/t"
create = true
read_bandwidth = "400MB/s"
write_bandwidth = "300MB/s"
[placement]
adapt = true
[mount]
log_file = "$W/log"
passthrough = "off"
EOT
"$TIERFS" mount --config "$W/c.toml" "$W/mnt"
show() {
  python3 -c '
import json,sys
j=json.load(open(sys.argv[1]))
for t in j["tiers"]:
    e=t["est_write_bps"]
    print("  tier %s: share %.1f%%, online write estimate %s" % (t["name"], 100*t["share"], "%.0f MB/s" % (e/1e6) if e else "none yet"))' "$W/mnt/.tierfs/stats.json"
}
run() { mkdir -p "$W/mnt/$1"; fio --name="$1" --directory="$W/mnt/$1" --rw=write --bs=1M --size=256M --numjobs=6 \
  --iodepth=8 --ioengine=libaio --direct=1 --time_based --runtime="$2" --group_reporting --output-format=terse >/dev/null 2>&1; }
run first 6; echo "after 6 s at the full caps:"; show
bash "$TB" rate $P-b 40 30 >/dev/null
b0=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tiers"][1]["bytes_written"])' "$W/mnt/.tierfs/stats.json")
run second 8; echo "after 8 s with tier b capped at 40/30 MB/s:"; show
b1=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tiers"][1]["bytes_written"])' "$W/mnt/.tierfs/stats.json")
echo "  tier b took $(( (b1 - b0) / 8000000 )) MB/s of writes in those 8 s"
bash "$TB" rate $P-b 400 300 >/dev/null
sleep "$IDLE"; echo "after $IDLE s idle with tier b's caps back at 400/300 MB/s:"; show
python3 -c 'import json,sys; print("  probes of tier b so far: %d" % json.load(open(sys.argv[1]))["tiers"][1]["probes"])' "$W/mnt/.tierfs/stats.json"
rm -rf "$W/mnt/first"; run third 6; echo "after 6 s more of writes:"; show
grep -E "shares now|probe of" "$W/log" | tail -12
