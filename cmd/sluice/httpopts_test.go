package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/agent"
)

func TestHTTPSecurityOptions(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_HTTP_PASSWORD", "")
	os.Unsetenv("SLUICE_HTTP_PASSWORD")
	for _, tc := range []struct {
		name    string
		c       cli
		addr    string
		env     string
		user    string
		pass    string
		wantErr string
	}{
		{name: "none", addr: "127.0.0.1:1"},
		{name: "file", c: cli{httpUser: "ops", httpPasswordFile: pw}, addr: "127.0.0.1:1", user: "ops", pass: "s3cret"},
		{name: "env", c: cli{httpUser: "ops"}, env: "fromenv", addr: "127.0.0.1:1", user: "ops", pass: "fromenv"},
		{name: "no password", c: cli{httpUser: "ops"}, addr: "127.0.0.1:1", wantErr: "needs a password"},
		{name: "password alone", c: cli{httpPasswordFile: pw}, addr: "127.0.0.1:1", wantErr: "needs --http-user"},
		{name: "missing file", c: cli{httpUser: "ops", httpPasswordFile: filepath.Join(dir, "nope")}, addr: "127.0.0.1:1", wantErr: "--http-password-file"},
		{name: "cert alone", c: cli{httpCert: "x.pem"}, addr: "127.0.0.1:1", wantErr: "go together"},
		{name: "bad cert", c: cli{httpCert: pw, httpKey: pw}, addr: "127.0.0.1:1", wantErr: "--http-tls-cert"},
		{name: "tap without http", c: cli{allowTap: true}, wantErr: "need --http"},
		{name: "client ca without tls", c: cli{httpClientCA: "ca.pem"}, addr: "127.0.0.1:1", wantErr: "--http-tls-client-ca needs --http-tls-cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("SLUICE_HTTP_PASSWORD", tc.env)
			}
			o := agent.Options{HTTPAddr: tc.addr}
			err := tc.c.httpSecurity(&o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || o.HTTPUser != tc.user || o.HTTPPassword != tc.pass {
				t.Fatalf("got %q/%q, %v; want %q/%q", o.HTTPUser, o.HTTPPassword, err, tc.user, tc.pass)
			}
		})
	}
}

func TestExposureWarning(t *testing.T) {
	for _, tc := range []struct {
		o    agent.Options
		want string // "" for no warning
	}{
		{agent.Options{HTTPAddr: "127.0.0.1:41414", AllowTap: true}, ""},
		{agent.Options{HTTPAddr: "[::1]:41414"}, ""},
		{agent.Options{HTTPAddr: "localhost:41414"}, ""},
		{agent.Options{HTTPAddr: "0.0.0.0:41414"}, "no authentication (--http-user) and no TLS"},
		{agent.Options{HTTPAddr: "0.0.0.0:41414", AllowTap: true, HTTPUser: "ops"}, "event data through the tap"},
	} {
		var buf bytes.Buffer
		warnExposure(slog.New(slog.NewTextHandler(&buf, nil)), tc.o)
		if got := buf.String(); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: logged %q, want %q", tc.o, got, tc.want)
		}
	}
}

func TestFlumeBindingNote(t *testing.T) {
	for _, tc := range []struct {
		c    cli
		addr string
		note bool
	}{
		{cli{sys: map[string]string{"flume.monitoring.type": "http"}}, "127.0.0.1:41414", true},
		{cli{sys: map[string]string{"flume.monitoring.type": "http"}, httpAddr: "0.0.0.0:41414"}, "0.0.0.0:41414", false},
		{cli{sys: map[string]string{}, httpAddr: ":41414"}, "127.0.0.1:41414", false},
	} {
		var buf bytes.Buffer
		tc.c.noteFlumeBinding(slog.New(slog.NewTextHandler(&buf, nil)), tc.addr)
		if got := strings.Contains(buf.String(), "--http 0.0.0.0:41414"); got != tc.note {
			t.Errorf("%+v: logged %q", tc.c, buf.String())
		}
	}
}
