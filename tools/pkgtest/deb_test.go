package pkgtest

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dpkg runs dpkg as an operator would (dpkg -i, -r, -P), waiting while
// another installation holds dpkg's lock; an edited configuration file is
// kept (--force-confold: dpkg's choice when the package's own did not
// change; it would ask when both did).
func dpkg(t *testing.T, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		cmd := exec.Command("dpkg", append([]string{"--force-confdef", "--force-confold"}, args...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err == nil {
			return string(out)
		}
		if strings.Contains(string(out), "lock") && time.Now().Before(deadline) {
			time.Sleep(time.Second)
			continue
		}
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func installed(t *testing.T) string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Status} ${Version}", "sluice").CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

type owner struct {
	user, group string
	mode        os.FileMode
}

func ownerOf(t *testing.T, path string) owner {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	u, _ := user.LookupId(strconv.Itoa(int(st.Uid)))
	g, _ := user.LookupGroupId(strconv.Itoa(int(st.Gid)))
	o := owner{mode: fi.Mode().Perm()}
	if u != nil {
		o.user = u.Username
	}
	if g != nil {
		o.group = g.Name
	}
	return o
}

// agentProc is the unit's ExecStart run as systemd would run it here.
type agentProc struct {
	cmd  *exec.Cmd
	logs *logBuffer
}

// startUnit runs the installed unit's ExecStart, expanded with its
// EnvironmentFile, as its User= (with that user's groups), in its
// WorkingDirectory=, with a NOTIFY_SOCKET as Type=notify gives it; it
// returns when the agent sent READY=1.
func startUnit(t *testing.T) *agentProc {
	t.Helper()
	unitText, err := os.ReadFile("/usr/lib/systemd/system/sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(unitText)
	env := envFile(t, strings.TrimPrefix(unitValue(t, unit, "EnvironmentFile"), "-"))
	argv := execStartArgv(unitValue(t, unit, "ExecStart"), env)
	u, err := user.Lookup(unitValue(t, unit, "User"))
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	gids, err := u.GroupIds()
	if err != nil {
		t.Fatal(err)
	}
	var groups []uint32
	for _, g := range gids {
		n, _ := strconv.Atoi(g)
		groups = append(groups, uint32(n))
	}
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	// The notify socket's directory must be reachable by the agent's user.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = unitValue(t, unit, "WorkingDirectory")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + u.HomeDir, "NOTIFY_SOCKET=" + sock}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	_ = notify.SetReadDeadline(time.Now().Add(60 * time.Second))
	buf := make([]byte, 4096)
	for {
		n, err := notify.Read(buf)
		if err != nil {
			t.Fatalf("no READY=1 from %q: %v; log:\n%s", argv, err, logs.String())
		}
		if strings.Contains("\n"+string(buf[:n])+"\n", "\nREADY=1\n") {
			break
		}
	}
	return &agentProc{cmd: cmd, logs: logs}
}

func (a *agentProc) stop(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("agent exit: %v; log:\n%s", err, a.logs.String())
	}
}

func rssKiB(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// eventsText is what the default configuration's rolling files hold.
func eventsText() string {
	files, _ := filepath.Glob("/var/log/sluice/events/*")
	var all []byte
	for _, f := range files {
		b, _ := os.ReadFile(f)
		all = append(all, b...)
	}
	return string(all)
}

func logger(t *testing.T, proto, msg string) {
	t.Helper()
	run(t, "logger", "--server", "127.0.0.1", "--port", "5514", "--"+proto, "--rfc5424", "--tag", "pkgtest", msg)
}

// TestDebPackage installs the .deb on this machine, as root, the way an
// operator does, and checks what the issue asks of it: the user, its
// groups, paths, owners and conffiles; the unit verified by systemd-analyze
// and its ExecStart run as the sluice user (no systemd as PID 1 here)
// delivering syslog messages through the default configuration; an upgrade
// to a higher version keeping an edited configuration and the state;
// remove keeping configuration and state; purge deleting them. The rpm's
// metadata is checked when rpm is installed. It measures the package sizes,
// the idle memory of the packaged agent and the time from the start of the
// installation to the first delivered event.
func TestDebPackage(t *testing.T) {
	requireRoot(t)
	for _, tool := range []string{"dpkg", "logger"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s here: not a Debian machine", tool)
		}
	}
	hostLock(t)
	if st := installed(t); strings.HasPrefix(st, "install ok installed") {
		t.Skipf("a sluice package is installed on this machine (%s): not touching it", st)
	}
	v1 := packageBuild(t, "0.0.1", "tar sbom deb rpm")
	v2 := packageBuild(t, "0.0.2", "deb")
	deb1, deb2 := filepath.Join(v1, "sluice_0.0.1_amd64.deb"), filepath.Join(v2, "sluice_0.0.2_amd64.deb")
	rpm1 := filepath.Join(v1, "sluice_0.0.1_amd64.rpm")
	for _, f := range []string{deb1, rpm1} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.1f MiB", filepath.Base(f), float64(fi.Size())/(1<<20))
	}

	t.Run("release", func(t *testing.T) { checkRelease(t, v1, "0.0.1") })

	if _, err := exec.LookPath("rpm"); err == nil {
		t.Run("rpm", func(t *testing.T) {
			list := run(t, "rpm", "-qpl", rpm1)
			for _, p := range []string{"/usr/bin/sluice", "/usr/bin/flume-ng", "/usr/lib/systemd/system/sluice.service",
				"/etc/sluice/sluice.properties", "/etc/default/sluice", "/var/lib/sluice"} {
				if !strings.Contains(list, p+"\n") {
					t.Errorf("rpm -qpl lacks %s:\n%s", p, list)
				}
			}
			if conf := run(t, "rpm", "-qpc", rpm1); conf != "/etc/default/sluice\n/etc/sluice/sluice.properties\n" {
				t.Errorf("rpm -qpc: %q", conf)
			}
			info := run(t, "rpm", "-qpi", rpm1)
			if !strings.Contains(info, "Name        : sluice") || !strings.Contains(info, "Version     : 0.0.1") ||
				!strings.Contains(info, "Architecture: x86_64") {
				t.Errorf("rpm -qpi:\n%s", info)
			}
			if scripts := run(t, "rpm", "-qp", "--scripts", rpm1); !strings.Contains(scripts, "useradd --system") {
				t.Errorf("rpm scripts:\n%s", scripts)
			}
		})
	} else {
		t.Log("rpm is not installed: the .rpm was built, not inspected")
	}

	t.Cleanup(func() {
		if installed(t) != "" {
			dpkg(t, "-P", "sluice")
		}
	})
	t0 := time.Now()
	dpkg(t, "-i", deb1)
	tInstalled := time.Since(t0)

	// The user, its groups, the paths, owners and conffiles.
	u, err := user.Lookup("sluice")
	if err != nil {
		t.Fatal(err)
	}
	if u.HomeDir != "/var/lib/sluice" {
		t.Errorf("sluice's home %q", u.HomeDir)
	}
	if passwd := run(t, "getent", "passwd", "sluice"); !strings.HasSuffix(strings.TrimSpace(passwd), ":/usr/sbin/nologin") {
		t.Errorf("sluice's shell: %s", passwd)
	}
	groups := run(t, "id", "-nG", "sluice")
	for _, g := range []string{"adm", "systemd-journal"} {
		if _, err := user.LookupGroup(g); err == nil && !strings.Contains(" "+groups, " "+g) {
			t.Errorf("sluice is not in %s: %s", g, groups)
		}
	}
	for path, want := range map[string]owner{
		"/var/lib/sluice":               {"sluice", "sluice", 0o750},
		"/var/log/sluice":               {"sluice", "sluice", 0o750},
		"/etc/sluice/sluice.properties": {"root", "root", 0o644},
		"/etc/default/sluice":           {"root", "root", 0o644},
		"/usr/bin/sluice":               {"root", "root", 0o755},
	} {
		if got := ownerOf(t, path); got != want {
			t.Errorf("%s: %+v, want %+v", path, got, want)
		}
	}
	if target, err := os.Readlink("/usr/bin/flume-ng"); err != nil || target != "sluice" {
		t.Errorf("/usr/bin/flume-ng -> %q, %v", target, err)
	}
	conffiles := run(t, "dpkg-query", "-W", "-f=${Conffiles}", "sluice")
	for _, f := range []string{"/etc/sluice/sluice.properties", "/etc/default/sluice"} {
		if !strings.Contains(conffiles, " "+f+" ") {
			t.Errorf("%s is not a conffile: %s", f, conffiles)
		}
	}
	var ver struct{ Version, Commit, Date, Go string }
	if err := json.Unmarshal([]byte(run(t, "/usr/bin/sluice", "version", "--json")), &ver); err != nil || ver.Version != "0.0.1" ||
		len(ver.Commit) != 40 || !strings.HasSuffix(ver.Date, "Z") {
		t.Errorf("sluice version --json: %+v %v", ver, err)
	}
	if out := run(t, "/usr/bin/flume-ng", "version"); !strings.HasPrefix(out, "sluice 0.0.1") {
		t.Errorf("flume-ng version: %q", out)
	}

	// systemd-analyze checks the unit as installed.
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		if out, err := exec.Command("systemd-analyze", "verify", "/usr/lib/systemd/system/sluice.service").CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
		out, _ := exec.Command("systemd-analyze", "security", "--offline=true", "/usr/lib/systemd/system/sluice.service").CombinedOutput()
		m := regexp.MustCompile(`Overall exposure level for sluice.service: ([0-9.]+) (\S+)`).FindStringSubmatch(string(out))
		if m == nil {
			t.Errorf("systemd-analyze security:\n%s", out)
		} else {
			t.Logf("systemd-analyze security: %s %s", m[1], m[2])
			if score, _ := strconv.ParseFloat(m[1], 64); score > 2.0 {
				t.Errorf("exposure %s: the unit lost some of its hardening\n%s", m[1], out)
			}
		}
	} else {
		t.Log("systemd-analyze is not installed: the unit was not verified")
	}

	// The status port of /etc/default/sluice, 41414, may be taken on a
	// shared machine (Flume's default monitoring port): an operator's edit
	// moves it to a free one, which the upgrade must keep too.
	defaults, err := os.ReadFile("/etc/default/sluice")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	statusAddr := ln.Addr().String()
	ln.Close()
	editedDefaults := strings.Replace(string(defaults), `SLUICE_OPTS="--http 127.0.0.1:41414"`, `SLUICE_OPTS="--http `+statusAddr+`"`, 1)
	if editedDefaults == string(defaults) {
		t.Fatalf("/etc/default/sluice has no SLUICE_OPTS with --http 127.0.0.1:41414:\n%s", defaults)
	}
	if err := os.WriteFile("/etc/default/sluice", []byte(editedDefaults), 0o644); err != nil {
		t.Fatal(err)
	}

	// The unit's command line, as the sluice user, delivers events.
	a := startUnit(t)
	tReady := time.Since(t0)
	logger(t, "udp", "first event over udp")
	waitUntil(t, "the first event in /var/log/sluice/events", 20*time.Second, func() bool {
		return strings.Contains(eventsText(), "first event over udp")
	}, a.logs)
	tDelivered := time.Since(t0)
	logger(t, "tcp", "second event over tcp")
	waitUntil(t, "the tcp event", 20*time.Second, func() bool { return strings.Contains(eventsText(), "second event over tcp") }, a.logs)
	time.Sleep(3 * time.Second) // idle
	t.Logf("dpkg -i: %v; READY=1: %v; first event delivered: %v after dpkg -i began; idle RSS %d KiB",
		tInstalled.Round(time.Millisecond), tReady.Round(time.Millisecond), tDelivered.Round(time.Millisecond), rssKiB(t, a.cmd.Process.Pid))
	a.stop(t)
	if o := ownerOf(t, "/var/lib/sluice/channel"); o.user != "sluice" {
		t.Errorf("state written as %+v", o)
	}

	// An operator edits the configuration; the upgrade keeps it and the state.
	conf, err := os.ReadFile("/etc/sluice/sluice.properties")
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(conf), "sink.rollInterval = 3600", "sink.rollInterval = 600", 1) + "# edited by the operator\n"
	if err := os.WriteFile("/etc/sluice/sluice.properties", []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	stateBefore := run(t, "find", "/var/lib/sluice", "-printf", "%p %u\n")
	dpkg(t, "-i", deb2)
	if err := json.Unmarshal([]byte(run(t, "/usr/bin/sluice", "version", "--json")), &ver); err != nil || ver.Version != "0.0.2" {
		t.Errorf("after the upgrade: %+v %v", ver, err)
	}
	if got, _ := os.ReadFile("/etc/sluice/sluice.properties"); string(got) != edited {
		t.Errorf("the upgrade changed the edited configuration:\n%s", got)
	}
	if got, _ := os.ReadFile("/etc/default/sluice"); string(got) != editedDefaults {
		t.Errorf("the upgrade changed the edited /etc/default/sluice:\n%s", got)
	}
	if after := run(t, "find", "/var/lib/sluice", "-printf", "%p %u\n"); after != stateBefore {
		t.Errorf("the upgrade changed the state:\nbefore:\n%s\nafter:\n%s", stateBefore, after)
	}
	a = startUnit(t)
	logger(t, "tcp", "after the upgrade")
	waitUntil(t, "an event after the upgrade", 20*time.Second, func() bool { return strings.Contains(eventsText(), "after the upgrade") }, a.logs)
	a.stop(t)
	if strings.Count(eventsText(), "first event over udp") != 1 {
		t.Errorf("an event was delivered twice or lost across the upgrade:\n%s", eventsText())
	}

	// Remove keeps the configuration and the state; purge deletes them.
	dpkg(t, "-r", "sluice")
	for _, p := range []string{"/usr/bin/sluice", "/usr/bin/flume-ng", "/usr/lib/systemd/system/sluice.service"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("remove left %s", p)
		}
	}
	for _, p := range []string{"/etc/sluice/sluice.properties", "/etc/default/sluice", "/var/lib/sluice/channel", "/var/log/sluice/events"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("remove deleted %s: %v", p, err)
		}
	}
	dpkg(t, "-P", "sluice")
	for _, p := range []string{"/etc/sluice", "/etc/default/sluice", "/var/lib/sluice", "/var/log/sluice"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("purge left %s", p)
		}
	}
	if installed(t) != "" {
		t.Errorf("still known to dpkg after purge: %s", installed(t))
	}
}

