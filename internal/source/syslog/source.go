// Package syslogsource holds Flume's syslog sources: "syslogtcp" and "syslogudp",
// which parse messages as Flume's SyslogUtils does, and
// "multiport_syslogtcp", which listens on several ports and parses as
// Flume's SyslogParser does. Each sets Flume's headers (Facility, Severity,
// timestamp, host, flume.syslog.status and the rest) and body.
//
// Over TCP a message ends at a newline, as in Flume, or is octet-counted
// (RFC 6587): "LEN SP <PRI>..." frames are recognised by their start. A
// message is never held in memory beyond eventSize bytes, whatever a count
// claims; a longer one is cut there and tagged Incomplete. A connection is
// read in large blocks and every complete message buffered goes into one
// batch, up to the batch limit (flow.Batching: batchSize when set, else the
// channels' transactionCapacity), so batches grow with the load and a lone
// message is not held back. When the channel is full the connection is not read
// until the batch commits, which pushes back on the sender.
package syslogsource

import (
	"math"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Flume's defaults.
const (
	DefaultEventSize = 2500
	minEventSize     = 10 // SyslogUtils raises smaller eventSize values to this
	DefaultBatchSize = 100
	maxEventSize     = 64 << 20
)

// TCPSource is the syslogtcp source. Build it with NewTCP.
type TCPSource struct {
	tcpServer
	parser FlumeParser
}

// MultiportSource is the multiport_syslogtcp source. Build it with NewMultiport.
type MultiportSource struct {
	tcpServer
	parser   MultiportParser
	charsets map[int]Charset // by configured port
	def      Charset
}

var (
	_ flow.Source     = (*TCPSource)(nil)
	_ flow.BatchSizer = (*TCPSource)(nil)
	_ flow.Source     = (*MultiportSource)(nil)
	_ flow.BatchSizer = (*MultiportSource)(nil)
)

// readCommon reads the properties every syslog source has: keepFields,
// clientIPHeader, clientHostnameHeader; and refuses Flume's custom format.*
// patterns, which sluice does not implement.
func readCommon(env flow.Env, p *config.Props) (keep Keep, ipHeader, hostHeader string) {
	kv := p.String("keepFields", "none")
	keep, known := ParseKeepFields(kv)
	if !known {
		env.Log().Warn("keepFields names none of priority, version, timestamp, hostname; no field is kept, as in Flume",
			"source", env.Name, "keepFields", kv)
	}
	ipHeader = p.String("clientIPHeader", "")
	hostHeader = p.String("clientHostnameHeader", "")
	for _, k := range p.Keys("format.") {
		p.MarkUsed(k)
		p.Errorf(k, "custom syslog formats (format.regex, format.search, format.replace, format.dateFormat) are not supported; remove them (RFC 3164 and RFC 5424 are parsed as Flume does by default)")
	}
	return keep, ipHeader, hostHeader
}

func readFraming(p *config.Props) bool {
	return p.Enum("framing", "auto", "auto", "newline") == "auto"
}

// NewTCP builds a syslogtcp source from Flume's properties host (all
// interfaces when unset), port, eventSize (2500), keepFields (none),
// clientIPHeader, clientHostnameHeader and the SSL ones (ssl, keystore,
// keystore-password, keystore-type, include-/exclude-protocols and
// -cipher-suites); and sluice's batchSize (100; left unset, batches grow to
// the channels' transactionCapacity: flow.Batching) and framing (auto: newline or
// octet counting per message; newline: Flume's newline framing only).
func NewTCP(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &TCPSource{}
	s.env, s.kind = env, "syslogtcp"
	s.host = p.String("host", "")
	s.ports = []int{listener.ReadPort(p, "port")}
	size := p.IntRange("eventSize", DefaultEventSize, 1, maxEventSize)
	s.framer = framer{maxSize: max(size, minEventSize), octet: readFraming(p), flume: true}
	s.batch = flow.ReadBatching(p, "batchSize", DefaultBatchSize)
	var keep Keep
	keep, s.ipHeader, s.hostHeader = readCommon(env, p)
	s.parser = FlumeParser{Keep: keep}
	s.tls = tlsconf.ReadServer(p)
	s.build = s.buildEvent
	s.readLimits(p)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

func (s *TCPSource) buildEvent(fr frame, _ int, slab []byte) (event.Event, []byte, bool, bool) {
	if !fr.valid {
		return event.Event{}, slab, false, true
	}
	ev, slab := s.parser.Event(fr.msg, slab)
	return ev, slab, true, fr.msg.Bad || fr.truncated
}

// NewMultiport builds a multiport_syslogtcp source from Flume's properties
// host, ports (space-separated), portHeader, eventSize (2500), batchSize
// (100), charset.default (UTF-8), charset.port.<port>, keepFields (none),
// clientIPHeader, clientHostnameHeader and the SSL ones; readBufferBytes and
// numProcessors (Java tuning) are accepted and ignored; and sluice's framing
// (auto).
func NewMultiport(env flow.Env, p *config.Props) (flow.Source, error) {
	s := &MultiportSource{charsets: map[int]Charset{}}
	s.env, s.kind = env, "multiport_syslogtcp"
	s.host = p.String("host", "")
	if !p.Has("ports") {
		p.Required("ports")
	}
	seen := map[int]bool{}
	for _, f := range p.Fields("ports") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > 65535 {
			p.Errorf("ports", "%q is not a port number; list ports from 0 to 65535 separated by spaces", f)
			continue
		}
		if seen[n] && n != 0 {
			p.Errorf("ports", "port %d is listed twice", n)
			continue
		}
		seen[n] = true
		s.ports = append(s.ports, n)
	}
	size := p.IntRange("eventSize", DefaultEventSize, 1, maxEventSize)
	s.framer = framer{maxSize: size, octet: readFraming(p)}
	s.batch = flow.ReadBatching(p, "batchSize", DefaultBatchSize)
	s.portHeader = p.String("portHeader", "")
	p.IntRange("readBufferBytes", 1024, 1, math.MaxInt32)
	p.IntRange("numProcessors", 1, 1, 1<<16)
	s.def = readCharset(p, "charset.default")
	for _, k := range p.Keys("charset.port.") {
		ps := strings.TrimPrefix(k, "charset.port.")
		port, err := strconv.Atoi(ps)
		if err != nil || !seen[port] {
			p.MarkUsed(k)
			p.Errorf(k, "%q is not one of the ports in ports", ps)
			continue
		}
		s.charsets[port] = readCharset(p, k)
	}
	var keep Keep
	keep, s.ipHeader, s.hostHeader = readCommon(env, p)
	s.parser = MultiportParser{Keep: keep}
	s.tls = tlsconf.ReadServer(p)
	s.build = s.buildEvent
	s.readLimits(p)
	env.Registry().Add(s.counters.Set)
	return s, nil
}

func readCharset(p *config.Props, key string) Charset {
	v := p.String(key, "UTF-8")
	cs, ok := ParseCharset(v)
	if !ok {
		p.Errorf(key, "charset %q is not supported; use UTF-8, ISO-8859-1 or US-ASCII", v)
	}
	return cs
}

func (s *MultiportSource) buildEvent(fr frame, port int, slab []byte) (event.Event, []byte, bool, bool) {
	cs, ok := s.charsets[port]
	if !ok {
		cs = s.def
	}
	ev, slab, readFail := s.parser.Event(fr.line, cs, fr.incomplete, slab)
	if s.portHeader != "" {
		ev.Headers.Set(s.portHeader, itoa(port))
	}
	return ev, slab, true, readFail || fr.truncated
}
