package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// avroClientBatch is Flume's avro-client's batch size with --host and
// --port (AvroCLIClient's BATCH_SIZE); with --rpcProps, batch-size decides
// (default 100, as in Flume's RPC clients).
const avroClientBatch = 5

// avroClient is flume-ng avro-client's command line.
type avroClient struct {
	hosts    []string // host:port, tried in order (failover)
	cfg      avrorpc.ClientConfig
	batch    int
	file     string
	dir      string
	headers  map[string]string
	hostName string // for TLS verification
}

func parseAvroClient(args []string, sys map[string]string, warn io.Writer) (*avroClient, error) {
	var host, port, props, headerFile string
	c := &avroClient{headers: map[string]string{}}
	batch := 0
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, val, hasVal := strings.Cut(arg, "=")
		value := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("option %s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "-H", "--host", "-host":
			host, err = value()
		case "-p", "--port", "-port":
			port, err = value()
		case "-P", "--rpcProps", "-rpcProps":
			props, err = value()
		case "-F", "--filename", "-filename":
			c.file, err = value()
		case "--dirname", "-dirname":
			c.dir, err = value()
		case "-R", "--headerFile", "-headerFile":
			headerFile, err = value()
		case "--batch-size", "-batch-size":
			var s string
			if s, err = value(); err == nil {
				if batch, err = strconv.Atoi(s); err != nil || batch < 1 {
					err = fmt.Errorf("--batch-size %q: want a whole number above 0", s)
				}
			}
		default:
			err = fmt.Errorf("unknown option %q (flume-ng help lists avro-client's)", arg)
		}
		if err != nil {
			return nil, err
		}
	}
	if c.file != "" && c.dir != "" {
		return nil, errors.New("--filename and --dirname options cannot be used simultaneously")
	}
	c.batch = avroClientBatch
	if props != "" {
		if err := c.readRPCProps(props, sys, warn); err != nil {
			return nil, err
		}
	} else {
		if host == "" || port == "" {
			return nil, errors.New("either --rpcProps or both --host and --port must be specified")
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("--port %q is not a port number", port)
		}
		c.hosts, c.hostName = []string{net.JoinHostPort(host, port)}, host
	}
	if batch > 0 {
		c.batch = batch
	}
	if headerFile != "" {
		f, err := os.Open(headerFile)
		if err != nil {
			return nil, fmt.Errorf("--headerFile: %w", err)
		}
		defer f.Close()
		entries, err := config.ParseProperties(headerFile, f)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			c.headers[e.Key] = e.Value
		}
	}
	return c, nil
}

// readRPCProps reads an RPC client properties file as Flume's
// RpcClientFactory does, for the keys that apply to one Avro connection.
func (c *avroClient) readRPCProps(path string, sys map[string]string, warn io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--rpcProps: %w", err)
	}
	defer f.Close()
	entries, err := config.ParseProperties(path, f)
	if err != nil {
		return err
	}
	vals := map[string]config.Value{}
	for _, e := range entries {
		vals[e.Key] = config.Value{Text: e.Value, Line: e.Line}
	}
	p := config.NewProps(path, "", 0, vals, nil)
	switch typ := p.Enum("client.type", "default", "default", "default_failover", "default_loadbalance", "thrift"); typ {
	case "thrift":
		p.Errorf("client.type", "avro-client sends over Avro RPC; thrift is the thrift sink's")
	case "default_loadbalance":
		p.Notef("client.type", "hosts are tried in order, as default_failover does: one client sends one stream")
	}
	for _, h := range p.Fields("hosts") {
		addr := p.Required("hosts." + h)
		if addr == "" {
			continue
		}
		hostName, _, err := net.SplitHostPort(addr)
		if err != nil {
			p.Errorf("hosts."+h, "%q: want HOST:PORT", addr)
			continue
		}
		if c.hostName == "" {
			c.hostName = hostName
		}
		c.hosts = append(c.hosts, addr)
	}
	if !p.Has("hosts") {
		p.Errorf("hosts", "required: the names of the hosts (hosts = h1, hosts.h1 = HOST:PORT)")
	}
	c.batch = p.IntRange("batch-size", 100, 1, 1<<20)
	c.cfg.ConnectTimeout = time.Duration(p.Int64("connect-timeout", 20000)) * time.Millisecond
	c.cfg.RequestTimeout = time.Duration(p.Int64("request-timeout", 20000)) * time.Millisecond
	c.cfg.Deflate = p.Enum("compression-type", "none", "none", "deflate") == "deflate"
	c.cfg.DeflateLevel = p.IntRange("compression-level", 6, 1, 9)
	ts := tlsconf.ReadClient(p)
	for _, k := range []string{"max-attempts", "maxIoWorkers", "backoff", "maxBackoff", "host-selector"} {
		if p.Has(k) {
			p.MarkUsed(k)
			p.Notef(k, "not used by avro-client: it sends one stream to one host at a time")
		}
	}
	p.Unused()
	for _, pr := range p.Problems().Sorted() {
		if pr.Severity != config.Error {
			fmt.Fprintln(warn, pr.String())
		}
	}
	if p.Problems().Count(config.Error) > 0 {
		return p.Problems().Err()
	}
	if ts.Enabled {
		if ts.Truststore == "" && sys["javax.net.ssl.trustStore"] != "" {
			ts.Truststore = sys["javax.net.ssl.trustStore"]
			ts.TruststorePassword = sys["javax.net.ssl.trustStorePassword"]
			if t := strings.ToUpper(sys["javax.net.ssl.trustStoreType"]); t != "" {
				ts.TruststoreType = t
			}
		}
		tc, err := ts.ClientConfig(c.hostName)
		if err != nil {
			return fmt.Errorf("%s: ssl: %w", path, err)
		}
		c.cfg.TLS = tc
	}
	return nil
}