// checkRelease checks the release files besides the packages: SHA256SUMS
// covers them all, the tarball holds the binary, configuration and unit,
// and the SBOM lists every Go module compiled into the binary.
func checkRelease(t *testing.T, dist, version string) {
	cmd := exec.Command("sha256sum", "--strict", "-c", "SHA256SUMS")
	cmd.Dir = dist
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
	sums, _ := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	ents, _ := os.ReadDir(dist)
	for _, e := range ents {
		if e.Type().IsRegular() && e.Name() != "SHA256SUMS" && !strings.Contains(string(sums), "  "+e.Name()+"\n") {
			t.Errorf("SHA256SUMS lacks %s", e.Name())
		}
	}
	name := "sluice_" + version + "_linux_amd64"
	list := run(t, "tar", "-tzf", filepath.Join(dist, name+".tar.gz"))
	for _, f := range []string{"sluice", "sluice.properties", "sluice.service", "sluice.default", "README.md", "INSTALL.md"} {
		if !strings.Contains(list, name+"/"+f+"\n") {
			t.Errorf("the tarball lacks %s:\n%s", f, list)
		}
	}
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct{ Name, Version string } `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			PURL    string `json:"purl"`
		} `json:"components"`
	}
	b, err := os.ReadFile(filepath.Join(dist, name+".sbom.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &bom); err != nil || bom.BOMFormat != "CycloneDX" {
		t.Fatalf("SBOM: %v %q", err, bom.BOMFormat)
	}
	inBOM := map[string]bool{}
	for _, c := range bom.Components {
		purl, _, _ := strings.Cut(strings.TrimPrefix(c.PURL, "pkg:golang/"), "?")
		inBOM[purl] = true
	}
	// go version -m lists the modules the binary was built from.
	deps := 0
	for _, line := range strings.Split(run(t, "go", "version", "-m", filepath.Join(dist, "linux_amd64", "sluice")), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[0] == "dep" || f[0] == "=>") {
			deps++
			if purl := f[1] + "@" + f[2]; !inBOM[purl] {
				t.Errorf("the SBOM lacks %s", purl)
			}
		}
	}
	if deps == 0 || len(bom.Components) < deps {
		t.Errorf("SBOM: %d components for %d modules", len(bom.Components), deps)
	}
}
