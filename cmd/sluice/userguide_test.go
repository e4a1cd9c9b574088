package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// userGuideDir holds the example configurations of Flume's User Guide,
// verbatim, each completed where it is a fragment (see its header).
const userGuideDir = "../../internal/config/testdata/flume-userguide"

// userGuideCase is what `sluice validate` must make of one example: exit 0
// (accepted) or 1 (refused), and exactly these problem lines, in validate's
// order, each containing its substring (an accepted example's lines are its
// warnings; none means no problem line at all).
type userGuideCase struct {
	refused bool
	lines   []string
	args    []string          // more command-line arguments
	env     map[string]string // environment variables set for the run
	unset   []string          // environment variables removed for the run
}

const (
	notProvided = "is not provided by sluice; the alternative"
	javaClass   = "is a Java class, and sluice runs no Java plugins"
	encryption  = "a1.channels.c1.encryption.activeKey: file channel encryption (encryption.*) is not supported by sluice, and ignoring it would write the events unencrypted"
	sequence    = "a1.sinks.k1.serializer: ignored, with serializer.compressionCodec"
)

// jaasArgs are the guide's JAVA_OPTS for its Kafka Kerberos examples
// (flume-env.sh): the JAAS file with the KafkaClient login, and krb5.conf.
// validate reads neither (the agent does, at start).
var jaasArgs = []string{"-Djava.security.auth.login.config=" + filepath.Join(userGuideDir, "flume_jaas.conf"),
	"-Djava.security.krb5.conf=/path/to/krb5.conf"}

