package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/agent"
)

// guideTable is one property table of the Flume 1.11 User Guide, for a
// component sluice provides: the keys it lists (testdata/
// flume-userguide-keys.json, taken from the guide's tables; rows that are
// prefixes or prose, such as "Other Kafka Producer Properties", left out).
type guideTable struct {
	Title string   `json:"title"`
	Kind  string   `json:"kind"`
	Type  string   `json:"type"`
	Keys  []string `json:"keys"`
}

// TestUserGuideKeysAreRead sets every key of every User Guide table of a
// component sluice provides, and checks that sluice reads each one: no
// "sluice does not read it" warning, the sign of a Flume setting silently
// lost. (Values are placeholders: errors about them are not this test's
// business.)
func TestUserGuideKeysAreRead(t *testing.T) {
	b, err := os.ReadFile("testdata/flume-userguide-keys.json")
	if err != nil {
		t.Fatal(err)
	}
	var tables []guideTable
	if err := json.Unmarshal(b, &tables); err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		t.Run(tb.Title+"/"+strings.Join(tb.Keys[:min(1, len(tb.Keys))], ""), func(t *testing.T) {
			conf, prefix := guideConf(tb)
			for _, k := range tb.Keys {
				// The guide's backoff.CODE stands for a code or class.
				conf += fmt.Sprintf("%s%s = %s\n", prefix, strings.Replace(k, ".CODE", ".503", 1), placeholder(k))
			}
			file := filepath.Join(t.TempDir(), "a.properties")
			if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			probs, _ := agent.Check(context.Background(), agent.Options{File: file, Name: "a1"})
			if probs == nil {
				return
			}
			for _, p := range probs.Sorted() {
				if strings.Contains(p.Msg, "sluice does not read it") {
					t.Errorf("%s: %s", p.Key, p.Msg)
				}
			}
		})
	}
}

// guideConf is an agent around the component of tb, and the prefix of its keys.
func guideConf(tb guideTable) (conf, prefix string) {
	conf = "a1.sources = r1\na1.channels = c1\na1.sinks = k1\n"
	src := "a1.sources.r1.type = seq\na1.sources.r1.channels = c1\n"
	ch := "a1.channels.c1.type = memory\n"
	sink := "a1.sinks.k1.type = null\na1.sinks.k1.channel = c1\n"
	switch tb.Kind {
	case "source":
		src = fmt.Sprintf("a1.sources.r1.type = %s\na1.sources.r1.channels = c1\n", tb.Type)
		prefix = "a1.sources.r1."
	case "channel":
		ch = fmt.Sprintf("a1.channels.c1.type = %s\n", tb.Type)
		prefix = "a1.channels.c1."
	case "sink":
		sink = fmt.Sprintf("a1.sinks.k1.type = %s\na1.sinks.k1.channel = c1\n", tb.Type)
		prefix = "a1.sinks.k1."
	case "interceptor":
		src += fmt.Sprintf("a1.sources.r1.interceptors = i1\na1.sources.r1.interceptors.i1.type = %s\n", tb.Type)
		prefix = "a1.sources.r1.interceptors.i1."
	}
	return conf + src + ch + sink, prefix
}

// placeholder is a value of the right shape for key, so that reading it
// gets as far as it can.
func placeholder(key string) string {
	switch {
	case strings.Contains(key, "bootstrap.servers") || key == "brokerList":
		return "127.0.0.1:9092"
	case strings.Contains(strings.ToLower(key), "dir") || strings.HasSuffix(key, "path") || key == "positionFile" || key == "endpoint":
		return "http://127.0.0.1:1/x"
	default:
		return "1"
	}
}
