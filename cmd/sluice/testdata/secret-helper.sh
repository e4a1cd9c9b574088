#!/bin/sh
# The external config filter's helper: prints the value of the key it is
# given, as a vault client would.
case "$1" in
  api_token) echo "tok-3xternal-s3cret" ;;
  *) echo "secret-helper: no key $1" >&2; exit 2 ;;
esac