var userGuideCases = map[string]userGuideCase{
	"simple-example": {},
	// Flume 1.10+ substitution: ${env:}, ${sys:}, and a bare ${NC_PORT}
	// set by a second -f file.
	"substitution-env":         {env: map[string]string{"NC_PORT": "44444"}},
	"substitution-sys":         {args: []string{"-DNC_PORT=44444"}, unset: []string{"NC_PORT"}},
	"substitution-config-file": {args: []string{"-f", filepath.Join(userGuideDir, "substitution-config-file.override.conf")}, unset: []string{"NC_PORT"}},

	"defining-the-flow":                 {},
	"configuring-individual-components": {},
	"multiple-flows":                    {},
	"multi-agent-flow-weblog":           {},
	"multi-agent-flow-hdfs":             {},
	"fan-out-flow":                      {},
	// The guide sets selector.mapping.AZ twice.
	"fan-out-flow-optional": {lines: []string{"selector.mapping.AZ: ignored: set again on line 12, and the later value wins, as in Flume"}},

	"avro-source":                            {},
	"thrift-source":                          {},
	"exec-source":                            {},
	"exec-source-shell":                      {},
	"jms-source":                             {refused: true, lines: []string{"a1.sources.r1.type: Flume type jms " + notProvided + " is the Kafka source"}},
	"spooling-directory-source":              {},
	"taildir-source":                         {lines: []string{"a1.sources.ri.maxBatchCount: ignored: source ri is not listed in a1.sources"}}, // "ri": the guide's typo
	"twitter-source":                         {refused: true, lines: []string{"TwitterSource " + notProvided}},
	"kafka-source-topics":                    {},
	"kafka-source-topics-regex":              {},
	"kafka-source-ssl":                       {},
	"kafka-source-ssl-hostname-verification": {},
	"kafka-source-ssl-client-auth":           {},
	"kafka-source-ssl-key-password":          {},
	"kafka-source-kerberos":                  {args: jaasArgs},
	"kafka-source-kerberos-ssl":              {args: jaasArgs},
	"netcat-tcp-source":                      {},
	"netcat-udp-source":                      {},
	"sequence-generator-source":              {},
	"syslog-tcp-source":                      {},
	"multiport-syslog-tcp-source":            {},
	"syslog-udp-source":                      {},
	// The guide's custom handler class (refused) and two Jetty settings (notes).
	"http-source": {refused: true, lines: []string{
		`a1.sources.r1.handler: handler "org.example.rest.RestHandler" is not supported; sluice's HTTP source has org.apache.flume.source.http.JSONHandler (the default), org.apache.flume.sink.solr.morphline.BlobHandler and org.apache.flume.source.http.BLOBHandler`,
		"a1.sources.r1.handler.nickname: ignored: sluice does not read it",
		"a1.sources.r1.HttpConfiguration.sendServerVersion: ignored (not needed by sluice): a Jetty setting",
		"a1.sources.r1.ServerConnector.idleTimeout: ignored (not needed by sluice): a Jetty setting"}},
	"stress-source":        {},
	"avro-legacy-source":   {refused: true, lines: []string{"AvroLegacySource " + notProvided + " is avro"}},
	"thrift-legacy-source": {refused: true, lines: []string{"ThriftLegacySource " + notProvided + " is avro"}},
	"custom-source":        {refused: true, lines: []string{`a1.sources.r1.type: source type "org.example.MySource" ` + javaClass}},
	"scribe-source":        {refused: true, lines: []string{"ScribeSource " + notProvided}},

	"hdfs-sink":                            {},
	"hive-sink":                            {refused: true, lines: []string{"a1.sinks.k1.type: Flume type hive " + notProvided}},
	"logger-sink":                          {},
	"avro-sink":                            {},
	"thrift-sink":                          {},
	"irc-sink":                             {refused: true, lines: []string{"a1.sinks.k1.type: Flume type irc " + notProvided}},
	"file-roll-sink":                       {},
	"null-sink":                            {},
	"hbase-sink":                           {refused: true, lines: []string{"a1.sinks.k1.type: Flume type hbase " + notProvided}},
	"hbase2-sink":                          {refused: true, lines: []string{"a1.sinks.k1.type: Flume type hbase2 " + notProvided}},
	"asynchbase-sink":                      {refused: true, lines: []string{"a1.sinks.k1.type: Flume type asynchbase " + notProvided}},
	"morphline-solr-sink":                  {refused: true, lines: []string{"MorphlineSolrSink " + notProvided + " is elasticsearch"}},
	"kafka-sink":                           {lines: []string{"a1.sinks.k1.kafka.flumeBatchSize: ignored: sluice does not read it; did you mean a1.sinks.k1.flumeBatchSize?"}},
	"kafka-sink-ssl":                       {},
	"kafka-sink-ssl-hostname-verification": {},
	"kafka-sink-ssl-client-auth":           {},
	"kafka-sink-ssl-key-password":          {},
	"kafka-sink-kerberos":                  {args: jaasArgs},
	"kafka-sink-kerberos-ssl":              {args: jaasArgs},
	"http-sink":                            {},
	"custom-sink":                          {refused: true, lines: []string{`a1.sinks.k1.type: sink type "org.example.MySink" ` + javaClass}},

	"memory-channel":    {},
	"jdbc-channel":      {lines: []string{"a1.channels.c1.type: runs as a file channel of 1000000 events in "}},
	"kafka-channel":     {},
	"kafka-channel-ssl": {},
	"kafka-channel-ssl-hostname-verification": {},
	"kafka-channel-ssl-client-auth":           {},
	"kafka-channel-ssl-key-password":          {},
	"kafka-channel-kerberos":                  {args: jaasArgs},
	"kafka-channel-kerberos-ssl":              {args: jaasArgs},
	"file-channel":                            {},
	"file-channel-encryption":                 {refused: true, lines: []string{encryption, "a1.channels.c1.encryption.keyProvider: ignored: set again on line 8"}}, // the guide sets keyProvider twice
	"file-channel-encryption-new-key":         {refused: true, lines: []string{encryption}},
	"file-channel-encryption-key-passwords":   {refused: true, lines: []string{encryption}},
	"spillable-memory-channel":                {lines: []string{"a1.channels.c1.type: runs as a file channel of 1010000 events"}},
	"spillable-memory-channel-disk-only":      {lines: []string{"a1.channels.c1.type: runs as a file channel of 1000000 events"}},
	"spillable-memory-channel-memory-only":    {lines: []string{"a1.channels.c1.type: runs as a memory channel of 100000 events"}},
	"custom-channel":                          {refused: true, lines: []string{`a1.channels.c1.type: channel type "org.example.MyChannel" ` + javaClass}},

	"replicating-selector":    {},
	"load-balancing-selector": {},
	"multiplexing-selector":   {},
	"custom-selector":         {refused: true, lines: []string{`a1.sources.r1.selector.type: selector type "org.example.MyChannelSelector" ` + javaClass + "; its selector types are expression, load_balancing, multiplexing, replicating (or their Flume class names); an expression selector (selector.when.CHANNEL = EXPR) routes by any rule over the event"}},

	"sink-processors":               {},
	"failover-sink-processor":       {},
	"load-balancing-sink-processor": {},

	"body-text-serializer": {},
	// Without hdfs.fileType the hdfs sink writes SequenceFiles, which use
	// no serializer, in Flume as in sluice.
	"flume-event-avro-serializer": {lines: []string{sequence + ": hdfs.fileType is SequenceFile (the default), which uses no serializer"}},
	"avro-event-serializer":       {lines: []string{sequence + ", serializer.schemaURL: hdfs.fileType is SequenceFile"}},

	// The guide's sink writes filePrefix for hdfs.filePrefix.
	"interceptors":                          {lines: []string{"a1.sinks.k1.filePrefix: ignored: sluice does not read it; did you mean a1.sinks.k1.hdfs.filePrefix?"}},
	"timestamp-interceptor":                 {},
	"host-interceptor":                      {},
	"static-interceptor":                    {},
	"morphline-interceptor":                 {refused: true, lines: []string{"MorphlineInterceptor$Builder " + notProvided + "s are transform (expressions: docs/transforms.md), regex_filter, regex_extractor or search_replace"}},
	"search-replace-interceptor":            {},
	"search-replace-interceptor-groups":     {},
	"regex-extractor-interceptor-example-1": {},
	"regex-extractor-interceptor-example-2": {},

	"config-filter-env": {env: map[string]string{"my_keystore_password": "Secret123"}},
	// The guide's helper scripts do not exist here: the start fails
	// naming the filter and the key, never a value.
	"config-filter-external":   {refused: true, lines: []string{"a1.sources.r1.keystorePassword: config filter f1 (external) failed for key my_keystore_password: fork/exec /usr/bin/passwordResolver.sh"}},
	"config-filter-external-2": {refused: true, lines: []string{"a1.sinks.k1.sink.directory: config filter f1 (external) failed for key agent_name: fork/exec /usr/bin/generateUniqId.sh"}},
	"config-filter-hadoop":     {refused: true, lines: []string{"a1.configfilters.f1.type: Flume type hadoop (Hadoop credential store config filter) " + notProvided}},
}

