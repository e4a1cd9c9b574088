package agent

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/internal/channel/alias"
	"github.com/sluicehq/sluice/internal/channel/file"
	"github.com/sluicehq/sluice/internal/channel/kafka"
	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/interceptor"
	"github.com/sluicehq/sluice/internal/sink/avro"
	"github.com/sluicehq/sluice/internal/sink/elasticsearch"
	"github.com/sluicehq/sluice/internal/sink/fileroll"
	"github.com/sluicehq/sluice/internal/sink/hdfs"
	"github.com/sluicehq/sluice/internal/sink/http"
	"github.com/sluicehq/sluice/internal/sink/kafka"
	"github.com/sluicehq/sluice/internal/sink/logger"
	"github.com/sluicehq/sluice/internal/sink/null"
	"github.com/sluicehq/sluice/internal/sink/otlp"
	"github.com/sluicehq/sluice/internal/sink/tcp"
	"github.com/sluicehq/sluice/internal/sink/thrift"
	"github.com/sluicehq/sluice/internal/source/avro"
	"github.com/sluicehq/sluice/internal/source/exec"
	"github.com/sluicehq/sluice/internal/source/http"
	"github.com/sluicehq/sluice/internal/source/kafka"
	"github.com/sluicehq/sluice/internal/source/netcat"
	"github.com/sluicehq/sluice/internal/source/otlp"
	"github.com/sluicehq/sluice/internal/source/seq"
	"github.com/sluicehq/sluice/internal/source/spooldir"
	"github.com/sluicehq/sluice/internal/source/syslog"
	"github.com/sluicehq/sluice/internal/source/taildir"
	"github.com/sluicehq/sluice/internal/source/thrift"
)

// This file is the one place that names every component type. A type is
// looked up by its Flume alias, case-insensitively, or by its Flume Java
// class name (see classNames).

var sourceTypes = map[string]flow.SourceFactory{
	"spooldir":  spooldirsource.New,
	"taildir":   taildirsource.New,
	"seq":       seqsource.New,
	"stress":    seqsource.NewStress,
	"netcat":    netcatsource.New,
	"netcatudp": netcatsource.NewUDP,
	"http":      httpsource.New,
	"exec":      execsource.New,
	"avro":      avrosource.New,
	"thrift":    thriftsource.New,
	"kafka":     kafkasource.New,
	"otlp":      otlpsource.New,

	"syslogtcp":           syslogsource.NewTCP,
	"syslogudp":           syslogsource.NewUDP,
	"multiport_syslogtcp": syslogsource.NewMultiport,
}

var channelTypes = map[string]flow.ChannelFactory{
	"memory": memorychannel.New,
	"file":   filechannel.New,
	"kafka":  kafkachannel.New,
	// Flume's spillable memory channel, run as a file (or memory) channel.
	"spillablememory": aliaschannel.NewSpillable,
	"jdbc":            aliaschannel.NewJDBC,
}

var sinkTypes = map[string]flow.SinkFactory{
	"null":          nullsink.New,
	"logger":        loggersink.New,
	"file_roll":     filerollsink.New,
	"tcp":           tcpsink.New,
	"avro":          avrosink.New,
	"thrift":        thriftsink.New,
	"elasticsearch": elasticsearchsink.New,
	"kafka":         kafkasink.New,
	"hdfs":          hdfssink.New,
	"http":          httpsink.New,
	"otlp":          otlpsink.New,
}

