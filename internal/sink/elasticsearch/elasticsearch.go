// Package elasticsearchsink is the elasticsearch sink: it indexes events through the
// REST _bulk API of Elasticsearch 7/8, OpenSearch 1/2 and what speaks it
// (VictoriaLogs at /insert/elasticsearch). It reads Flume's ElasticSearchSink
// properties (hostNames, indexName with the daily -yyyy-MM-dd suffix,
// indexType, clusterName, batchSize, and serializer: Flume's LogStash and
// Dynamic document shapes, or sluice's own) and adds what users of Vector's and
// Filebeat's outputs expect: %{header} and time escapes in index names, data
// streams, ingest pipelines, document ids from a header, basic and API key
// authentication, TLS, gzip, request size and in-flight limits.
//
// Delivery: a batch's take commits only when every event was indexed or
// dead-lettered. Whole-request failures (a connection error, a timeout, HTTP
// 429 or 5xx) and items rejected with 429 or 502/503/504 are retried with
// exponential backoff and jitter, resending only the items that failed.
// Items refused for good (mapping errors, any other 4xx, a 500) go to the
// dead-letter file, or are logged and counted as dropped when none is set;
// they never hold up the rest. After retry.maxAttempts rounds the batch is
// rolled back and the runner backs off; the writer remembers which of its
// events were indexed, so when the batch comes back from the head of the
// channel only the rest is sent.
//
// Duplicates: without document ids, the server names each document, so a
// request whose response was lost (a connection dropped mid-request, a
// timeout) is sent again and may index its documents twice. With idHeader
// set every retry is idempotent: op_type index overwrites the same id, and
// with op_type create a 409 "already exists" counts as indexed.
package elasticsearchsink

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Defaults.
const (
	DefaultBatchSize      = 100 // Flume's
	DefaultIndexName      = "flume"
	DefaultIndexType      = "logs"
	DefaultPort           = "9200"
	DefaultMaxBytes       = 10 << 20
	DefaultRequestTimeout = 30 * time.Second
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultMaxAttempts    = 6
)

// Flume's index name builders.
const (
	timeBasedBuilder = "org.apache.flume.sink.elasticsearch.timebasedindexnamebuilder"
	simpleBuilder    = "org.apache.flume.sink.elasticsearch.simpleindexnamebuilder"
)

// New builds an elasticsearch sink from its properties (see
// docs/components.md for the list).
func New(env flow.Env, p *config.Props) (flow.Sink, error) {
	s, _ := build(env, p)
	return s, nil
}

