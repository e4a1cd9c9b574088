#!/bin/sh
# A secret helper as Flume's external config filter runs it: "command KEY",
# the value on the first line of stdout, exit 0.
case "$1" in
  db_password) printf '  s3cr3t-from-helper  \nsecond line is ignored\n' ;;
  latin1) printf 'caf\351\n' ;;
  empty) ;;
  slow) sleep 5; echo late ;;
  *) echo "no secret named $1" >&2; exit 3 ;;
esac