var agentHeader = regexp.MustCompile(`(?m)^# Agent: (\S+)\.`)

// TestFlumeUserGuideExamples runs `sluice validate` on every example
// configuration of Flume's User Guide and checks what a Flume user gets:
// accepted with only the warnings listed (each a correct one), or refused
// with exactly the listed lines (a Flume type sluice does not provide,
// named with its alternatives; a security setting it cannot honour).
func TestFlumeUserGuideExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(userGuideDir, "*.properties"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in %s: %v", userGuideDir, err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".properties")
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			tc, ok := userGuideCases[name]
			if !ok {
				t.Fatalf("%s has no expected outcome in userGuideCases", file)
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			m := agentHeader.FindSubmatch(data)
			if m == nil {
				t.Fatalf("%s has no '# Agent: NAME.' header", file)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			for _, k := range tc.unset {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			args := append([]string{"validate", "-f", file, "-n", string(m[1])}, tc.args...)
			var out, errOut bytes.Buffer
			code := run(context.Background(), args, nil, &out, &errOut)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if l != "" && !strings.Contains(l, " is valid") {
					got = append(got, l)
				}
			}
			wantCode := 0
			if tc.refused {
				wantCode = 1
			}
			if code != wantCode || len(got) != len(tc.lines) {
				t.Fatalf("exit %d, want %d; %d problem lines, want %d:\n%s%s", code, wantCode, len(got), len(tc.lines), out.String(), errOut.String())
			}
			for i, w := range tc.lines {
				if !strings.Contains(got[i], w) {
					t.Errorf("line %d:\n  %s\nwant it to contain\n  %s", i+1, got[i], w)
				}
			}
		})
	}
	for name := range userGuideCases {
		if !seen[name] {
			t.Errorf("userGuideCases has %s, which is not in %s", name, userGuideDir)
		}
	}
}