func build(env flow.Env, p *config.Props) (*flow.BatchSink, *Writer) {
	log := env.Log()
	opt := Options{Name: env.Name}

	// Flume's properties.
	hosts := p.Split("hostNames", ",")
	if !p.Has("hostNames") {
		p.Required("hostNames")
	} else if len(hosts) == 0 {
		p.Errorf("hostNames", "no host given; list host:port or URLs such as https://es1:9200, separated by commas")
	}
	indexName := p.String("indexName", DefaultIndexName)
	p.String("indexType", DefaultIndexType) // mapping types are gone from Elasticsearch 7+ and OpenSearch
	p.String("clusterName", "")             // only the transport client used it
	p.Enum("client", "rest", "transport", "rest")
	batch := p.IntRange("batchSize", DefaultBatchSize, 1, math.MaxInt32)
	if p.Has("ttl") {
		p.String("ttl", "")
		log.Warn("elasticsearch sink: ttl is ignored: Elasticsearch removed document TTLs in 5.0; use an index lifecycle policy", "sink", env.Name)
	}
	if ser, ok := parseSerializer(p.String("serializer", "logstash")); ok {
		opt.Serializer = ser
	} else {
		p.Errorf("serializer", "%q is not supported; use Flume's org.apache.flume.sink.elasticsearch.ElasticSearchLogStashEventSerializer "+
			"(logstash, the default), org.apache.flume.sink.elasticsearch.ElasticSearchDynamicSerializer (dynamic), "+
			"or sluice (a JSON body as is, else message + headers)", p.String("serializer", ""))
	}
	for _, k := range p.Keys("serializer.") {
		p.MarkUsed(k) // Flume passes them to the serializer; neither of Flume's reads any
	}
	builder := strings.ToLower(p.String("indexNameBuilder", timeBasedBuilder))
	dateFormat := p.String("indexNameBuilder.dateFormat", "yyyy-MM-dd")
	tz := p.String("indexNameBuilder.timeZone", "Etc/UTC")
	switch builder {
	case timeBasedBuilder, "time":
	case simpleBuilder, "simple":
	default:
		p.Errorf("indexNameBuilder", "%q is not supported; use %s (the default: indexName + \"-\" + the event's date) or %s (indexName as is)",
			builder, "org.apache.flume.sink.elasticsearch.TimeBasedIndexNameBuilder", "org.apache.flume.sink.elasticsearch.SimpleIndexNameBuilder")
	}

	// sluice's.
	dataStream := p.Bool("dataStream", false)
	opDefault := "index"
	if dataStream {
		opDefault = "create"
	}
	opt.OpType = p.Enum("opType", opDefault, "index", "create")
	if dataStream && opt.OpType != "create" {
		p.Errorf("opType", "data streams only accept op_type create; remove opType or set it to create")
	}
	pipeline := p.String("pipeline", "")
	opt.IDHeader = p.String("idHeader", "")
	opt.Username = p.String("username", "")
	opt.Password = p.String("password", "")
	opt.APIKey = p.String("apiKey", "")
	if opt.APIKey != "" && opt.Username != "" {
		p.Errorf("apiKey", "set either apiKey or username/password, not both")
	}
	if opt.Password != "" && opt.Username == "" {
		p.Errorf("password", "password is set without username")
	}
	opt.TLS = tlsconf.ReadClient(p)
	if ca := p.String("caFile", ""); ca != "" {
		opt.TLS.Truststore, opt.TLS.TruststoreType = ca, "pem"
	}
	comp := p.Enum("compression", "none", "none", "gzip")
	opt.Gzip = comp == "gzip"
	opt.GzipLevel = p.IntRange("compressionLevel", 1, 1, 9)
	opt.MaxBytes = p.IntRange("bulk.maxBytes", DefaultMaxBytes, 1024, math.MaxInt32)
	opt.RequestTimeout = ms(p.IntRange("requestTimeout", int(DefaultRequestTimeout/time.Millisecond), 1, math.MaxInt32))
	opt.MaxInFlight = p.IntRange("maxInFlight", 1, 1, 64)
	opt.InitialBackoff = ms(p.IntRange("retry.initialBackoff", int(DefaultInitialBackoff/time.Millisecond), 1, math.MaxInt32))
	opt.MaxBackoff = ms(p.IntRange("retry.maxBackoff", int(DefaultMaxBackoff/time.Millisecond), 1, math.MaxInt32))
	opt.MaxAttempts = p.IntRange("retry.maxAttempts", DefaultMaxAttempts, 1, 1000)
	opt.DeadLetterFile = p.String("deadLetter.file", "")
	query := url.Values{}
	for _, k := range p.Keys("query.") {
		query.Set(strings.TrimPrefix(k, "query."), p.String(k, ""))
	}

	// Index name.
	suffix := ""
	loc := time.UTC
	if l, err := time.LoadLocation(tz); err != nil {
		p.Errorf("indexNameBuilder.timeZone", "unknown time zone %q; use an IANA name such as Etc/UTC or Europe/Paris", tz)
	} else {
		loc = l
	}
	if (builder == timeBasedBuilder || builder == "time") && !dataStream {
		layout, err := javaDateLayout(dateFormat)
		if err != nil {
			p.Errorf("indexNameBuilder.dateFormat", "%v", err)
		}
		suffix = layout
	}
	tmpl, err := parseIndex(indexName, "", loc)
	if err != nil {
		p.Errorf("indexName", "%v", err)
		tmpl, _ = parseIndex(DefaultIndexName, "", loc)
	}
	if suffix != "" && !tmpl.hasTimeEscape() { // else the name says where the date goes
		tmpl, _ = parseIndex(tmpl.source, suffix, loc)
	}
	opt.Index = tmpl

	// Hosts.
	anyTLS := opt.TLS.Enabled
	for _, h := range hosts {
		u, err := hostURL(h, opt.TLS.Enabled)
		if err != nil {
			p.Errorf("hostNames", "%v", err)
			continue
		}
		if u.Scheme == "https" {
			anyTLS = true
		}
		if u.Port() == "9300" {
			log.Warn("elasticsearch sink: port 9300 is Elasticsearch's transport port; sluice speaks the REST API, usually on 9200", "sink", env.Name, "host", h)
		}
		q := u.Query()
		for k, v := range query {
			q[k] = v
		}
		if pipeline != "" {
			q.Set("pipeline", pipeline)
		}
		if !q.Has("filter_path") {
			q.Set("filter_path", "errors,items.*.status,items.*.error")
		}
		u.RawQuery = q.Encode()
		u.Path = strings.TrimSuffix(u.Path, "/") + "/_bulk"
		opt.BulkURLs = append(opt.BulkURLs, u.String())
	}
	opt.TLS.Enabled = anyTLS

	c := metrics.NewSinkCounters(env.Name, env.Type)
	env.Registry().Add(c.Set)
	w := NewWriter(opt, c, env.Registry(), log)
	return flow.NewBatchSink(env, w, batch, c), w
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// hostURL parses one hostNames entry: host, host:port, or a URL with a
// scheme and an optional base path. A bare host gets port 9200; a URL
// without a port uses its scheme's.
func hostURL(h string, ssl bool) (*url.URL, error) {
	if !strings.Contains(h, "://") {
		scheme := "http"
		if ssl {
			scheme = "https"
		}
		host := h
		path := ""
		if i := strings.IndexByte(h, '/'); i >= 0 {
			host, path = h[:i], h[i:]
		}
		if _, _, err := net.SplitHostPort(host); err != nil {
			host = net.JoinHostPort(strings.Trim(host, "[]"), DefaultPort)
		}
		h = scheme + "://" + host + path
	}
	u, err := url.Parse(h)
	if err != nil {
		return nil, fmt.Errorf("%q is not host:port or a URL: %v", h, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: the scheme must be http or https", h)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q has no host", h)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%q holds credentials; set username and password instead", u.Redacted())
	}
	return u, nil
}
