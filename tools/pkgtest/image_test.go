package pkgtest

import (
	"archive/tar"
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"
)

// untar extracts r into dir, as root: owners, modes and symlinks as the tar
// has them; a path that would leave dir is an error.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dir)+string(filepath.Separator)) && name != filepath.Clean(dir) {
			return fmt.Errorf("tar entry %q leaves the directory", h.Name)
		}
		mode := os.FileMode(h.Mode).Perm() | os.FileMode(h.Mode)&(os.ModeSticky)
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, name); err != nil {
				return err
			}
			if err := os.Lchown(name, h.Uid, h.Gid); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("tar entry %q: type %c not expected in sluice's image", h.Name, h.Typeflag)
		}
		if err := os.Lchown(name, h.Uid, h.Gid); err != nil {
			return err
		}
		if err := os.Chmod(name, mode); err != nil {
			return err
		}
	}
}

// inNetns runs f on a thread that has joined the network namespace of pid,
// with its loopback up; the thread ends with f (it is never unlocked), so
// the namespace stays with it.
func inNetns(pid int, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- func() error {
			ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
			if err != nil {
				return err
			}
			defer ns.Close()
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("setns: %w", err)
			}
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			ifr, err := unix.NewIfreq("lo")
			if err != nil {
				return err
			}
			if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
				return err
			}
			ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
			if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
				return fmt.Errorf("loopback up: %w", err)
			}
			return f()
		}()
	}()
	return <-errc
}

// httpGet fetches path from addr with a plain HTTP/1.0 request on a
// connection dialled on the calling thread (net/http dials on goroutines of
// its own, outside the namespace).
func httpGet(addr, path string) (int, string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr); err != nil {
		return 0, "", err
	}
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil {
		return 0, "", err
	}
	var code int
	if _, err := fmt.Sscanf(status, "HTTP/1.%d %d", new(int), &code); err != nil {
		return 0, "", fmt.Errorf("status line %q", status)
	}
	body, _ := io.ReadAll(br)
	_, b, _ := strings.Cut(string(body), "\r\n\r\n")
	return code, b, nil
}

// TestImage: the OCI archive package.sh builds holds an index with a
// linux/amd64 image that runs as 10001 with the default configuration; its
// root file system, unpacked, has the CA certificates, the time zones, the
// user and a static binary; its entrypoint and command, run inside that root
// (chroot) as the image's user in a network namespace of its own, start the
// agent, which answers /healthz and logs a syslog message sent to it.
func TestImage(t *testing.T) {
	requireRoot(t)
	const version = "0.0.0-imagetest"
	dist := packageBuild(t, version, "image")
	archive := filepath.Join(dist, "sluice_"+version+"_oci.tar")
	st, err := os.Stat(archive)
	if err != nil {
		t.Fatal(err)
	}
	oci := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	err = untar(f, oci)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	top, err := layout.ImageIndexFromPath(oci)
	if err != nil {
		t.Fatal(err)
	}
	topm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(topm.Manifests) != 1 || topm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "sluice:"+version {
		t.Fatalf("index.json: %+v", topm.Manifests)
	}
	idx, err := top.ImageIndex(topm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var img v1.Image
	for _, m := range im.Manifests {
		if m.Platform != nil && m.Platform.OS == "linux" && m.Platform.Architecture == "amd64" {
			if img, err = idx.Image(m.Digest); err != nil {
				t.Fatal(err)
			}
		}
	}
	if img == nil {
		t.Fatalf("no linux/amd64 image in %+v", im.Manifests)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "10001:10001" || fmt.Sprint(c.Entrypoint) != "[/usr/bin/sluice]" || c.WorkingDir != "/var/lib/sluice" ||
		len(c.Cmd) == 0 || c.Cmd[0] != "agent" || c.Labels["org.opencontainers.image.version"] != version {
		t.Errorf("image config %+v", c)
	}
	if _, ok := c.ExposedPorts["41414/tcp"]; !ok {
		t.Errorf("status port not exposed: %v", c.ExposedPorts)
	}
	if _, ok := c.Volumes["/var/lib/sluice"]; !ok {
		t.Errorf("state not a volume: %v", c.Volumes)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var compressed int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		compressed += n
	}
	t.Logf("image: archive %.1f MiB (amd64 only here), %d layers, %.1f MiB compressed", float64(st.Size())/(1<<20), len(layers), float64(compressed)/(1<<20))

	rootfs := t.TempDir()
	if err := os.Chmod(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	err = untar(rc, rootfs)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	certs, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil || strings.Count(string(certs), "BEGIN CERTIFICATE") < 100 {
		t.Errorf("CA bundle: %d certificates, %v", strings.Count(string(certs), "BEGIN CERTIFICATE"), err)
	}
	for _, zone := range []string{"UTC", "Europe/Berlin", "America/New_York"} {
		if _, err := os.Stat(filepath.Join(rootfs, "usr/share/zoneinfo", zone)); err != nil {
			t.Errorf("time zone %s: %v", zone, err)
		}
	}
	if passwd, _ := os.ReadFile(filepath.Join(rootfs, "etc/passwd")); !strings.Contains(string(passwd), "sluice:x:10001:10001:") {
		t.Errorf("/etc/passwd:\n%s", passwd)
	}
	if fi, err := os.Stat(filepath.Join(rootfs, "var/lib/sluice")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 10001 || fi.Mode().Perm() != 0o750 {
		t.Errorf("/var/lib/sluice: %v %v", fi, err)
	}
	bin, err := elf.Open(filepath.Join(rootfs, "usr/bin/sluice"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range bin.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary is dynamically linked: it needs a loader the image does not have")
		}
	}
	bin.Close()

	// Run the entrypoint inside the unpacked root as the image's user.
	var logs logBuffer
	cmd := exec.Command(c.Entrypoint[0], c.Cmd...)
	cmd.Env, cmd.Dir = c.Env, c.WorkingDir
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: 10001, Gid: 10001, Groups: []uint32{}},
		Cloneflags: syscall.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		if !errors.Is(err, syscall.EPERM) {
			t.Fatal(err)
		}
		// No network namespaces here: the host's network, then.
		t.Log("cannot create a network namespace; running on the host's network")
		cmd.SysProcAttr.Cloneflags = 0
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer cmd.Process.Kill()
	probe := func() error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, body, err := httpGet("127.0.0.1:41414", "/healthz")
			if err == nil && code == 200 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("/healthz: %d %q %v", code, body, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		u, err := net.Dial("udp", "127.0.0.1:5514")
		if err != nil {
			return err
		}
		defer u.Close()
		_, err = io.WriteString(u, "<13>1 2026-12-03T13:00:00Z imagetest test - - - hello from the image test")
		return err
	}
	if cmd.SysProcAttr.Cloneflags != 0 {
		err = inNetns(cmd.Process.Pid, probe)
	} else {
		err = probe()
	}
	if err != nil {
		t.Fatalf("%v; log:\n%s", err, logs.String())
	}
	waitUntil(t, "the logger sink logs the message", 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "host=imagetest") && strings.Contains(logs.String(), "hello")
	}, &logs)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v; log:\n%s", err, logs.String())
	}
	// The file channel wrote its state as the image's user.
	if fi, err := os.Stat(filepath.Join(rootfs, "var/lib/sluice/channel")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 10001 {
		t.Errorf("state written as: %v %v", fi, err)
	}
}