// classNames maps Flume's Java class names (lower-cased) to sluice type
// names, for sources, channels and sinks alike; the kind disambiguates
// "kafka" and "avro". Both the 1.9-1.11 and the later package names are
// listed where Flume moved a class.
var classNames = map[string]string{
	"org.apache.flume.source.sequencegeneratorsource":       "seq",
	"org.apache.flume.source.stresssource":                  "stress",
	"org.apache.flume.source.netcatsource":                  "netcat",
	"org.apache.flume.source.netcatudpsource":               "netcatudp",
	"org.apache.flume.source.execsource":                    "exec",
	"org.apache.flume.source.http.httpsource":               "http",
	"org.apache.flume.source.avrosource":                    "avro",
	"org.apache.flume.source.thriftsource":                  "thrift",
	"org.apache.flume.source.syslogtcpsource":               "syslogtcp",
	"org.apache.flume.source.multiportsyslogtcpsource":      "multiport_syslogtcp",
	"org.apache.flume.source.syslogudpsource":               "syslogudp",
	"org.apache.flume.source.spooldirectorysource":          "spooldir",
	"org.apache.flume.source.taildir.taildirsource":         "taildir",
	"org.apache.flume.source.jms.jmssource":                 "jms",
	"org.apache.flume.source.kafka.kafkasource":             "kafka",
	"org.apache.flume.channel.memorychannel":                "memory",
	"org.apache.flume.channel.file.filechannel":             "file",
	"org.apache.flume.channel.jdbc.jdbcchannel":             "jdbc",
	"org.apache.flume.channel.spillablememorychannel":       "spillablememory",
	"org.apache.flume.channel.kafka.kafkachannel":           "kafka",
	"org.apache.flume.sink.nullsink":                        "null",
	"org.apache.flume.sink.loggersink":                      "logger",
	"org.apache.flume.sink.rollingfilesink":                 "file_roll",
	"org.apache.flume.sink.avrosink":                        "avro",
	"org.apache.flume.rpc.avro.sink.avrosink":               "avro",
	"org.apache.flume.sink.thriftsink":                      "thrift",
	"org.apache.flume.rpc.thrift.sink.thriftsink":           "thrift",
	"org.apache.flume.sink.hdfs.hdfseventsink":              "hdfs",
	"org.apache.flume.sink.irc.ircsink":                     "irc",
	"org.apache.flume.sink.elasticsearch.elasticsearchsink": "elasticsearch",
	"org.apache.flume.sink.hbase.hbasesink":                 "hbase",
	"org.apache.flume.sink.hbase.asynchbasesink":            "asynchbase",
	"org.apache.flume.sink.hbase2.hbase2sink":               "hbase2",
	"org.apache.flume.sink.hive.hivesink":                   "hive",
	"org.apache.flume.sink.http.httpsink":                   "http",
	"org.apache.flume.sink.kafka.kafkasink":                 "kafka",
}

// missingTypes are the Flume types sluice does not provide, by kind and
// canonical name, each with what a user can run instead. A config naming
// one gets "Flume type X is not provided by sluice; the alternatives are
// ...", one message shape for all of them, rather than "unknown type".
// (When sluice gains one, its entry in the factory tables above wins.)
var missingTypes = map[string][]string{
	"source:jms":          {"the Kafka source (with the messages bridged from JMS into Kafka)"},
	"source:twitter":      {"http", "exec (with a program that reads the API you need)"},
	"source:scribe":       {"syslogtcp", "netcat", "http", "avro"},
	"source:avrolegacy":   {"avro"},
	"source:thriftlegacy": {"avro"},

	"sink:irc":            {"logger", "tcp"},
	"sink:hbase":          {"kafka", "avro (to an agent or service that writes HBase)"},
	"sink:asynchbase":     {"kafka", "avro (to an agent or service that writes HBase)"},
	"sink:hbase2":         {"kafka", "avro (to an agent or service that writes HBase)"},
	"sink:hive":           {"file_roll", "kafka"},
	"sink:morphline_solr": {"elasticsearch"},
	"sink:kite":           {"file_roll", "kafka"},

	"interceptor:morphline": {"transform (expressions: docs/transforms.md)", "regex_filter", "regex_extractor", "search_replace"},
}

// missingClassNames maps the class names of Flume types sluice lacks that
// have no alias (or whose alias is not in classNames) to a canonical name
// for missingTypes.
var missingClassNames = map[string]string{
	"org.apache.flume.source.twitter.twittersource":                     "twitter",
	"org.apache.flume.source.scribe.scribesource":                       "scribe",
	"org.apache.flume.source.avrolegacy.avrolegacysource":               "avrolegacy",
	"org.apache.flume.source.thriftlegacy.thriftlegacysource":           "thriftlegacy",
	"org.apache.flume.sink.solr.morphline.morphlinesolrsink":            "morphline_solr",
	"org.apache.flume.sink.kite.datasetsink":                            "kite",
	"org.apache.flume.sink.solr.morphline.morphlineinterceptor$builder": "morphline",
}

