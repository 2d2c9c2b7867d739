#!/usr/bin/env bash
# Per-thread CPU of one demo JVM (build/demo/java Svc, C1 only) serving 10 requests a
# second from a keep-alive client, under JFR recordings started and stopped in turn
# on the same JVM: none, settings=profile, profile without jdk.NativeMethodSample,
# default without it. Exact counters (/proc/<pid>/task/*/stat, utime+stime) over 30 s
# each, 2 rounds; prints ms of CPU per second by thread (pool threads summed).
# Needs java, jcmd, python3 and the demo's Java classes (make demo-services).
# bench/RESULTS.md, "JFR's native-method samples".
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SERVICE_NAME=h LISTEN=127.0.0.1:18108 WORK=cpu=0.5ms,sleep=2ms java -XX:TieredStopAtLevel=1 -cp build/demo/java Svc >/dev/null 2>&1 &
jvm=$!
sleep 2
python3 - <<'PY' &
import http.client, time
c = http.client.HTTPConnection("127.0.0.1", 18108)
t = time.time()
while True:
    try:
        c.request("GET", "/"); c.getresponse().read()
    except Exception:
        time.sleep(0.5); c = http.client.HTTPConnection("127.0.0.1", 18108); continue
    t += 0.1
    time.sleep(max(0, t - time.time()))
PY
load=$!
trap 'kill $load $jvm 2>/dev/null; rm -rf "$tmp"' EXIT
snap() { for f in /proc/$jvm/task/*/stat; do awk '{c=$0; sub(/^[0-9]+ \(/,"",c); sub(/\) .*/,"",c); split($0,a,") "); split(a[2],b," "); print c "\t" b[12]+b[13]}' $f 2>/dev/null; done | awk -F'\t' '{if ($1 ~ /^pool-/) $1="pool threads"; s[$1]+=$2} END{for (k in s) print k "\t" s[k]}' | sort; }
measure() {
  local name=$1; shift
  if [[ $# -gt 0 ]]; then jcmd $jvm JFR.start name=x "$@" maxage=120s maxsize=67108864 disk=true >/dev/null; fi
  sleep 5; snap > "$tmp/a"; sleep 30; snap > "$tmp/b"
  if [[ $# -gt 0 ]]; then jcmd $jvm JFR.stop name=x >/dev/null; fi
  echo "== $name (ms CPU per s)"
  join -t $'\t' "$tmp/a" "$tmp/b" | awk -F'\t' '{d=($3-$2)*10/30; t+=d; if (d>0.2) printf "  %-22s %5.1f\n", $1, d} END{printf "  %-22s %5.1f\n", "TOTAL", t}'
}
sleep 25
for r in 1 2; do
  measure none
  measure profile settings=profile
  measure profile-nonative settings=profile 'jdk.NativeMethodSample#enabled=false'
  measure default-nonative settings=default 'jdk.NativeMethodSample#enabled=false'
done
