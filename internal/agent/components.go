package agent

import (
	"sort"
	"strings"

	filechannel "github.com/sluicehq/sluice/internal/channel/file"
	kafkachannel "github.com/sluicehq/sluice/internal/channel/kafka"
	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/interceptor"
	avrosink "github.com/sluicehq/sluice/internal/sink/avro"
	essink "github.com/sluicehq/sluice/internal/sink/elasticsearch"
	"github.com/sluicehq/sluice/internal/sink/fileroll"
	hdfssink "github.com/sluicehq/sluice/internal/sink/hdfs"
	kafkasink "github.com/sluicehq/sluice/internal/sink/kafka"
	loggersink "github.com/sluicehq/sluice/internal/sink/logger"
	nullsink "github.com/sluicehq/sluice/internal/sink/null"
	tcpsink "github.com/sluicehq/sluice/internal/sink/tcp"
	thriftsink "github.com/sluicehq/sluice/internal/sink/thrift"
	avrosource "github.com/sluicehq/sluice/internal/source/avro"
	"github.com/sluicehq/sluice/internal/source/exec"
	httpsource "github.com/sluicehq/sluice/internal/source/http"
	kafkasource "github.com/sluicehq/sluice/internal/source/kafka"
	"github.com/sluicehq/sluice/internal/source/netcat"
	"github.com/sluicehq/sluice/internal/source/seq"
	"github.com/sluicehq/sluice/internal/source/spooldir"
	syslogsource "github.com/sluicehq/sluice/internal/source/syslog"
	"github.com/sluicehq/sluice/internal/source/taildir"
	thriftsource "github.com/sluicehq/sluice/internal/source/thrift"
)

// This file is the one place that names every component type. A type is
// looked up by its Flume alias, case-insensitively, or by its Flume Java
// class name (see classNames).

var sourceTypes = map[string]flow.SourceFactory{
	"spooldir":  spooldir.New,
	"taildir":   taildir.New,
	"seq":       seq.New,
	"netcat":    netcat.New,
	"netcatudp": netcat.NewUDP,
	"http":      httpsource.New,
	"exec":      exec.New,
	"avro":      avrosource.New,
	"thrift":    thriftsource.New,
	"kafka":     kafkasource.New,

	"syslogtcp":           syslogsource.NewTCP,
	"syslogudp":           syslogsource.NewUDP,
	"multiport_syslogtcp": syslogsource.NewMultiport,
}

var channelTypes = map[string]flow.ChannelFactory{
	"memory": memory.New,
	"file":   filechannel.New,
	"kafka":  kafkachannel.New,
}

var sinkTypes = map[string]flow.SinkFactory{
	"null":          nullsink.New,
	"logger":        loggersink.New,
	"file_roll":     fileroll.New,
	"tcp":           tcpsink.New,
	"avro":          avrosink.New,
	"thrift":        thriftsink.New,
	"elasticsearch": essink.New,
	"kafka":         kafkasink.New,
	"hdfs":          hdfssink.New,
}

// classNames maps Flume's Java class names (lower-cased) to sluice type
// names, for sources, channels and sinks alike; the kind disambiguates
// "kafka" and "avro". Both the 1.9-1.11 and the later package names are
// listed where Flume moved a class.
var classNames = map[string]string{
	"org.apache.flume.source.sequencegeneratorsource":       "seq",
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

// flumeOnly are Flume types sluice does not provide (yet), so a Flume
// config that uses one gets a clear message rather than "unknown type".
var flumeOnly = map[string]bool{
	"source:jms": true, "channel:jdbc": true, "channel:spillablememory": true,
	"sink:irc": true, "sink:hbase": true, "sink:asynchbase": true, "sink:hbase2": true, "sink:hive": true, "sink:http": true,
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

func knownNames[T any](m map[string]T) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
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
