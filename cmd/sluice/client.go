package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// clientFlags are the options top and tap share: how to reach an agent's
// monitoring address.
type clientFlags struct {
	addr         string // --http: host:port, :port or a URL
	user         string
	passwordFile string
	caFile       string
	certFile     string // client certificate, for an agent started with --http-tls-client-ca
	keyFile      string
}

// clientUsage documents clientFlags.
const clientUsage = `  --http ADDR              the agent's monitoring address: HOST:PORT, :PORT (loopback) or a URL
                           such as https://host:41414 (default 127.0.0.1:41414)
  --http-user USER         basic authentication user, when the agent requires one...
  --http-password-file FILE
                           ...and the file holding its password (or SLUICE_HTTP_PASSWORD)
  --http-ca FILE           PEM certificates to trust for an https address (default: the system's)
  --http-cert FILE         a PEM client certificate (chain), for an agent that requires one
                           (--http-tls-client-ca)...
  --http-key FILE          ...and its PEM private key
`

// flag handles arg (with the next argument as its value when it needs one)
// if it is a client option; it returns how many arguments it used.
func (f *clientFlags) flag(args []string, i int) (int, error) {
	name, val, hasVal := strings.Cut(args[i], "=")
	next := func() (string, error) {
		if hasVal {
			return val, nil
		}
		if i+1 >= len(args) {
			return "", fmt.Errorf("%s needs a value", name)
		}
		return args[i+1], nil
	}
	used := 2
	if hasVal {
		used = 1
	}
	var err error
	switch name {
	case "--http", "-http":
		f.addr, err = next()
	case "--http-user", "-http-user":
		f.user, err = next()
	case "--http-password-file", "-http-password-file":
		f.passwordFile, err = next()
	case "--http-ca", "-http-ca":
		f.caFile, err = next()
	case "--http-cert", "-http-cert":
		f.certFile, err = next()
	case "--http-key", "-http-key":
		f.keyFile, err = next()
	default:
		return 0, nil
	}
	return used, err
}

// agentClient talks to one agent's monitoring address.
type agentClient struct {
	base       *url.URL
	user, pass string
	http       *http.Client
}

func (f *clientFlags) client() (*agentClient, error) {
	addr := f.addr
	if addr == "" {
		addr = "127.0.0.1:41414"
	}
	if !strings.Contains(addr, "://") {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("--http %s: want HOST:PORT, :PORT or a URL", addr)
		}
		if host == "" {
			host = "127.0.0.1"
		}
		addr = "http://" + net.JoinHostPort(host, port)
	}
	base, err := url.Parse(addr)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("--http %s: want HOST:PORT, :PORT or an http(s) URL", f.addr)
	}
	base.Path = strings.TrimSuffix(base.Path, "/") + "/"
	c := &agentClient{base: base}
	if f.user != "" {
		pass, ok := os.LookupEnv("SLUICE_HTTP_PASSWORD")
		if f.passwordFile != "" {
			b, err := os.ReadFile(f.passwordFile)
			if err != nil {
				return nil, fmt.Errorf("--http-password-file: %w", err)
			}
			pass, _, _ = strings.Cut(string(b), "\n")
			pass, ok = strings.TrimRight(pass, "\r"), true
		}
		if !ok || pass == "" {
			return nil, errors.New("--http-user needs a password: --http-password-file FILE, or SLUICE_HTTP_PASSWORD in the environment")
		}
		c.user, c.pass = f.user, pass
	}
	tr := &http.Transport{Proxy: nil, TLSHandshakeTimeout: 10 * time.Second}
	if f.caFile != "" {
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, fmt.Errorf("--http-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--http-ca %s: no PEM certificate in it", f.caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, errors.New("--http-cert and --http-key go together")
	}
	if f.certFile != "" {
		cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--http-cert %s, --http-key %s: %w", f.certFile, f.keyFile, err)
		}
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tr.TLSClientConfig.Certificates = []tls.Certificate{cert}
	}
	c.http = &http.Client{Transport: tr}
	return c, nil
}

// get requests path (relative to the base URL) and returns the response
// when it is 200, else an error with the agent's message.
func (c *agentClient) get(ctx context.Context, path string) (*http.Response, error) {
	u := c.base.ResolveReference(&url.URL{Path: strings.TrimPrefix(path, "/")})
	if i := strings.IndexByte(path, '?'); i >= 0 {
		u = c.base.ResolveReference(&url.URL{Path: strings.TrimPrefix(path[:i], "/"), RawQuery: path[i+1:]})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the agent at %s: %w", c.base.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		text := strings.TrimSpace(string(msg))
		switch resp.StatusCode {
		case http.StatusNotFound:
			if path == "api/status" {
				text = "no status page here: is this a sluice agent's --http address, of a sluice version with `top`?"
			}
		case http.StatusUnauthorized:
			text = "the agent requires authentication: give --http-user and --http-password-file"
		}
		return nil, fmt.Errorf("%s: %s: %s", u.Redacted(), resp.Status, text)
	}
	return resp, nil
}

// getJSON gets path and decodes its JSON into v, within timeout.
func (c *agentClient) getJSON(ctx context.Context, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.get(ctx, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s: bad JSON: %w", path, err)
	}
	return nil
}