// missingTypeMessage returns the message for a Flume type of kind that
// sluice lacks, or "" when typ is not one.
func missingTypeMessage(kind, typ string) string {
	t := strings.ToLower(strings.TrimSpace(typ))
	if c, ok := classNames[t]; ok {
		t = c
	} else if c, ok := missingClassNames[t]; ok {
		t = c
	}
	alts, ok := missingTypes[kind+":"+t]
	if !ok {
		return ""
	}
	what := "the alternatives are "
	if len(alts) == 1 {
		what = "the alternative is "
	}
	return fmt.Sprintf("Flume type %s is not provided by sluice; %s%s", strings.TrimSpace(typ), what, orList(alts))
}

// orList joins "a", "b", "c" as "a, b or c".
func orList(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// ignoredKeys are keys Flume reads that sluice deliberately does without
// (JVM, Netty or thread-pool tuning), by kind:type, with the reason. A
// config that sets one gets a note (INFO at start, listed by validate),
// never a warning: nothing the user meant is lost.
var ignoredKeys = map[string]map[string]string{
	"source:avro":   {"threads": "Flume's Netty worker-thread limit; sluice serves each connection on its own goroutine"},
	"source:thrift": {"threads": "Flume's worker-thread limit; sluice serves each connection on its own goroutine"},
	"source:multiport_syslogtcp": {
		"readBufferBytes": "Flume's Mina read-buffer size; sluice sizes its buffers itself",
		"readBufferSize":  "the User Guide's name for readBufferBytes (Flume's code reads readBufferBytes and ignores this one); sluice sizes its buffers itself",
		"numProcessors":   "Flume's Mina processor-thread count; sluice needs no such setting",
	},
	"sink:avro": {"maxIoWorkers": "Flume's Netty I/O thread count; sluice needs no such setting"},
	"channel:file": {
		"use-fast-replay":          "sluice always replays fast, from its own log",
		"use-log-replay-v1":        "sluice has one replay, from its own log; Flume's old replay logic has no counterpart",
		"fsyncPerTransaction":      "sluice always syncs every commit before acknowledging it (group commit keeps that cheap), which is at least as safe",
		"fsyncInterval":            "it counts only with fsyncPerTransaction = false; sluice syncs every commit",
		"compressBackupCheckpoint": "sluice writes its backup checkpoint (useDualCheckpoints) uncompressed",
	},
}

// refusedGroups are Flume feature groups sluice does not support whose loss
// would change how data is handled: any key under the prefix is refused in
// one line (rather than one "unknown" warning per key).
var refusedGroups = map[string][]refusedGroup{
	"channel:file": {{
		prefix: "encryption.",
		msg: "file channel encryption (encryption.*) is not supported by sluice, and ignoring it would write the events unencrypted; " +
			"remove the encryption keys and encrypt the disk instead (for example dm-crypt/LUKS), or keep this channel on Flume",
	}},
}

type refusedGroup struct {
	prefix, msg string
}

// canonicalType maps what a user wrote as a component's type to sluice's
// type name: aliases case-insensitively, class names through classNames.
func canonicalType(typ string) string {
	t := strings.ToLower(strings.TrimSpace(typ))
	if c, ok := classNames[t]; ok {
		return c
	}
	return t
}

// interceptorType resolves an interceptor's type: a Flume alias in any
// case, or a builder class name.
func interceptorType(typ string) (string, flow.InterceptorFactory) {
	t := strings.TrimSpace(typ)
	if f, ok := interceptor.Types[t]; ok {
		return t, f
	}
	if f, ok := interceptor.Types[strings.ToLower(t)]; ok {
		return strings.ToLower(t), f
	}
	for name, f := range interceptor.Types {
		if strings.EqualFold(name, t) {
			return name, f
		}
	}
	return t, nil
}

func knownNames[T any](m map[string]T) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// interceptorAliases lists the short interceptor type names.
func interceptorAliases() string {
	var names []string
	for n := range interceptor.Types {
		if !strings.Contains(n, ".") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
