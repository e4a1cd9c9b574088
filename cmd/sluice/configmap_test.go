package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// kubeletVolume lays out a ConfigMap volume as kubelet does: the data in a
// timestamped directory, ..data a symlink to it, and each key a symlink
// through ..data. An update writes a new directory and renames a new ..data
// link over the old one (atomic), then deletes the old directory: the
// agent's file never changes in place.
type kubeletVolume struct {
	t   *testing.T
	dir string
	gen int
	cur string
}

func newKubeletVolume(t *testing.T, key, data string) *kubeletVolume {
	v := &kubeletVolume{t: t, dir: t.TempDir()}
	v.update(key, data)
	if err := os.Symlink(filepath.Join("..data", key), filepath.Join(v.dir, key)); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v *kubeletVolume) update(key, data string) {
	v.t.Helper()
	v.gen++
	ts := fmt.Sprintf("..2026_12_03_13_00_%02d.%d", v.gen, 100000+v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		v.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.dir, ts, key), []byte(data), 0o644); err != nil {
		v.t.Fatal(err)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	if v.cur != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, v.cur)); err != nil {
			v.t.Fatal(err)
		}
	}
	v.cur = ts
}

func listening(port int) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestConfigMapSwapReloads: the Helm chart mounts the configuration from a
// ConfigMap as a directory, and kubelet updates it by swapping symlinks.
// The real binary, polling its -f file through those links, notices each
// swap and reloads: a new source listens and the removed one stops; a swap
// to a configuration with problems is refused and the running one stays.
func TestConfigMapSwapReloads(t *testing.T) {
	bin := testutil.AgentBinary(t)
	portA, portB := testutil.FreePort(t), testutil.FreePort(t)
	vol := newKubeletVolume(t, "sluice.properties", netcatToNull(portA))
	p := testutil.RunAgent(t, exec.Command(bin, "agent", "-f", filepath.Join(vol.dir, "sluice.properties"), "-n", "a1", "--poll-interval", "1"))
	logs := p.Log
	testutil.WaitFor(t, 20*time.Second, "first configuration", func() bool { return listening(portA) })

	vol.update("sluice.properties", netcatToNull(portB))
	testutil.WaitFor(t, 20*time.Second, "reload after the swap", func() bool { return listening(portB) && !listening(portA) })
	sendOne(t, portB, "after the swap")
	if logs.Count("configuration reloaded") != 1 {
		t.Errorf("want one reload logged:\n%s", logs.String())
	}

	vol.update("sluice.properties", netcatToNull(portA)+"a1.channels.c1.capacity = many\n")
	testutil.WaitFor(t, 20*time.Second, "refusal of the bad configuration", func() bool { return logs.Count("configuration not reloaded") > 0 })
	if !listening(portB) || listening(portA) {
		t.Errorf("a refused configuration changed the running one")
	}
	sendOne(t, portB, "still the good one")

	p.Stop(30 * time.Second)
}