// avroSender sends batches to the first host that answers, in order, and
// fails over to the next when one fails.
type avroSender struct {
	c      *avroClient
	client *avrorpc.Client
	sent   int
}

func (s *avroSender) send(ctx context.Context, batch []event.Event) error {
	var errs []error
	for attempt := 0; attempt < len(s.c.hosts); attempt++ {
		if s.client == nil {
			var err error
			addr := s.c.hosts[attempt]
			if s.client, err = avrorpc.Dial(ctx, addr, s.c.cfg); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		st, err := s.client.AppendBatch(ctx, batch)
		if err == nil && st == avrorpc.OK {
			s.sent += len(batch)
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%s answered %s", s.client.RemoteAddr(), st)
		}
		errs = append(errs, err)
		_ = s.client.Close() // broken after any error: a new connection next
		s.client = nil
	}
	return errors.Join(errs...)
}

func (s *avroSender) close() {
	if s.client != nil {
		_ = s.client.Close()
	}
}

// sendLines sends r line by line (a line's end, \n, \r\n or \r, is not part
// of the body, as Java's readLine has it), batch events a call. It returns
// at the first batch not acknowledged.
func (s *avroSender) sendLines(ctx context.Context, r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	batch := make([]event.Event, 0, s.c.batch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.send(ctx, batch)
		batch = batch[:0]
		return err
	}
	var line []byte
	pendingCR := false
	for {
		b, err := br.ReadByte()
		if err == io.EOF {
			if len(line) > 0 {
				batch = append(batch, s.event(line))
			}
			return flush()
		}
		if err != nil {
			return err
		}
		if pendingCR {
			pendingCR = false
			if b == '\n' {
				continue
			}
		}
		if b != '\n' && b != '\r' {
			line = append(line, b)
			continue
		}
		pendingCR = b == '\r'
		batch = append(batch, s.event(line))
		line = nil
		if len(batch) == s.c.batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
}

func (s *avroSender) event(body []byte) event.Event {
	return event.Event{Headers: event.HeadersOf(s.c.headers), Body: bytes.Clone(body)}
}

// spoolDir sends every file of dir that is not hidden and not done yet,
// oldest first, each line by line, and renames each to NAME.COMPLETED once
// all its lines were acknowledged (the spooling directory convention).
func (s *avroSender) spoolDir(ctx context.Context, dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("--dirname: %w", err)
	}
	type file struct {
		path string
		mod  time.Time
	}
	var files []file
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || strings.HasSuffix(e.Name(), ".COMPLETED") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		files = append(files, file{filepath.Join(dir, e.Name()), info.ModTime()})
	}
	sort.Slice(files, func(i, j int) bool {
		if !files[i].mod.Equal(files[j].mod) {
			return files[i].mod.Before(files[j].mod)
		}
		return files[i].path < files[j].path
	})
	for _, f := range files {
		fh, err := os.Open(f.path)
		if err != nil {
			return err
		}
		err = s.sendLines(ctx, fh)
		_ = fh.Close() // read only
		if err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		if err := os.Rename(f.path, f.path+".COMPLETED"); err != nil {
			return err
		}
	}
	return nil
}

// avroClientMain is flume-ng avro-client: it sends a file, a directory's
// files or standard input, one event per line, to an avro source, and exits
// 0 once every event was acknowledged (Flume's client exits 0 whatever
// happened; a script can trust sluice's status).
func avroClientMain(ctx context.Context, args []string, sys map[string]string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprint(stdout, flumeUsage)
			return 0
		}
	}
	c, err := parseAvroClient(args, sys, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "Error: avro-client: %v\n", err)
		return exitUsage
	}
	s := &avroSender{c: c}
	defer s.close()
	switch {
	case c.dir != "":
		err = s.spoolDir(ctx, c.dir)
	case c.file != "":
		var f *os.File
		if f, err = os.Open(c.file); err == nil {
			err = s.sendLines(ctx, f)
			_ = f.Close() // read only
		}
	default:
		err = s.sendLines(ctx, os.Stdin)
	}
	if err != nil {
		fmt.Fprintf(stderr, "Error: avro-client: %v (%d events were acknowledged before)\n", err, s.sent)
		return exitFailed
	}
	fmt.Fprintf(stderr, "avro-client: %d events sent to %s\n", s.sent, strings.Join(c.hosts, ", "))
	return 0
}
