#!/usr/bin/env bash
# Builds sluice's release artifacts into dist/, on this machine, with no
# container daemon: nothing is fetched but Go modules (the pinned tools of
# tools/go.mod) and two of Debian's packages (ca-certificates and tzdata, for
# the image). docs/install.md describes what each artifact holds.
#
#   dist/sluice_<v>_linux_<arch>.tar.gz           the static binary, default config, unit
#   dist/sluice_<v>_linux_<arch>.sbom.cdx.json    CycloneDX SBOM: every Go module in the binary
#   dist/sluice_<v>_<arch>.deb, .rpm              the packages
#   dist/sluice_<v>_oci.tar                       the image, an OCI archive with both arches
#   dist/sluice-<v>.tgz                           the Helm chart
#   dist/SHA256SUMS
#
# Settings (environment):
#   VERSION  the version, SemVer; default from git: the nearest vX.Y.Z tag, or
#            0.1.0-dev.<commits> without one
#   ARCHES   "amd64 arm64" (Go's names)
#   TARGETS  "tar sbom deb rpm image chart" (a subset builds less; the tests use that)
#   DIST     dist (relative to the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export GOFLAGS=${GOFLAGS:--buildvcs=false}

ARCHES=${ARCHES:-amd64 arm64}
TARGETS=${TARGETS:-tar sbom deb rpm image chart}
DIST=${DIST:-dist}
case "$DIST" in /*) ;; *) DIST=$root/$DIST ;; esac
want() { [[ " $TARGETS " == *" $1 "* ]]; }

if git rev-parse --git-dir >/dev/null 2>&1; then
  commit=$(git rev-parse HEAD)
  epoch=$(git log -1 --format=%ct)
  default_version=$(git describe --tags --match 'v[0-9]*' --abbrev=0 2>/dev/null | sed 's/^v//' || true)
  [ -n "$default_version" ] || default_version=0.1.0-dev.$(git rev-list --count HEAD)
else
  commit=unknown
  epoch=$(date +%s)
  default_version=0.1.0-dev
fi
VERSION=${VERSION:-$default_version}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$epoch}
date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
echo "== sluice $VERSION ($commit, $date): $TARGETS for $ARCHES into $DIST"
mkdir -p "$DIST"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The pinned tools, built from tools/go.mod (the Go build cache keeps them).
tool() {
  local name=$1 pkg=$2
  if [ ! -x "$work/bin/$name" ]; then
    go build -C tools -o "$work/bin/$name" "$pkg"
  fi
  echo "$work/bin/$name"
}

# Static binaries, stamped for `sluice version`.
for arch in $ARCHES; do
  out=$DIST/linux_$arch/sluice
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X main.version=$VERSION -X main.commit=$commit -X main.date=$date" \
    -o "$out" ./cmd/sluice
  echo "   $out ($(du -h "$out" | cut -f1))"
done

if want tar; then
  for arch in $ARCHES; do
    name=sluice_${VERSION}_linux_${arch}
    stage=$work/$name
    mkdir -p "$stage"
    cp "$DIST/linux_$arch/sluice" README.md packaging/sluice.properties packaging/systemd/sluice.service \
      packaging/sluice.default "$stage/"
    cp docs/install.md "$stage/INSTALL.md"
    tar -C "$work" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
      -cf - "$name" | gzip -n -9 >"$DIST/$name.tar.gz"
    echo "   $DIST/$name.tar.gz"
  done
fi

if want sbom; then
  sbom=$(tool cyclonedx-gomod github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod)
  for arch in $ARCHES; do
    "$sbom" bin -json -noserial -notimestamp -output-version 1.5 -version "v$VERSION" \
      -output "$DIST/sluice_${VERSION}_linux_${arch}.sbom.cdx.json" "$DIST/linux_$arch/sluice" 2>/dev/null
    echo "   $DIST/sluice_${VERSION}_linux_${arch}.sbom.cdx.json"
  done
fi

if want deb || want rpm; then
  nfpm=$(tool nfpm github.com/goreleaser/nfpm/v2/cmd/nfpm)
  # The package's changelog, in Debian's format; the git history is the
  # real one.
  {
    printf 'sluice (%s) unstable; urgency=medium\n\n' "$(echo "$VERSION" | sed 's/-/~/')"
    printf '  * Built from commit %s (see the repository history).\n\n' "${commit:0:12}"
    printf ' -- sluice maintainers <sluice@localhost>  %s\n' "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
  } | gzip -n -9 >"$work/changelog.gz"
  for arch in $ARCHES; do
    for kind in deb rpm; do
      want $kind || continue
      target=$DIST/sluice_${VERSION}_${arch}.$kind
      VERSION=$VERSION ARCH=$arch BIN=$DIST/linux_$arch/sluice CHANGELOG=$work/changelog.gz \
        "$nfpm" package --config packaging/nfpm.yaml --packager $kind --target "$target" >/dev/null
      echo "   $target ($(du -h "$target" | cut -f1))"
    done
  done
fi

if want image; then
  # CA certificates and time zones from Debian's packages, not from this
  # machine's /etc (which may hold local CAs that do not belong in an image).
  debs=$work/debs
  mkdir -p "$debs/root"
  if ! (cd "$debs" && apt-get download -qq ca-certificates tzdata 2>/dev/null); then
    apt-get update -qq
    (cd "$debs" && apt-get download -qq ca-certificates tzdata)
  fi
  for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$debs/root"; done
  bins=()
  for arch in $ARCHES; do bins+=(-bin "$arch=$DIST/linux_$arch/sluice"); done
  go run -C tools ./mkimage -version "$VERSION" -revision "$commit" -out "$DIST/sluice_${VERSION}_oci.tar" \
    -certs "$debs/root/usr/share/ca-certificates/mozilla" -zoneinfo "$debs/root/usr/share/zoneinfo" \
    -config "$root/packaging/image/sluice.properties" "${bins[@]}"
  echo "   $DIST/sluice_${VERSION}_oci.tar ($(du -h "$DIST/sluice_${VERSION}_oci.tar" | cut -f1); $(cd "$debs" && ls *.deb | tr '\n' ' '))"
fi

if want chart; then
  helm=$(tool helm helm.sh/helm/v4/cmd/helm)
  for mode in daemonset deployment statefulset; do
    "$helm" lint --quiet --strict --set mode=$mode deploy/helm/sluice >/dev/null
  done
  "$helm" package deploy/helm/sluice --version "$VERSION" --app-version "$VERSION" -d "$DIST" >/dev/null
  echo "   $DIST/sluice-$VERSION.tgz"
fi

(cd "$DIST" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | sort | xargs -r sha256sum >SHA256SUMS)
echo "   $DIST/SHA256SUMS"
