#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: installs the real peers some
# tests talk to (when missing), then runs every test with the race detector.
# Extra arguments go to `go test` (e.g. scripts/test.sh -run Syslog).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=${GOFLAGS:--buildvcs=false}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=
apt_install() {
  [ -n "$apt_updated" ] || { as_root apt-get update -qq; apt_updated=1; }
  as_root apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@"
}

# VictoriaLogs serves a real Elasticsearch _bulk API for the elasticsearch
# sink's tests, which find it in $(go env GOPATH)/bin.
if [ ! -x "$(go env GOPATH)/bin/victoria-logs" ]; then
  echo "== installing victoria-logs (test peer of the elasticsearch sink)"
  go install github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs@v1.52.1
fi
# VersityGW serves S3 over a local directory for the hdfs sink's s3a://
# tests, which find it in $(go env GOPATH)/bin (about 2 minutes to build).
if [ ! -x "$(go env GOPATH)/bin/versitygw" ]; then
  echo "== installing versitygw (S3 test peer of the hdfs sink)"
  go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
fi
# logrotate rotates the files the taildir source's tests tail.
if ! command -v logrotate >/dev/null && [ ! -x /usr/sbin/logrotate ]; then
  echo "== installing logrotate (test peer of the taildir source)"
  apt_install logrotate
fi
# util-linux's logger sends RFC 3164/5424 to the syslog sources' tests
# (bsdutils is Essential in Debian; installed in case the image trimmed it).
if ! command -v logger >/dev/null; then
  echo "== installing bsdutils (logger, test peer of the syslog sources)"
  apt_install bsdutils
fi

# A JRE runs java.util.Properties itself on the properties parser's cases
# (internal/config TestParsePropertiesMatchesJava, `java PropsDump.java`: the
# source launcher's compiler is in the headless JRE's modules).
if ! command -v java >/dev/null; then
  echo "== installing openjdk-17-jre-headless (java.util.Properties, test peer of the config parser)"
  apt_install openjdk-17-jre-headless
fi

# Debian's chromium loads the status page in a real headless browser
# (internal/systemtest/monitoring drives it through the DevTools protocol; chromium-driver
# is its WebDriver, for whoever drives it that way), and tmux is the real
# terminal in which `sluice top` is tested.
if ! command -v chromium >/dev/null; then
  echo "== installing chromium and chromium-driver (test peers of the status page)"
  apt_install chromium chromium-driver
fi
if ! command -v tmux >/dev/null; then
  echo "== installing tmux (test peer of sluice top)"
  apt_install tmux
fi

# Debian's MIT Kerberos KDC: the Kerberos tests (internal/testutil/kdc) start
# their own realm with krb5kdc, kdb5_util and kadmin.local.
have_sbin() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ]; }
if ! have_sbin krb5kdc || ! have_sbin kadmin.local; then
  echo "== installing krb5-kdc and krb5-admin-server (the KDC of the Kerberos tests)"
  DEBIAN_FRONTEND=noninteractive apt_install krb5-kdc krb5-admin-server >/dev/null
fi
# keytool makes the Java keystores of internal/tlsconf/testdata/keystores
# (make.sh; SLUICE_KEYTOOL=1 go test -run TestKeytoolStoresAsMade ./internal/tlsconf).
if ! command -v keytool >/dev/null; then
  echo "== installing openjdk-17-jre-headless (keytool, maker of the test keystores)"
  apt_install openjdk-17-jre-headless
fi

# Debian's thrift-compiler generates Python from internal/thriftrpc/flume.thrift
# and Debian's python3-thrift runs it: the Thrift client and server the thrift
# source's and sink's tests talk to (the tests use /usr/bin/python3).
if ! command -v thrift >/dev/null || ! /usr/bin/python3 -c 'import thrift' 2>/dev/null; then
  echo "== installing thrift-compiler and python3-thrift (test peers of the thrift source and sink)"
  apt_install thrift-compiler python3-thrift
fi
# avsc (npm), an Avro RPC implementation independent of Java's, serves the
# avro sink's tests; it goes into a cache directory, not the repository.
npm_peers="$(go env GOPATH)/sluice-test-peers/npm"
if [ ! -f "$npm_peers/node_modules/avsc/package.json" ]; then
  echo "== installing avsc (test peer of the avro sink)"
  mkdir -p "$npm_peers"
  npm install --prefix "$npm_peers" --no-audit --no-fund --silent avsc@5.7.9
fi

# The packaging tests (tools/pkgtest) build the .deb and .rpm, install the
# .deb on this machine (as root), verify the unit with systemd-analyze,
# inspect the rpm with rpm, and build the image from Debian's
# ca-certificates and tzdata (apt-get download).
if [ "$(id -u)" = 0 ]; then
  if ! command -v rpm >/dev/null; then
    echo "== installing rpm (the packaging tests inspect the .rpm)"
    apt_install rpm
  fi
  if ! command -v systemd-analyze >/dev/null; then
    echo "== installing systemd (systemd-analyze verifies the unit; nothing is started)"
    apt_install systemd
  fi
  if [ -z "$apt_updated" ] && ! apt-cache show ca-certificates tzdata >/dev/null 2>&1; then
    as_root apt-get update -qq
    apt_updated=1
  fi
fi

go test -race -shuffle=on -timeout 20m "$@" ./...
# The tools module: scripts/package.sh's own tools and the packaging tests
# (kept out of the agent's go.mod). No -race: it holds no concurrent code of
# sluice's, and the race detector would double the build of Helm.
(cd tools && go test -shuffle=on -timeout 20m "$@" ./...)
