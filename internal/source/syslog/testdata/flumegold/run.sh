#!/bin/sh
# Regenerates ../flume_golden.txt by running Flume's own SyslogUtils and
# SyslogParser (from a checkout of github.com/apache/flume, path in $1) over
# ../flume_cases.txt, with stub Event/EventBuilder/ByteBuf classes (here)
# and the clock fixed at 2026-06-15T12:00:00Z, zone Asia/Kolkata.
# Needs a JDK, python3 and the jars of slf4j-api, guava and joda-time
# (Debian: libslf4j-java libguava-java libjoda-time-java).
#   sh run.sh /path/to/flume > ../flume_golden.txt
set -e
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
mkdir -p "$tmp/src/org/apache/flume/source"
for f in SyslogUtils SyslogParser SyslogSourceConfigurationConstants; do
  cp "$1/flume-ng-core/src/main/java/org/apache/flume/source/$f.java" "$tmp/src/org/apache/flume/source/"
done
CP=/usr/share/java/slf4j-api.jar:/usr/share/java/guava.jar:/usr/share/java/joda-time.jar
javac -nowarn -d "$tmp/classes" -cp $CP $(find "$here" "$tmp/src" -name '*.java') 2>/dev/null
grep -v '^#' "$here/../flume_cases.txt" | python3 -c '
import sys, codecs
for l in sys.stdin:
    l = l.rstrip("\n")
    if l:
        k, keep, size, q = l.split(" ", 3)
        print(k, keep, size, codecs.escape_decode(q[1:-1].encode())[0].hex())
' | java -Duser.timezone=Asia/Kolkata -Duser.language=en -cp "$tmp/classes:$CP" Gold 1781524800000 2>/dev/null
rm -rf "$tmp"
