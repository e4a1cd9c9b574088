// Command mkimage builds sluice's container image, without a container
// daemon, as an OCI image archive: a tar of an OCI image layout whose index
// lists one image per architecture. Each image is two layers on nothing
// (scratch): the files every architecture shares (users, CA certificates,
// time zones, the default configuration, the state directory), and the
// static binary of its architecture.
//
//	mkimage -version V -out dist/sluice_V_oci.tar -certs DIR -zoneinfo DIR \
//	        -config FILE -bin amd64=dist/linux_amd64/sluice [-bin arm64=...]
//
// -certs is the mozilla directory of Debian's ca-certificates package (its
// .crt files are concatenated into /etc/ssl/certs/ca-certificates.crt, as
// update-ca-certificates does), -zoneinfo the zoneinfo directory of Debian's
// tzdata package. Timestamps come from SOURCE_DATE_EPOCH, so the same inputs
// give the same digests.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: not root, and not a UID a host is likely to give a
// person (the OpenTelemetry Collector's choice too).
const (
	uid = 10001
	gid = 10001
)

// Ports the image exposes: the status endpoint (--http), Flume's avro and
// the syslog listener of the default configuration.
var exposed = []string{"41414/tcp", "4141/tcp", "5514/tcp", "5514/udp"}

type binFlag map[string]string

func (b binFlag) String() string { return fmt.Sprint(map[string]string(b)) }
func (b binFlag) Set(s string) error {
	arch, file, ok := strings.Cut(s, "=")
	if !ok || arch == "" || file == "" {
		return fmt.Errorf("-bin %q: want ARCH=FILE", s)
	}
	b[arch] = file
	return nil
}

func main() {
	bins := binFlag{}
	version := flag.String("version", "", "the image's version (a label and the archive's reference name)")
	revision := flag.String("revision", "", "the commit it was built from (a label)")
	out := flag.String("out", "", "the OCI archive to write")
	certs := flag.String("certs", "", "Debian's ca-certificates mozilla directory (.crt files)")
	zoneinfo := flag.String("zoneinfo", "", "Debian's tzdata zoneinfo directory")
	conf := flag.String("config", "", "the default configuration, installed as /etc/sluice/sluice.properties")
	flag.Var(bins, "bin", "ARCH=FILE: the static sluice binary for linux/ARCH (repeat per architecture)")
	flag.Parse()
	if *version == "" || *out == "" || *certs == "" || *zoneinfo == "" || *conf == "" || len(bins) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := build(*version, *revision, *out, *certs, *zoneinfo, *conf, bins); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

// epoch is SOURCE_DATE_EPOCH, or 0: every timestamp in the image.
func epoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// tarWriter writes a layer's entries with fixed times and owners.
type tarWriter struct {
	tw   *tar.Writer
	when time.Time
	dirs map[string]bool
}

func (w *tarWriter) header(h *tar.Header) error {
	h.ModTime, h.Format = w.when, tar.FormatPAX
	if h.Uname == "" {
		h.Uname, h.Gname = "root", "root"
	}
	return w.tw.WriteHeader(h)
}

// dir adds name and its parents as directories (root-owned, 0755) unless
// added already.
func (w *tarWriter) dir(name string, mode int64, owner int) error {
	name = strings.Trim(name, "/")
	if name == "" || w.dirs[name] {
		return nil
	}
	if parent := path.Dir(name); parent != "." {
		if err := w.dir(parent, 0o755, 0); err != nil {
			return err
		}
	}
	w.dirs[name] = true
	h := &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: owner, Gid: owner}
	if owner == uid {
		h.Uname, h.Gname = "sluice", "sluice"
	}
	return w.header(h)
}

func (w *tarWriter) file(name string, mode int64, data []byte) error {
	if err := w.dir(path.Dir(name), 0o755, 0); err != nil {
		return err
	}
	if err := w.header(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(name, "/"), Mode: mode, Size: int64(len(data))}); err != nil {
		return err
	}
	_, err := w.tw.Write(data)
	return err
}

func (w *tarWriter) symlink(name, target string) error {
	if err := w.dir(path.Dir(name), 0o755, 0); err != nil {
		return err
	}
	return w.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(name, "/"), Linkname: target, Mode: 0o777})
}

// layer builds a layer from fill's entries, uncompressed in memory (a few
// megabytes), gzip-compressed as an OCI layer.
func layer(when time.Time, fill func(w *tarWriter) error) (v1.Layer, error) {
	var buf bytes.Buffer
	w := &tarWriter{tw: tar.NewWriter(&buf), when: when, dirs: map[string]bool{}}
	if err := fill(w); err != nil {
		return nil, err
	}
	if err := w.tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// baseLayer holds what every architecture shares.
func baseLayer(when time.Time, certsDir, zoneDir, confFile string) (v1.Layer, error) {
	bundle, err := caBundle(certsDir)
	if err != nil {
		return nil, err
	}
	conf, err := os.ReadFile(confFile)
	if err != nil {
		return nil, err
	}
	return layer(when, func(w *tarWriter) error {
		files := []struct {
			name string
			mode int64
			data string
		}{
			{"etc/passwd", 0o644, "root:x:0:0:root:/root:/sbin/nologin\n" +
				fmt.Sprintf("sluice:x:%d:%d:sluice agent:/var/lib/sluice:/sbin/nologin\n", uid, gid) +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"},
			{"etc/group", 0o644, fmt.Sprintf("root:x:0:\nsluice:x:%d:\nnobody:x:65534:\n", gid)},
			// Go's resolver reads it: files first, then DNS.
			{"etc/nsswitch.conf", 0o644, "hosts: files dns\n"},
			{"etc/ssl/certs/ca-certificates.crt", 0o644, string(bundle)},
			{"etc/sluice/sluice.properties", 0o644, string(conf)},
		}
		for _, f := range files {
			if err := w.file(f.name, f.mode, []byte(f.data)); err != nil {
				return err
			}
		}
		if err := w.dir("tmp", 0o1777, 0); err != nil {
			return err
		}
		if err := w.dir("var/lib/sluice", 0o750, uid); err != nil {
			return err
		}
		return addTree(w, zoneDir, "usr/share/zoneinfo")
	})
}

// caBundle concatenates the .crt files of dir in name order, as
// update-ca-certificates builds ca-certificates.crt.
func caBundle(dir string) ([]byte, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".crt") {
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no .crt files in %s", dir)
	}
	sort.Strings(names)
	var out []byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, bytes.TrimRight(b, "\n")...)
		out = append(out, '\n')
	}
	return out, nil
}

// addTree adds the files, directories and symlinks under src as dst.
func addTree(w *tarWriter, src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			return w.dir(name, 0o755, 0)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return w.symlink(name, target)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return w.file(name, 0o644, b)
		}
		return nil
	})
}

func binLayer(when time.Time, bin string) (v1.Layer, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return layer(when, func(w *tarWriter) error {
		if err := w.file("usr/bin/sluice", 0o755, b); err != nil {
			return err
		}
		// Called by this name, sluice is Flume's launcher.
		return w.symlink("usr/bin/flume-ng", "sluice")
	})
}

func build(version, revision, out, certsDir, zoneDir, confFile string, bins map[string]string) error {
	when, err := epoch()
	if err != nil {
		return err
	}
	base, err := baseLayer(when, certsDir, zoneDir, confFile)
	if err != nil {
		return err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "sluice",
		"org.opencontainers.image.description": "Event and log collection agent, a drop-in for Apache Flume",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.created":     when.Format(time.RFC3339),
		"org.opencontainers.image.source":      "https://github.com/sluicehq/sluice",
	}
	if revision != "" {
		labels["org.opencontainers.image.revision"] = revision
	}
	ports := map[string]struct{}{}
	for _, p := range exposed {
		ports[p] = struct{}{}
	}
	var idx v1.ImageIndex = empty.Index
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	arches := make([]string, 0, len(bins))
	for a := range bins {
		arches = append(arches, a)
	}
	sort.Strings(arches)
	for _, arch := range arches {
		bl, err := binLayer(when, bins[arch])
		if err != nil {
			return err
		}
		img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		if img, err = mutate.AppendLayers(img, base, bl); err != nil {
			return err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture, cf.Created = "linux", arch, v1.Time{Time: when}
		cf.Author = "sluice"
		cf.Config = v1.Config{
			User:         fmt.Sprintf("%d:%d", uid, gid),
			Entrypoint:   []string{"/usr/bin/sluice"},
			Cmd:          []string{"agent", "-f", "/etc/sluice/sluice.properties", "-n", "sluice", "--http", "0.0.0.0:41414"},
			WorkingDir:   "/var/lib/sluice",
			Env:          []string{"PATH=/usr/bin", "HOME=/var/lib/sluice", "TZ=UTC"},
			ExposedPorts: ports,
			Volumes:      map[string]struct{}{"/var/lib/sluice": {}},
			Labels:       labels,
			// SIGTERM drains the channels (--shutdown-timeout, 20 s):
			// the runtime's stop timeout must be above it.
			StopSignal: "SIGTERM",
		}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	return writeArchive(out, version, idx)
}

// writeArchive writes idx as an OCI image layout in a temporary directory,
// named sluice:version in index.json, then tars it to out (an "oci-archive", as
// podman load and skopeo read it).
func writeArchive(out, version string, idx v1.ImageIndex) error {
	dir, err := os.MkdirTemp("", "sluice-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": "sluice:" + version,
	})); err != nil {
		return err
	}
	when, _ := epoch()
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: when, Mode: 0o644, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(err, os.Remove(out+".tmp"))
	}
	return os.Rename(out+".tmp", out)
}
